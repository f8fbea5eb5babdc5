use super::*;
use crate::topology::{CpuInfo, NumaNode};

const GI: u64 = 1 << 30;

/// 2 CPUs, one NUMA node with 4Gi: this project's development machine.
fn machine() -> Topology {
    let cpus = (0..2)
        .map(|id| CpuInfo {
            id,
            core: id,
            socket: 0,
            die: 0,
            numa: 0,
            uncore: 0,
        })
        .collect();
    let numa = vec![NumaNode {
        id: 0,
        memory: 4 * GI,
        ..NumaNode::default()
    }];
    Topology { cpus, numa }
}

fn drop_in(name: &str, body: &str) -> (String, String) {
    (
        name.to_string(),
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
}

/// numa-shim's settings and the CPUs its node reserves.
fn shim(yaml: &str) -> (Config, CpuSet) {
    let fields: KubeletConfiguration = serde_yaml_ng::from_str(yaml).unwrap();
    let resolved = fields.resolve(&machine()).unwrap();
    let node = crate::placement::node::Node::new(machine(), resolved.config.clone()).unwrap();
    (resolved.config, node.reserved_cpus())
}

const SHIM: &str =
    "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nmemoryManagerPolicy: Static\n\
                    reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n";

#[test]
fn drop_ins_merge_over_the_main_file_in_order_null_deletes() {
    let main = "kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
                kubeReserved: {cpu: 500m, memory: 1Gi}\n";
    let drop_ins = [
        drop_in(
            "10-a.conf",
            "cpuManagerPolicy: none\nkubeReserved: {cpu: null}\n",
        ),
        drop_in(
            "20-b.conf",
            "memoryManagerPolicy: None\nreservedSystemCPUs: \"1\"\n",
        ),
    ];
    let merged = KubeletConfiguration::running(main, &drop_ins).unwrap();
    assert_eq!(merged.cpu_manager_policy.as_deref(), Some("none"));
    assert_eq!(merged.memory_manager_policy.as_deref(), Some("None"));
    assert_eq!(merged.reserved_system_cpus.as_deref(), Some("1"));
    // Maps merge key by key; `null` removes a key.
    assert_eq!(
        merged.kube_reserved,
        [("memory".to_string(), "1Gi".to_string())].into()
    );
}

#[test]
fn eviction_defaults_apply_before_drop_ins_as_in_the_kubelet() {
    // The kubelet defaults the main file, then merges: a drop-in removing the disk signals keeps
    // the default memory.available.
    let drop_ins = [drop_in(
        "00-h.conf",
        "evictionHard: {nodefs.available: null, imagefs.available: null}\n",
    )];
    let merged = KubeletConfiguration::running("kind: KubeletConfiguration\n", &drop_ins).unwrap();
    let eviction = merged.eviction_hard.unwrap();
    assert_eq!(
        eviction.get("memory.available").map(String::as_str),
        Some("100Mi")
    );
    assert!(!eviction.contains_key("nodefs.available"));
    assert!(eviction.contains_key("nodefs.inodesFree"));
}

#[test]
fn a_drop_in_needs_the_kubelets_api_version_and_kind() {
    let err = KubeletConfiguration::running(
        "kind: KubeletConfiguration\n",
        &[("x.conf".into(), "cpuManagerPolicy: none\n".into())],
    )
    .unwrap_err();
    assert!(err.to_string().contains("drop-in x.conf"), "{err}");
}

#[test]
fn managers_on_in_the_kubelet_are_errors() {
    let (config, reserved) = shim(SHIM);
    let kubelet: KubeletConfiguration = serde_yaml_ng::from_str(SHIM).unwrap();
    let findings = kubelet.conflicts_with(&config, &reserved, &machine());
    let fields: Vec<_> = findings.iter().map(|f| (f.field, f.severity)).collect();
    assert_eq!(
        fields,
        [
            ("cpuManagerPolicy", Severity::Error),
            ("memoryManagerPolicy", Severity::Error)
        ],
        "{findings:?}"
    );
    let off = "cpuManagerPolicy: none\nmemoryManagerPolicy: None\nreservedSystemCPUs: \"0\"\n";
    let kubelet: KubeletConfiguration =
        serde_yaml_ng::from_str(&format!("{off}topologyManagerPolicy: none\n")).unwrap();
    assert_eq!(kubelet.conflicts_with(&config, &reserved, &machine()), []);
    let topology: KubeletConfiguration =
        serde_yaml_ng::from_str(&format!("{off}topologyManagerPolicy: single-numa-node\n"))
            .unwrap();
    let findings = topology.conflicts_with(&config, &reserved, &machine());
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].severity, Severity::Warning);
}

#[test]
fn a_kubelet_reserving_fewer_cpus_than_numa_shim_is_an_error_naming_the_mirror() {
    let (config, reserved) = shim(SHIM);
    let kubelet: KubeletConfiguration =
        serde_yaml_ng::from_str("cpuManagerPolicy: none\n").unwrap();
    let findings = kubelet.conflicts_with(&config, &reserved, &machine());
    assert_eq!(findings.len(), 1, "{findings:?}");
    let f = &findings[0];
    assert_eq!(
        (f.field, f.severity),
        ("reservedSystemCPUs", Severity::Error)
    );
    assert!(
        f.message.contains("reservedSystemCPUs: \"0\""),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("kubeReserved/systemReserved cpu adding up to 1"),
        "{}",
        f.message
    );
    assert!(
        f.message
            .contains("counts 2 allocatable CPUs where numa-shim can place 1"),
        "{}",
        f.message
    );
    // kubeReserved + systemReserved cpu adding up to one CPU mirrors it as well.
    for mirror in [
        "reservedSystemCPUs: \"1\"",
        "kubeReserved: {cpu: 500m}\nsystemReserved: {cpu: 500m}",
    ] {
        let kubelet: KubeletConfiguration = serde_yaml_ng::from_str(mirror).unwrap();
        assert_eq!(
            kubelet.conflicts_with(&config, &reserved, &machine()),
            [],
            "{mirror}"
        );
    }
    // More than numa-shim's: capacity wasted, a warning.
    let kubelet: KubeletConfiguration =
        serde_yaml_ng::from_str("systemReserved: {cpu: 1500m}").unwrap();
    let findings = kubelet.conflicts_with(&config, &reserved, &machine());
    assert_eq!(findings[0].severity, Severity::Warning, "{findings:?}");
    assert!(
        findings[0].message.contains("reserves 1.5 CPUs"),
        "{findings:?}"
    );
}

#[test]
fn memory_reservations_must_match_under_the_static_memory_policy() {
    let (config, reserved) = shim(SHIM);
    let kubelet: KubeletConfiguration = serde_yaml_ng::from_str(
        "reservedSystemCPUs: \"0\"\nevictionHard: {memory.available: 50Mi}",
    )
    .unwrap();
    let findings = kubelet.conflicts_with(&config, &reserved, &machine());
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].severity, Severity::Error);
    assert!(
        findings[0].message.contains("keeps 50Mi"),
        "{}",
        findings[0].message
    );
    assert!(
        findings[0].message.contains("reserves 100Mi"),
        "{}",
        findings[0].message
    );
    // Without the Static memory policy numa-shim pins no memory: nothing to mirror.
    let (config, reserved) = shim("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n");
    assert_eq!(kubelet.conflicts_with(&config, &reserved, &machine()), []);
}

#[test]
fn resize_gates_turned_off_are_warnings_naming_the_kubelet_versions() {
    let (config, reserved) = shim(SHIM);
    let off = "cpuManagerPolicy: none\nmemoryManagerPolicy: None\nreservedSystemCPUs: \"0\"\n";
    let kubelet: KubeletConfiguration = serde_yaml_ng::from_str(&format!(
        "{off}featureGates: {{InPlacePodVerticalScaling: false, InPlacePodLevelResourcesVerticalScaling: false}}\n"
    ))
    .unwrap();
    let findings = kubelet.conflicts_with(&config, &reserved, &machine());
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(findings
        .iter()
        .all(|f| (f.field, f.severity) == ("featureGates", Severity::Warning)));
    assert!(findings[0].message.contains("v1.34"), "{}", findings[0]);
    assert!(
        findings[1].message.contains("v1.35 needs it"),
        "{}",
        findings[1]
    );
    // Gates on (or left to their defaults): nothing to say.
    let on: KubeletConfiguration = serde_yaml_ng::from_str(&format!(
        "{off}featureGates: {{InPlacePodLevelResourcesVerticalScaling: true}}\n"
    ))
    .unwrap();
    assert_eq!(on.conflicts_with(&config, &reserved, &machine()), []);
}

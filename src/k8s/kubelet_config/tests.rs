use super::*;
use crate::placement::config::{
    CpuPolicyOptions, MemoryPolicy, ReservedMemory, TopologyPolicy, TopologyScope,
};
use crate::topology::{CpuInfo, NumaNode};

const GI: u64 = 1 << 30;
const MI: u64 = 1 << 20;

/// `sockets` sockets × `numa_per_socket` NUMA nodes × 4 CPUs (2 cores with 2 threads), 4Gi per node.
fn machine(sockets: u32, numa_per_socket: u32) -> Topology {
    let nodes = sockets * numa_per_socket;
    let mut cpus = Vec::new();
    for numa in 0..nodes {
        for i in 0..4 {
            let id = numa * 4 + i;
            cpus.push(CpuInfo {
                id,
                core: numa * 4 + (i % 2),
                socket: numa / numa_per_socket,
                die: 0,
                numa,
                uncore: numa,
            });
        }
    }
    let numa = (0..nodes)
        .map(|id| NumaNode {
            id,
            memory: 4 * GI,
            ..NumaNode::default()
        })
        .collect();
    Topology { cpus, numa }
}

fn kubelet(yaml: &str) -> KubeletConfiguration {
    serde_yaml_ng::from_str(yaml).unwrap()
}

fn resolve(yaml: &str) -> Result<ResolvedConfig, KubeletConfigError> {
    kubelet(yaml).resolve(&machine(2, 1))
}

#[test]
fn an_empty_configuration_is_the_kubelet_default_with_numa_shim_gates_on() {
    let r = resolve("{}").unwrap();
    assert_eq!(r.config, Config::default());
    assert!(r.config.gates.pod_level_resource_managers);
    assert!(r.warnings.is_empty());
}

#[test]
fn reads_the_high_performance_node_settings() {
    // examples/kubelet-high-performance-node.yaml, with the eviction threshold the kubelet's
    // reservedMemory rule needs (1Gi reserved = 0 + 0 + 1Gi).
    let r = resolve(
        r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
  distribute-cpus-across-numa: "true"
reservedSystemCPUs: "0-1"
evictionHard: {memory.available: 1Gi}
memoryManagerPolicy: Static
reservedMemory:
- numaNode: 0
  limits:
    memory: 1Gi
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
"#,
    )
    .unwrap();
    let c = r.config;
    assert_eq!(c.cpu_policy, CpuPolicy::Static);
    assert_eq!(
        c.cpu_options,
        CpuPolicyOptions {
            full_pcpus_only: true,
            distribute_cpus_across_numa: true,
            ..CpuPolicyOptions::default()
        }
    );
    assert_eq!(c.reserved_cpus, ReservedCpus::Explicit(CpuSet::range(0, 1)));
    assert_eq!(c.memory_policy, MemoryPolicy::Static);
    assert_eq!(
        c.reserved_memory,
        [ReservedMemory {
            numa_node: 0,
            memory: GI,
            hugepages: BTreeMap::new()
        }]
    );
    assert_eq!(c.topology_policy, TopologyPolicy::SingleNumaNode);
    assert_eq!(c.topology_scope, TopologyScope::Pod);
    assert!(c.topology_options.prefer_closest_numa_nodes);
    assert_eq!(c.topology_options.max_allowable_numa_nodes, 8);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn the_high_performance_example_as_published_fails_the_reserved_memory_rule() {
    let e = resolve(
        "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "reservedMemory: the total amount \"1Gi\" of type \"memory\" is not equal to the value \"100Mi\" determined by Node Allocatable feature (kubeReserved + systemReserved + evictionHard)"
    );
}

#[test]
fn reserved_memory_adds_up_across_nodes_and_sources() {
    // 512Mi + 412Mi + default eviction 100Mi = 1Gi, split over both nodes.
    let r = resolve(
        r#"
memoryManagerPolicy: Static
kubeReserved: {memory: 512Mi, cpu: 500m}
systemReserved: {memory: 412Mi, cpu: "1"}
reservedMemory:
- {numaNode: 1, limits: {memory: 768Mi}}
- {numaNode: 0, limits: {memory: 256Mi}}
"#,
    )
    .unwrap();
    let nodes: Vec<_> = r
        .config
        .reserved_memory
        .iter()
        .map(|m| (m.numa_node, m.memory))
        .collect();
    assert_eq!(nodes, [(0, 256 * MI), (1, 768 * MI)]);
    assert_eq!(r.config.reserved_cpus, ReservedCpus::Count { milli: 1500 });
}

#[test]
fn eviction_thresholds_follow_the_kubelet_defaulting() {
    let m = machine(2, 1); // 8Gi
    let eviction = |yaml: &str| kubelet(yaml).eviction_memory(&m).unwrap().value();
    assert_eq!(eviction("{}"), 100 * MI as i64);
    assert_eq!(eviction("evictionHard: {memory.available: 1Gi}"), GI as i64);
    assert_eq!(
        eviction("evictionHard: {memory.available: 50%}"),
        4 * GI as i64
    );
    assert_eq!(eviction("evictionHard: {memory.available: 0%}"), 0);
    assert_eq!(eviction("evictionHard: {nodefs.available: 10%}"), 0);
    assert_eq!(
        eviction("evictionHard: {nodefs.available: 10%}\nmergeDefaultEvictionSettings: true"),
        100 * MI as i64
    );
}

#[test]
fn accepted_with_warnings() {
    let warned = |yaml: &str| -> Vec<String> {
        resolve(yaml)
            .unwrap()
            .warnings
            .iter()
            .map(|w| w.field.clone())
            .collect()
    };
    assert_eq!(warned("cpuManagerPolicy: static"), ["reservedSystemCPUs"]);
    assert_eq!(
        warned("cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}"),
        ["cpuManagerPolicyOptions"]
    );
    assert_eq!(
        warned("reservedSystemCPUs: \"0\"\nkubeReserved: {cpu: 1}"),
        ["reservedSystemCPUs"]
    );
    assert_eq!(
        warned("reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]"),
        ["reservedMemory"]
    );
    assert_eq!(
        warned("topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"16\"}"),
        ["topologyManagerPolicyOptions[max-allowable-numa-nodes]"]
    );
    let r = resolve("cpuManagerPolicy: static").unwrap();
    assert_eq!(r.config.reserved_cpus, ReservedCpus::Count { milli: 0 });
    assert!(
        r.config.accept_no_reserved_cpus,
        "the node must be told to accept it"
    );
    assert!(r.warnings[0]
        .to_string()
        .starts_with("reservedSystemCPUs: the static CPU policy"));
    let r = resolve("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"").unwrap();
    assert!(!r.config.accept_no_reserved_cpus);
}

#[test]
fn feature_gates_can_be_turned_off() {
    let r =
        resolve("featureGates: {PodLevelResourceManagers: false, SomeOtherGate: true}").unwrap();
    assert!(r.config.gates.pod_level_resources);
    assert!(!r.config.gates.pod_level_resource_managers);
    let r = resolve(
        "featureGates: {PodLevelResources: false, PodLevelResourceManagers: false, \
         InPlacePodLevelResourcesVerticalScaling: false, PodLevelResourcesFixDefaulting: false, \
         PodLevelResourcesFixKubeletQOSClass: false}",
    )
    .unwrap();
    assert!(!r.config.gates.pod_level_resources);
}

#[test]
fn every_cpu_option_maps_to_its_flag() {
    let on = |name: &str| {
        let yaml = format!(
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {{{name}: \"True\"}}"
        );
        resolve(&yaml).unwrap().config.cpu_options
    };
    assert!(on("full-pcpus-only").full_pcpus_only);
    assert!(on("distribute-cpus-across-numa").distribute_cpus_across_numa);
    assert!(on("align-by-socket").align_by_socket);
    assert!(on("distribute-cpus-across-cores").distribute_cpus_across_cores);
    assert!(on("strict-cpu-reservation").strict_cpu_reservation);
    assert!(on("prefer-align-cpus-by-uncorecache").prefer_align_cpus_by_uncore_cache);
}

#[test]
fn every_rejected_value_names_its_field_and_reason() {
    let s = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";
    let mm = "memoryManagerPolicy: Static\n";
    let cases: Vec<(String, &str)> = vec![
        ("cpuManagerPolicy: Static".into(), "cpuManagerPolicy: unknown policy \"Static\""),
        ("memoryManagerPolicy: static".into(), "memoryManagerPolicy: unknown policy \"static\""),
        ("memoryManagerPolicy: BestEffort".into(), "memoryManagerPolicy: BestEffort is only supported on Windows"),
        ("topologyManagerPolicy: single-numa".into(), "topologyManagerPolicy: unknown policy \"single-numa\""),
        ("topologyManagerScope: node".into(), "topologyManagerScope: unknown scope \"node\""),
        ("featureGates: {CPUManagerPolicyOptions: false}".into(), "featureGates: cannot set feature gate CPUManagerPolicyOptions to false"),
        ("featureGates: {PodLevelResources: false}".into(), "featureGates: PodLevelResourceManagers is enabled, but depends on features that are disabled: [PodLevelResources]"),
        // kubelet 1.37's gates that depend on PodLevelResources and default on.
        (
            "featureGates: {PodLevelResources: false, PodLevelResourceManagers: false}".into(),
            "featureGates: InPlacePodLevelResourcesVerticalScaling is enabled, but depends on features that are disabled: [PodLevelResources]",
        ),
        (
            "featureGates: {PodLevelResources: false, PodLevelResourceManagers: false, InPlacePodLevelResourcesVerticalScaling: false, PodLevelResourcesFixDefaulting: false}".into(),
            "featureGates: PodLevelResourcesFixKubeletQOSClass is enabled, but depends on features that are disabled: [PodLevelResources]",
        ),
        (format!("{s}cpuManagerPolicyOptions: {{turbo: \"true\"}}"), "cpuManagerPolicyOptions: unknown CPU Manager Policy option: \"turbo\""),
        (
            format!("{s}featureGates: {{CPUManagerPolicyAlphaOptions: false}}\ncpuManagerPolicyOptions: {{align-by-socket: \"true\"}}"),
            "cpuManagerPolicyOptions: CPU Manager Policy Alpha-level Options not enabled, but option \"align-by-socket\" provided",
        ),
        (
            format!("{s}featureGates: {{CPUManagerPolicyBetaOptions: false}}\ncpuManagerPolicyOptions: {{distribute-cpus-across-numa: \"true\"}}"),
            "cpuManagerPolicyOptions: CPU Manager Policy Beta-level Options not enabled, but option \"distribute-cpus-across-numa\" provided",
        ),
        (format!("{s}cpuManagerPolicyOptions: {{full-pcpus-only: \"yes\"}}"), "cpuManagerPolicyOptions[full-pcpus-only]: bad value \"yes\""),
        (
            format!("{s}cpuManagerPolicyOptions: {{full-pcpus-only: \"true\", distribute-cpus-across-cores: \"true\"}}"),
            "cpuManagerPolicyOptions: static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time",
        ),
        (
            format!("{s}cpuManagerPolicyOptions: {{distribute-cpus-across-numa: \"true\", distribute-cpus-across-cores: \"true\"}}"),
            "cpuManagerPolicyOptions: static policy options distribute-cpus-across-numa and distribute-cpus-across-cores",
        ),
        (
            format!("{s}cpuManagerPolicyOptions: {{prefer-align-cpus-by-uncorecache: \"true\", distribute-cpus-across-cores: \"true\"}}"),
            "cpuManagerPolicyOptions: static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-cores",
        ),
        (
            format!("{s}cpuManagerPolicyOptions: {{prefer-align-cpus-by-uncorecache: \"true\", distribute-cpus-across-numa: \"true\"}}"),
            "cpuManagerPolicyOptions: static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa",
        ),
        (
            format!("{s}topologyManagerPolicy: single-numa-node\ncpuManagerPolicyOptions: {{align-by-socket: \"true\"}}"),
            "cpuManagerPolicyOptions: topology manager single-numa-node policy is incompatible",
        ),
        ("reservedSystemCPUs: \"0-\"".into(), "reservedSystemCPUs: cpu list \"0-\""),
        ("reservedSystemCPUs: \"0,99\"".into(), "reservedSystemCPUs: 0,99 is not a subset of online-cpus: 0-7"),
        ("kubeReserved: {cpu: \"100\"}".into(), "kubeReserved.cpu + systemReserved.cpu: 100 CPUs to reserve but the machine has 8"),
        ("kubeReserved: {nvidia.com/gpu: \"1\"}".into(), "kubeReserved: cannot reserve \"nvidia.com/gpu\" resource"),
        ("systemReserved: {memory: lots}".into(), "systemReserved[memory]: quantity \"lots\""),
        ("kubeReserved: {cpu: \"-1\"}".into(), "kubeReserved[cpu]: must not be negative"),
        (format!("{mm}evictionHard: {{memory.available: abc}}"), "evictionHard[memory.available]: not a quantity or a percentage"),
        (format!("{mm}evictionHard: {{memory.available: \"0\"}}"), "evictionHard[memory.available]: eviction threshold must be positive"),
        (format!("{mm}evictionHard: {{memory.available: -1Mi}}"), "evictionHard[memory.available]: eviction threshold must be positive"),
        (format!("{mm}evictionHard: {{memory.available: 150%}}"), "evictionHard[memory.available]: eviction percentage threshold must be <= 100%"),
        (format!("{mm}evictionHard: {{memory.available: -5%}}"), "evictionHard[memory.available]: eviction percentage threshold must be >= 0%"),
        (format!("{mm}evictionHard: {{memory.available: x%}}"), "evictionHard[memory.available]: invalid number in percentage"),
        (format!("{mm}reservedMemory: [{{numaNode: 0, limits: {{cpu: 1}}}}]"), "reservedMemory[0].limits[cpu]: the limit type \"cpu\" is not supported"),
        (format!("{mm}reservedMemory: [{{numaNode: 0, limits: {{memory: \"0\"}}}}]"), "reservedMemory[0].limits[memory]: reserved memory may not be zero"),
        (
            format!("{mm}reservedMemory: [{{numaNode: 0, limits: {{memory: 50Mi}}}}, {{numaNode: 0, limits: {{memory: 50Mi}}}}]"),
            "reservedMemory[1].limits[memory]: the reserved memory has a duplicate value for NUMA node 0",
        ),
        (format!("{mm}reservedMemory: [{{numaNode: 7, limits: {{memory: 100Mi}}}}]"), "reservedMemory[0].numaNode: the reserved memory configuration references a NUMA node 7"),
        (
            format!("{mm}reservedMemory: [{{numaNode: 0, limits: {{memory: 100Mi, hugepages-2Mi: 2Mi}}}}]"),
            "reservedMemory: the total amount \"2Mi\" of type \"hugepages-2Mi\" is not equal to the value \"0\"",
        ),
        (format!("{mm}evictionHard: {{}}"), "reservedMemory: the Static memory manager policy needs system reserved memory"),
        ("topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {turbo: \"1\"}".into(), "topologyManagerPolicyOptions: unknown Topology Manager Policy option: \"turbo\""),
        ("topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {prefer-closest-numa-nodes: maybe}".into(), "topologyManagerPolicyOptions[prefer-closest-numa-nodes]: bad value \"maybe\""),
        ("topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}".into(), "topologyManagerPolicyOptions[max-allowable-numa-nodes]: the minimum value should not be less than 8"),
        ("topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: many}".into(), "topologyManagerPolicyOptions[max-allowable-numa-nodes]: bad value \"many\""),
    ];
    for (yaml, want) in cases {
        let got = match resolve(&yaml) {
            Ok(r) => format!("accepted: {r:?}"),
            Err(e) => e.to_string(),
        };
        assert!(
            got.starts_with(want),
            "for\n{yaml}\n got: {got}\nwant: {want}"
        );
    }
}

#[test]
fn machine_dependent_rejections() {
    // Two sockets sharing one NUMA node: align-by-socket cannot work.
    let mut one_node = machine(2, 1);
    for c in &mut one_node.cpus {
        c.numa = 0;
    }
    one_node.numa.truncate(1);
    let e = kubelet("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}")
        .resolve(&one_node)
        .unwrap_err();
    assert!(
        matches!(
            e,
            KubeletConfigError::AlignBySocketHardware {
                sockets: 2,
                numa: 1
            }
        ),
        "{e}"
    );

    // Nine NUMA nodes exceed the default max-allowable-numa-nodes unless raised.
    let nine = machine(9, 1);
    let e = kubelet("topologyManagerPolicy: best-effort")
        .resolve(&nine)
        .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "topologyManagerPolicy: unsupported on machines with more than 8 NUMA nodes"
        ),
        "{e}"
    );
    kubelet("topologyManagerPolicy: none")
        .resolve(&nine)
        .unwrap();
    kubelet("topologyManagerPolicy: best-effort\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"9\"}")
        .resolve(&nine)
        .unwrap();

    // A percentage threshold needs the machine's memory.
    let mut no_memory = machine(1, 1);
    no_memory.numa.clear();
    let e = kubelet("memoryManagerPolicy: Static\nevictionHard: {memory.available: 10%}")
        .resolve(&no_memory)
        .unwrap_err();
    assert!(
        e.to_string().contains("needs the machine's memory size"),
        "{e}"
    );
}

#[test]
fn the_kubelet_configuration_document_is_picked_from_a_file() {
    let c = KubeletConfiguration::from_yaml(
        "kind: Pod\nmetadata: {name: a}\n---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\ncpuManagerPolicyOptions: {full-pcpus-only: true}\nkubeReserved: {cpu: 1}\n",
    )
    .unwrap();
    assert_eq!(c.cpu_manager_policy.as_deref(), Some("static"));
    assert_eq!(c.cpu_manager_policy_options["full-pcpus-only"], "true");
    assert_eq!(c.kube_reserved["cpu"], "1");
    let e = KubeletConfiguration::from_yaml("kind: Pod\n").unwrap_err();
    assert_eq!(e.to_string(), "no KubeletConfiguration document");
    let e = KubeletConfiguration::from_yaml(
        "cpuManagerPolicy: static\n---\nkind: KubeletConfiguration\n",
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "more than one KubeletConfiguration document");
}

/// kubelet `topologymanager.NewManager` returns before reading its options when the policy is
/// `none`: whatever they say, the kubelet starts (numa-shim warns that they are ignored).
#[test]
fn topology_options_are_not_read_under_the_none_policy() {
    let r = resolve("topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\", bogus: x}")
        .unwrap();
    assert_eq!(
        r.config.topology_options,
        crate::placement::config::TopologyOptions::default()
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.field == "topologyManagerPolicyOptions"),
        "{:?}",
        r.warnings
    );
    assert!(resolve(
        "topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}"
    )
    .is_err());
}

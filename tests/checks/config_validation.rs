//! Every value the configuration file refuses, with the key the error must name: numa-shim's own
//! keys (parse + `Config::validate`) and the kubelet resource-manager fields (resolved against
//! `topoDualSocketHT`, 2 NUMA nodes × 6 CPUs and 16Gi, by `check_config::check`).

use std::path::{Path, PathBuf};

use numa_shim::cli::check_config::{check, render, Findings};
use numa_shim::config::{self, Config};

use crate::dual_socket_in;

fn machine() -> PathBuf {
    static MACHINE: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    let (_, path) = MACHINE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dual_socket_in(dir.path());
        (dir, path)
    });
    path.clone()
}

/// Parses and validates `text`; the errors as strings (a parse error is the only one).
fn own_errors(text: &str) -> Vec<String> {
    match config::parse(text) {
        Ok(c) => c.validate().iter().map(ToString::to_string).collect(),
        Err(e) => vec![e.to_string()],
    }
}

fn findings(text: &str) -> Findings {
    let c: Config = config::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    check(&c, None, &machine())
}

#[test]
fn numa_shim_keys_reject_bad_values_naming_the_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("listen: tcp://1.2.3.4:5", "listen", "not a unix socket"),
        ("listen: relative.sock", "listen", "absolute"),
        ("runtime: http://x", "runtime", "not a unix socket"),
        (
            "containerRuntimeEndpoint: unix://rel",
            "runtime",
            "absolute",
        ),
        (
            "listen: /a.sock\nruntime: unix:///a.sock",
            "runtime",
            "same socket as listen",
        ),
        ("socketMode: \"0999\"", "socketMode", "octal"),
        ("socketMode: rw", "socketMode", "octal"),
        ("socketMode: \"1777\"", "socketMode", "octal"),
        ("socketMode: \"0460\"", "socketMode", "read and write"),
        ("socketMode: \"0666\"", "socketMode", "every local user"),
        ("socketGroup: -1", "socketGroup", ""),
        ("socketGroup: wheel", "socketGroup", ""),
        (
            "shutdownGracePeriod: \"10\"",
            "shutdownGracePeriod",
            "duration",
        ),
        ("shutdownGracePeriod: 1d", "shutdownGracePeriod", "duration"),
        ("driftPeriod: \"0\"", "driftPeriod", "longer than 0"),
        ("driftPeriod: 0s", "driftPeriod", "longer than 0"),
        ("driftPeriod: fast", "driftPeriod", "duration"),
        ("draClaimsTimeout: 0s", "draClaimsTimeout", "longer than 0"),
        ("draClaimsTimeout: slow", "draClaimsTimeout", "duration"),
        ("logFormat: xml", "logFormat", "xml"),
        ("logging: {format: xml}", "logging", "xml"),
        ("logging: {verbosity: 4}", "logging", "verbosity"),
        (
            "logLevel: \"numa_shim=[\"",
            "logLevel",
            "invalid log filter",
        ),
        ("logLevel: \" \"", "logLevel", "empty"),
        (
            "logLevel: debug\nlogging: {level: info}",
            "logLevel",
            "disagrees",
        ),
        (
            "logFormat: json\nlogging: {format: text}",
            "logFormat",
            "disagrees",
        ),
        ("stateDir: var/lib/numa-shim", "stateDir", "absolute"),
        ("topology: \"\"", "topology", "empty"),
        ("podKnowledge: kubelet", "podKnowledge", "kubelet"),
        ("kubeconfig: \"\"", "kubeconfig", "empty"),
        ("nodeName: Node_1", "nodeName", "not a valid node name"),
        ("podsApiSocket: pods.sock", "podsApiSocket", "absolute"),
        (
            "podResourcesSocket: pr.sock",
            "podResourcesSocket",
            "absolute",
        ),
        (
            "kubeletPodResourcesSocket: kubelet.sock",
            "kubeletPodResourcesSocket",
            "absolute",
        ),
        ("podResourcesQps: 0", "podResourcesQps", "at least 1"),
        ("podResourcesBurst: 0", "podResourcesBurst", "at least 1"),
        (
            "podResourcesSocket: /k.sock\nkubeletPodResourcesSocket: /k.sock",
            "podResourcesSocket",
            "kubelet's own socket",
        ),
        (
            "metricsAddress: localhost:9464",
            "metricsAddress",
            "IP:port",
        ),
        ("metricsAddress: 127.0.0.1", "metricsAddress", "IP:port"),
        (
            "metricsAddress: 127.0.0.1:0",
            "metricsAddress",
            "fixed port",
        ),
        ("kubeletConfig: \"\"", "kubeletConfig", "empty"),
        (
            "apiVersion: v1",
            "apiVersion",
            "kubelet.config.k8s.io/v1beta1",
        ),
        ("kind: Pod", "kind", "KubeletConfiguration"),
        ("listen_typo: /x", "listen_typo", "unknown field"),
    ];
    for (text, field, reason) in cases {
        let errors = own_errors(text);
        assert_eq!(errors.len(), 1, "{text}: {errors:?}");
        assert!(
            errors[0].contains(field),
            "{text}: {errors:?} should name {field}"
        );
        assert!(
            errors[0].contains(reason),
            "{text}: {errors:?} should say {reason}"
        );
    }
}

/// `none` (or an empty path) turns the PodResources server, or asking the kubelet, off, as the
/// flags and the docs say.
#[test]
fn pod_resources_sockets_may_be_off() {
    for text in [
        "podResourcesSocket: none",
        "podResourcesSocket: \"\"",
        "kubeletPodResourcesSocket: none",
        "podResourcesSocket: none\nkubeletPodResourcesSocket: \"\"",
    ] {
        assert_eq!(own_errors(text), Vec::<String>::new(), "{text}");
    }
}

#[test]
fn good_values_pass() {
    let text = "listen: unix:///run/numa-shim/cri.sock\nruntime: /run/containerd/containerd.sock\n\
                socketMode: \"0660\"\nsocketGroup: 0\nshutdownGracePeriod: 1m30s\ndriftPeriod: 500ms\n\
                logFormat: json\nlogging: {format: json, level: \"info,numa_shim::relay=debug\"}\n\
                logLevel: \"info,numa_shim::relay=debug\"\nstateDir: /var/lib/numa-shim\n\
                topology: /sys\npodKnowledge: cri\npodsApiSocket: /p.sock\npodResourcesSocket: /r.sock\n\
                metricsAddress: \"[::1]:9464\"\napiVersion: kubelet.config.k8s.io/v1beta1\n\
                kind: KubeletConfiguration\n";
    assert_eq!(own_errors(text), Vec::<String>::new());
    assert_eq!(findings(text), Findings::default());
    assert_eq!(render(&Findings::default()), "OK\n");
}

/// Kubelet fields: the error must start with the field (resolve's contract) and say why.
#[test]
fn kubelet_fields_reject_bad_values_naming_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("cpuManagerPolicy: dynamic", "cpuManagerPolicy", "unknown policy"),
        ("memoryManagerPolicy: BestEffort", "memoryManagerPolicy", "Windows"),
        ("memoryManagerPolicy: static", "memoryManagerPolicy", "unknown policy"),
        ("topologyManagerPolicy: strict", "topologyManagerPolicy", "unknown policy"),
        ("topologyManagerScope: node", "topologyManagerScope", "unknown scope"),
        (
            "featureGates: {PodLevelResources: false}",
            "featureGates",
            "PodLevelResource",
        ),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {bogus: \"true\"}",
            "cpuManagerPolicyOptions",
            "unknown",
        ),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {full-pcpus-only: \"yes\"}",
            "cpuManagerPolicyOptions[full-pcpus-only]",
            "bad value",
        ),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}",
            "cpuManagerPolicyOptions",
            "align-by-socket",
        ),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {distribute-cpus-across-numa: \"true\", distribute-cpus-across-cores: \"true\"}",
            "cpuManagerPolicyOptions",
            "at the same time",
        ),
        ("cpuManagerPolicy: static\nreservedSystemCPUs: a-b", "reservedSystemCPUs", ""),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0-99\"",
            "reservedSystemCPUs",
            "online-cpus",
        ),
        (
            "cpuManagerPolicy: static\nkubeReserved: {cpu: \"100\"}",
            "kubeReserved.cpu + systemReserved.cpu",
            "machine has 12",
        ),
        ("kubeReserved: {gpu: \"1\"}", "kubeReserved", "cannot reserve"),
        ("systemReserved: {memory: lots}", "systemReserved", ""),
        ("systemReserved: {memory: -1Gi}", "systemReserved", "negative"),
        (
            "memoryManagerPolicy: Static\nevictionHard: {memory.available: \"200%\"}\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]",
            "evictionHard[memory.available]",
            "<= 100%",
        ),
        (
            "memoryManagerPolicy: Static\nevictionHard: {memory.available: \"0\"}\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]",
            "evictionHard[memory.available]",
            "positive",
        ),
        (
            "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {cpu: \"1\"}}]",
            "reservedMemory",
            "not supported",
        ),
        (
            "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: \"0\"}}]",
            "reservedMemory",
            "may not be zero",
        ),
        (
            "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 50Mi}}, {numaNode: 0, limits: {memory: 50Mi}}]",
            "reservedMemory",
            "duplicate",
        ),
        (
            "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 7, limits: {memory: 100Mi}}]",
            "reservedMemory",
            "NUMA node 7",
        ),
        // reservedMemory must add up to kubeReserved + systemReserved + evictionHard memory.
        (
            "memoryManagerPolicy: Static\nsystemReserved: {memory: 1Gi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]",
            "reservedMemory",
            "not equal",
        ),
        (
            "memoryManagerPolicy: Static",
            "reservedMemory",
            "",
        ),
        // Resolves, but the decision core cannot be built: more reserved than NUMA node 0 has.
        (
            "memoryManagerPolicy: Static\nsystemReserved: {memory: 20Gi}\nevictionHard: {memory.available: \"0%\"}\nreservedMemory: [{numaNode: 0, limits: {memory: 20Gi}}]",
            "resource manager settings",
            "exceed",
        ),
        (
            "topologyManagerPolicy: best-effort\ntopologyManagerPolicyOptions: {bogus: \"true\"}",
            "topologyManagerPolicyOptions",
            "unknown",
        ),
        (
            "topologyManagerPolicy: best-effort\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}",
            "topologyManagerPolicyOptions[max-allowable-numa-nodes]",
            "less than 8",
        ),
    ];
    for (text, field, reason) in cases {
        let f = findings(text);
        assert_eq!(f.errors.len(), 1, "{text}: {f:?}");
        assert!(
            f.errors[0].starts_with(field),
            "{text}: {f:?} should start with {field}"
        );
        assert!(
            f.errors[0].contains(reason),
            "{text}: {f:?} should say {reason}"
        );
        assert!(render(&f).starts_with("error: "), "{text}");
    }
}

#[test]
fn reserved_memory_that_adds_up_is_accepted() {
    let ok = [
        "memoryManagerPolicy: Static\nsystemReserved: {memory: 1Gi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1124Mi}}]",
        "memoryManagerPolicy: Static\nkubeReserved: {memory: 512Mi}\nsystemReserved: {memory: 512Mi}\nevictionHard: {memory.available: \"0%\"}\nreservedMemory: [{numaNode: 0, limits: {memory: 512Mi}}, {numaNode: 1, limits: {memory: 512Mi}}]",
    ];
    for text in ok {
        let f = findings(text);
        assert!(f.errors.is_empty(), "{text}: {f:?}");
    }
}

#[test]
fn kubelet_config_file_and_topology_errors_name_the_file() {
    let c = Config::default();
    let f = check(&c, Some(Path::new("/nonexistent/kubelet.yaml")), &machine());
    assert!(f.errors[0].contains("/nonexistent/kubelet.yaml"), "{f:?}");
    let f = check(&c, None, Path::new("/nonexistent/topology.json"));
    assert!(
        f.errors[0].starts_with("topology /nonexistent/topology.json"),
        "{f:?}"
    );
}

#[test]
fn the_files_own_fields_win_over_the_kubelet_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubelet.yaml");
    std::fs::write(
        &path,
        "kind: KubeletConfiguration\ncpuManagerPolicy: none\n",
    )
    .unwrap();
    // Fields of its own: those are used (and checked), the kubelet file is the kubelet's.
    let c = config::parse(&format!(
        "kubeletConfig: {}\ncpuManagerPolicy: bogus\n",
        path.display()
    ))
    .unwrap();
    let f = check(&c, None, &machine());
    assert!(
        f.errors[0].starts_with("cpuManagerPolicy: unknown policy"),
        "{f:?}"
    );
    // None of its own: the kubelet file's.
    let c = config::parse(&format!("kubeletConfig: {}\n", path.display())).unwrap();
    let f = check(&c, None, &machine());
    assert!(f.errors.is_empty() && f.warnings.is_empty(), "{f:?}");
}

/// `/placement` and `/metrics` name every pod and have no authentication: an address other
/// than loopback is allowed (a remote scraper) but check-config says what it exposes.
#[test]
fn a_metrics_address_off_loopback_is_warned_about() {
    for exposed in ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464"] {
        let f = findings(&format!("metricsAddress: \"{exposed}\""));
        assert!(f.errors.is_empty(), "{exposed}: {f:?}");
        let warning = f
            .warnings
            .iter()
            .find(|w| w.starts_with("metricsAddress:"))
            .unwrap_or_else(|| panic!("{exposed}: no warning in {f:?}"));
        assert!(
            warning.contains("/placement") && warning.contains("not loopback"),
            "{warning}"
        );
    }
    for private in ["127.0.0.1:9464", "[::1]:9464", "127.0.0.2:9464"] {
        let f = findings(&format!("metricsAddress: \"{private}\""));
        assert!(
            !f.warnings.iter().any(|w| w.starts_with("metricsAddress")),
            "{private}: {f:?}"
        );
    }
}

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::config::LogFormat;
use crate::lifecycle::SpecSource;
use crate::relay::SocketOptions;

fn base() -> Settings {
    Settings {
        listen: PathBuf::from("/run/numa-shim/cri.sock"),
        runtime: PathBuf::from("/run/containerd/containerd.sock"),
        socket: SocketOptions::default(),
        shutdown_grace: Duration::from_secs(10),
        log_format: LogFormat::Text,
        log_level: None,
        state_dir: PathBuf::from("/var/lib/numa-shim"),
        topology: PathBuf::from("/sys"),
        spec_source: SpecSource::CriOnly,
        reports: None,
        claims: None,
        metrics_address: Some("127.0.0.1:9464".parse().unwrap()),
        drift_period: Duration::from_secs(10),
        pod_resources: Some(crate::podresources::Options::new(
            "/var/lib/numa-shim/pod-resources/kubelet.sock".into(),
        )),
        kubelet: KubeletConfiguration {
            cpu_manager_policy: Some("static".into()),
            reserved_system_cpus: Some("0".into()),
            ..KubeletConfiguration::default()
        },
        kubelet_running: None,
        crio_config: None,
        device_plugin_front: None,
    }
}

#[test]
fn unchanged_settings_do_nothing() {
    assert_eq!(plan(&base(), &base()), ReloadPlan::default());
}

#[test]
fn metrics_address_is_applied() {
    let mut new = base();
    new.metrics_address = Some("127.0.0.1:9465".parse().unwrap());
    let p = plan(&base(), &new);
    assert_eq!(p.apply, vec![Change::MetricsAddress(new.metrics_address)]);
    assert!(p.refused.is_empty());
    assert_eq!(applied(&base(), &p), new);
    new.metrics_address = None;
    assert_eq!(
        plan(&base(), &new).apply,
        vec![Change::MetricsAddress(None)]
    );
}

#[test]
fn log_level_is_applied() {
    let mut new = base();
    new.log_level = Some("info,numa_shim::relay=debug".into());
    let p = plan(&base(), &new);
    assert_eq!(p.apply, vec![Change::LogLevel(new.log_level.clone())]);
    assert!(p.refused.is_empty());
    assert_eq!(applied(&base(), &p), new);
    // Removing the key goes back to RUST_LOG or info.
    assert_eq!(plan(&new, &base()).apply, vec![Change::LogLevel(None)]);
}

#[test]
fn every_startup_setting_needs_a_restart() {
    type Edit = fn(&mut Settings);
    let cases: [(&str, Edit); 15] = [
        ("listen", |s| s.listen = "/other.sock".into()),
        ("runtime", |s| s.runtime = "/run/crio/crio.sock".into()),
        ("socketMode", |s| s.socket.mode = 0o600),
        ("socketGroup", |s| s.socket.group = Some(7)),
        ("shutdownGracePeriod", |s| {
            s.shutdown_grace = Duration::from_secs(1)
        }),
        ("logFormat", |s| s.log_format = LogFormat::Json),
        ("stateDir", |s| s.state_dir = "/tmp/x".into()),
        ("topology", |s| s.topology = "/t.json".into()),
        ("podKnowledge", |s| {
            s.spec_source = SpecSource::PodsApi("/p.sock".into())
        }),
        ("driftPeriod", |s| s.drift_period = Duration::from_secs(60)),
        ("crioConfig", |s| {
            s.crio_config = Some("/etc/crio/crio.conf".into())
        }),
        ("kubeletConfig/kubeletConfigDir", |s| {
            s.kubelet_running = Some(crate::config::KubeletRunning {
                config: KubeletConfiguration::default(),
                source: "/var/lib/kubelet/config.yaml".into(),
            })
        }),
        ("podResourcesSocket", |s| {
            s.pod_resources = Some(crate::podresources::Options::new("/pr.sock".into()))
        }),
        ("kubeletPodResourcesSocket", |s| {
            if let Some(o) = s.pod_resources.as_mut() {
                o.kubelet_socket = None;
            }
        }),
        ("podResourcesQps/podResourcesBurst", |s| {
            if let Some(o) = s.pod_resources.as_mut() {
                o.qps = 5;
            }
        }),
    ];
    for (field, edit) in cases {
        let mut new = base();
        edit(&mut new);
        let p = plan(&base(), &new);
        assert!(p.apply.is_empty(), "{field}");
        assert_eq!(
            p.refused,
            vec![Refusal {
                field,
                reason: NEEDS_RESTART
            }],
            "{field}"
        );
        assert_eq!(applied(&base(), &p), base(), "{field}");
    }
}

#[test]
fn resource_manager_settings_need_a_drained_node() {
    type Edit = fn(&mut KubeletConfiguration);
    let cases: [(&str, Edit); 13] = [
        ("featureGates", |k| {
            k.feature_gates
                .insert("PodLevelResourceManagers".into(), false);
        }),
        ("cpuManagerPolicy", |k| {
            k.cpu_manager_policy = Some("none".into())
        }),
        ("cpuManagerPolicyOptions", |k| {
            k.cpu_manager_policy_options
                .insert("full-pcpus-only".into(), "true".into());
        }),
        ("reservedSystemCPUs", |k| {
            k.reserved_system_cpus = Some("0-1".into())
        }),
        ("kubeReserved", |k| {
            k.kube_reserved.insert("cpu".into(), "1".into());
        }),
        ("systemReserved", |k| {
            k.system_reserved.insert("memory".into(), "1Gi".into());
        }),
        ("evictionHard", |k| {
            k.eviction_hard = Some([("memory.available".into(), "200Mi".into())].into())
        }),
        ("mergeDefaultEvictionSettings", |k| {
            k.merge_default_eviction_settings = Some(true)
        }),
        ("memoryManagerPolicy", |k| {
            k.memory_manager_policy = Some("Static".into())
        }),
        ("reservedMemory", |k| {
            k.reserved_memory.push(Default::default());
        }),
        ("topologyManagerPolicy", |k| {
            k.topology_manager_policy = Some("single-numa-node".into())
        }),
        ("topologyManagerScope", |k| {
            k.topology_manager_scope = Some("pod".into())
        }),
        ("topologyManagerPolicyOptions", |k| {
            k.topology_manager_policy_options
                .insert("prefer-closest-numa-nodes".into(), "true".into());
        }),
    ];
    // Every kubelet key numa-shim reads has a case here (so a new key cannot be forgotten in
    // the reload plan).
    let kubelet_keys: Vec<&str> = crate::config::KNOWN_KEYS
        .iter()
        .skip_while(|k| **k != "kind")
        .skip(1)
        .copied()
        .collect();
    let named: Vec<&str> = cases.iter().map(|(field, _)| *field).collect();
    assert_eq!(named, kubelet_keys);
    for (field, edit) in cases {
        let mut new = base();
        edit(&mut new.kubelet);
        let p = plan(&base(), &new);
        assert_eq!(
            p.refused,
            vec![Refusal {
                field,
                reason: NEEDS_DRAIN
            }],
            "{field}"
        );
        assert!(p.apply.is_empty());
    }
}

#[test]
fn a_mixed_reload_applies_what_it_can() {
    let mut new = base();
    new.metrics_address = None;
    new.kubelet.topology_manager_scope = Some("pod".into());
    new.listen = "/x.sock".into();
    let p = plan(&base(), &new);
    assert_eq!(p.apply, vec![Change::MetricsAddress(None)]);
    let fields: Vec<_> = p.refused.iter().map(|r| r.field).collect();
    assert_eq!(fields, ["listen", "topologyManagerScope"]);
    let next = applied(&base(), &p);
    assert_eq!(next.metrics_address, None);
    assert_eq!(next.listen, base().listen);
    assert_eq!(next.kubelet, base().kubelet);
}

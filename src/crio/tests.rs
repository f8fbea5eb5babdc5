use std::collections::HashMap;

use super::*;

/// The `config` of CRI-O 1.36.3's verbose Status answer (`crictl info`), from the harness's
/// CRI-O (integration/lib/crio.sh) with its drop-in of CPU features: shared_cpuset "1", the
/// workload `numa-shim-it` and the runtime handler `numa-shim-it-tuned`.
const STATUS_CONFIG: &str = include_str!("testdata/status-config-1.36.3.json");

/// The same settings as the harness writes them (crio.conf, then crio.conf.d/50-cpu-features.conf).
const MAIN_CONF: &str = r#"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"

[crio.runtime.runtimes.runc]
runtime_path = "/run/nsit-crio/bin/runc"
monitor_cgroup = "pod"
"#;
const DROP_IN: &str = r#"
[crio.runtime]
shared_cpuset = "1"

[crio.runtime.workloads.numa-shim-it]
activation_annotation = "numa-shim-it.io/partitioned"
annotation_prefix = "numa-shim-it.io"
[crio.runtime.workloads.numa-shim-it.resources]
cpushares = 2
cpuset = "0"

[crio.runtime.runtimes.numa-shim-it-tuned]
runtime_path = "/run/nsit-crio/bin/runc"
allowed_annotations = ["cpu-shared.crio.io", "cpu-quota.crio.io", "cpu-c-states.crio.io"]
"#;

fn info(config: &str) -> HashMap<String, String> {
    HashMap::from([("config".to_string(), config.to_string())])
}

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn reads_the_settings_crio_reports_in_its_status() {
    let s = CrioSettings::from_status_info(&info(STATUS_CONFIG))
        .unwrap()
        .unwrap();
    assert_eq!(s.shared_cpuset.as_deref(), Some("1"));
    assert_eq!(s.infra_ctr_cpuset, None, "empty string: not set");
    let w = &s.workloads["numa-shim-it"];
    assert_eq!(
        w.activation_annotation.as_deref(),
        Some("numa-shim-it.io/partitioned")
    );
    assert_eq!(w.cpuset.as_deref(), Some("0"));
    assert_eq!(w.allowed_annotations, None);
    assert_eq!(
        s.handlers["numa-shim-it-tuned"].allowed_annotations,
        Some(vec![
            "cpu-shared.crio.io".to_string(),
            "cpu-quota.crio.io".to_string(),
            "cpu-c-states.crio.io".to_string()
        ])
    );
    assert_eq!(s.handlers["runc"].allowed_annotations, None);
}

#[test]
fn files_and_status_agree_on_the_harness_settings() {
    let mut from_files = files::from_toml(MAIN_CONF).unwrap();
    from_files.merge(files::from_toml(DROP_IN).unwrap());
    let from_status = CrioSettings::from_status_info(&info(STATUS_CONFIG))
        .unwrap()
        .unwrap();
    let reserved = cpus("0");
    assert_eq!(
        from_files.conflicts(&reserved),
        from_status.conflicts(&reserved)
    );
}

#[test]
fn other_runtimes_status_is_not_crio() {
    // containerd's verbose Status: `config` holds its CRI plugin config, without a `crio` object.
    let containerd = info(r#"{"containerd":{"snapshotter":"overlayfs"},"cni":{}}"#);
    assert_eq!(CrioSettings::from_status_info(&containerd).unwrap(), None);
    assert_eq!(
        CrioSettings::from_status_info(&HashMap::new()).unwrap(),
        None
    );
    let err = CrioSettings::from_status_info(&info("{not json")).unwrap_err();
    assert!(err.to_string().contains("CRI-O status info"), "{err}");
}

#[test]
fn every_feature_that_fights_numa_shim_is_a_conflict() {
    let s = CrioSettings::from_status_info(&info(STATUS_CONFIG))
        .unwrap()
        .unwrap();
    let conflicts = s.conflicts(&cpus("0"));
    assert_eq!(
        conflicts,
        vec![
            Conflict::Workload {
                name: "numa-shim-it".into(),
                annotation: "numa-shim-it.io/partitioned".into(),
                cpuset: Some("0".into()),
            },
            Conflict::Annotations {
                allowed_by: "runtime handler numa-shim-it-tuned".into(),
                annotations: vec!["cpu-quota.crio.io", "cpu-c-states.crio.io"],
            },
            Conflict::SharedCpuset {
                cpus: "1".into(),
                allowed_by: vec!["runtime handler numa-shim-it-tuned".into()],
            },
        ]
    );
    let text: Vec<String> = conflicts.iter().map(ToString::to_string).collect();
    assert!(
        text[0].contains("[crio.runtime.workloads.numa-shim-it]"),
        "{}",
        text[0]
    );
    assert!(
        text[0].contains("numa-shim-it.io/partitioned"),
        "{}",
        text[0]
    );
    assert!(
        text[1].contains("cpu-quota.crio.io (turns the CFS quota off"),
        "{}",
        text[1]
    );
    assert!(text[2].contains("shared_cpuset = \"1\""), "{}", text[2]);
}

#[test]
fn a_default_crio_config_fights_nothing() {
    let s = files::from_toml(MAIN_CONF).unwrap();
    assert!(s.conflicts(&cpus("0")).is_empty());
    assert!(files::from_toml("")
        .unwrap()
        .conflicts(&CpuSet::new())
        .is_empty());
}

#[test]
fn shared_cpuset_without_a_handler_allowing_the_annotation_does_nothing() {
    let s = files::from_toml("[crio.runtime]\nshared_cpuset = \"2-3\"\n").unwrap();
    assert!(s.conflicts(&cpus("0")).is_empty());
    // A workload may allow it too.
    let s = files::from_toml(
        r#"
[crio.runtime]
shared_cpuset = "2-3"
[crio.runtime.workloads.w]
activation_annotation = "w.io/on"
allowed_annotations = ["cpu-shared.crio.io"]
"#,
    )
    .unwrap();
    let conflicts = s.conflicts(&cpus("0"));
    assert!(
        conflicts.contains(&Conflict::SharedCpuset {
            cpus: "2-3".into(),
            allowed_by: vec!["workload w".into()]
        }),
        "{conflicts:?}"
    );
}

#[test]
fn infra_ctr_cpuset_inside_the_reserved_cpus_is_fine() {
    let s = files::from_toml("[crio.runtime]\ninfra_ctr_cpuset = \"0-1\"\n").unwrap();
    assert!(s.conflicts(&cpus("0-3")).is_empty());
    assert_eq!(
        s.conflicts(&cpus("0")),
        vec![Conflict::InfraCtrCpuset {
            cpus: "0-1".into(),
            reserved: cpus("0")
        }]
    );
    let text = s.conflicts(&CpuSet::new())[0].to_string();
    assert!(text.contains("reserved CPUs (none)"), "{text}");
    // A value CRI-O would refuse is not inside anything.
    let s = files::from_toml("[crio.runtime]\ninfra_ctr_cpuset = \"x\"\n").unwrap();
    assert_eq!(s.conflicts(&cpus("0-3")).len(), 1);
}

#[test]
fn every_cpu_annotation_is_named_with_its_effect() {
    let all: Vec<String> = CPU_ANNOTATIONS.iter().map(|(a, _)| a.to_string()).collect();
    let text = format!(
        "[crio.runtime.runtimes.hp]\nallowed_annotations = {all:?}\n[crio.runtime.runtimes.plain]\nallowed_annotations = [\"io.kubernetes.cri-o.Devices\"]\n"
    );
    let s = files::from_toml(&text).unwrap();
    let conflicts = s.conflicts(&cpus("0"));
    assert_eq!(
        conflicts.len(),
        1,
        "cpu-shared needs shared_cpuset; plain allows nothing of it"
    );
    let Conflict::Annotations {
        allowed_by,
        annotations,
    } = &conflicts[0]
    else {
        panic!("{conflicts:?}");
    };
    assert_eq!(allowed_by, "runtime handler hp");
    assert_eq!(annotations.len(), CPU_ANNOTATIONS.len() - 1);
    let message = conflicts[0].to_string();
    for (name, effect) in &CPU_ANNOTATIONS[1..] {
        assert!(message.contains(&format!("{name} ({effect})")), "{message}");
    }
}

#[test]
fn a_drop_in_replaces_a_handler_whole_and_overrides_keys() {
    let mut s = files::from_toml(
        "[crio.runtime]\nshared_cpuset = \"1\"\n[crio.runtime.runtimes.hp]\nallowed_annotations = [\"cpu-quota.crio.io\"]\n",
    )
    .unwrap();
    s.merge(
        files::from_toml("[crio.runtime]\ninfra_ctr_cpuset = \"0\"\n[crio.runtime.runtimes.hp]\nruntime_path = \"/x\"\n")
            .unwrap(),
    );
    assert_eq!(s.shared_cpuset.as_deref(), Some("1"), "kept: not set again");
    assert_eq!(s.infra_ctr_cpuset.as_deref(), Some("0"));
    assert_eq!(
        s.handlers["hp"].allowed_annotations, None,
        "the new table replaced it"
    );
}

#[test]
fn wrong_types_name_the_key() {
    for (text, key) in [
        ("[crio]\nruntime = 1\n", "crio.runtime: expected a table"),
        (
            "[crio.runtime]\nshared_cpuset = 1\n",
            "crio.runtime.shared_cpuset",
        ),
        (
            "[crio.runtime.runtimes.a]\nallowed_annotations = \"cpu-quota.crio.io\"\n",
            "crio.runtime.runtimes.a.allowed_annotations",
        ),
        (
            "[crio.runtime.workloads.w]\nresources = 3\n",
            "crio.runtime.workloads.w.resources",
        ),
        (
            "[crio.runtime.workloads.w.resources]\ncpuset = [0]\n",
            "crio.runtime.workloads.w.resources.cpuset",
        ),
    ] {
        let err = files::from_toml(text).unwrap_err();
        assert!(err.contains(key), "{text}: {err}");
    }
    assert!(files::from_toml("[crio.runtime\n").is_err());
}

#[test]
fn load_reads_the_file_then_its_drop_ins_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("crio.conf");
    std::fs::write(&main, MAIN_CONF).unwrap();
    let drop_ins = drop_in_dir(&main);
    std::fs::create_dir_all(drop_ins.join("sub")).unwrap();
    std::fs::write(
        drop_ins.join("10-a.conf"),
        "[crio.runtime]\nshared_cpuset = \"1\"\n",
    )
    .unwrap();
    std::fs::write(
        drop_ins.join("sub/x.conf"),
        "[crio.runtime]\nshared_cpuset = \"3\"\n",
    )
    .unwrap();
    std::fs::write(drop_ins.join("20-b.conf"), DROP_IN).unwrap();
    // Lexical order of paths: 10-a, 20-b, sub/x.
    let s = load(&main).unwrap();
    assert_eq!(s.shared_cpuset.as_deref(), Some("3"));
    assert!(s.workloads.contains_key("numa-shim-it"));
    // A directory: its drop-ins alone.
    assert_eq!(load(&drop_ins).unwrap().shared_cpuset.as_deref(), Some("3"));

    std::fs::write(
        drop_ins.join("30-bad.conf"),
        "[crio.runtime]\nshared_cpuset = 1\n",
    )
    .unwrap();
    let err = load(&main).unwrap_err().to_string();
    assert!(
        err.contains("30-bad.conf") && err.contains("shared_cpuset"),
        "{err}"
    );
    let err = load(Path::new("/nonexistent/crio.conf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/crio.conf"), "{err}");
}

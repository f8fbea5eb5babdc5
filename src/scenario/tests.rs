use std::path::Path;

use super::*;

/// Two NUMA nodes, two CPUs (one core each) per node, 4Gi per node.
const MACHINE: &str = r#"
topology:
  cpus:
  - {id: 0, core: 0, socket: 0, numa: 0}
  - {id: 1, core: 1, socket: 0, numa: 0}
  - {id: 2, core: 2, socket: 1, numa: 1}
  - {id: 3, core: 3, socket: 1, numa: 1}
  numa:
  - {id: 0, memory: 4Gi}
  - {id: 1, memory: 4Gi}
"#;

fn run(text: &str) -> Result<Outcome, ScenarioError> {
    Scenario::from_str(text, Path::new("/nonexistent"))?.run()
}

fn pod_yaml(name: &str, body: &str) -> String {
    format!("- metadata: {{name: {name}}}\n  spec:\n{body}")
}

#[test]
fn the_none_policies_pin_nothing() {
    let text = format!(
        "{MACHINE}kubelet: {{reservedSystemCPUs: \"0\"}}\npods:\n{}",
        pod_yaml(
            "web",
            "    resources: {limits: {cpu: 2, memory: 1Gi}}\n    initContainers: [{name: log, restartPolicy: Always}]\n    containers:\n    - {name: app, resources: {limits: {cpu: 1500m}}}\n    - {name: helper}\n"
        )
    );
    let out = run(&text).unwrap();
    let json = serde_json::to_value(&out.report).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "pods": [{"namespace": "default", "name": "web", "admitted": true, "containers": [
                {"name": "log", "role": "sidecar", "cpus": "", "exclusive": false, "cpuQuota": 200000},
                {"name": "app", "role": "app", "cpus": "", "exclusive": false, "cpuQuota": 150000},
                {"name": "helper", "role": "app", "cpus": "", "exclusive": false, "cpuQuota": 200000}
            ]}],
            // The none CPU policy reserves nothing (reservedSystemCPUs only shapes allocatable)
            // and pins nothing: no cpuset, an empty default set, as in the kubelet.
            "node": {"reservedCPUs": "", "sharedCPUs": ""}
        })
    );
    assert!(out.warnings.is_empty());
}

#[test]
fn a_rejected_pod_carries_the_kubelet_reason_and_message() {
    // 6Gi cannot come from one 4Gi node: single-numa-node refuses.
    let text = format!(
        r#"{MACHINE}kubelet:
  memoryManagerPolicy: Static
  reservedMemory: [{{numaNode: 0, limits: {{memory: 100Mi}}}}]
  topologyManagerPolicy: single-numa-node
pods:
{}"#,
        pod_yaml(
            "big",
            "    containers: [{name: c, resources: {limits: {cpu: 1, memory: 6Gi}}}]\n"
        )
    );
    let out = run(&text).unwrap();
    let p = &out.report.pods[0];
    assert!(!p.admitted);
    assert_eq!(p.reason.as_deref(), Some("TopologyAffinityError"));
    assert_eq!(
        p.message.as_deref(),
        Some("Resources cannot be allocated with Topology locality")
    );
    assert!(p.containers.is_empty());
    let keys: Vec<String> = serde_json::to_value(p)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys,
        [
            "admitted",
            "containers",
            "message",
            "name",
            "namespace",
            "reason"
        ]
    );
}

#[test]
fn files_are_read_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("machine.json"),
        r#"{"cpus": [{"id": 0, "core": 0, "socket": 0}, {"id": 1, "core": 0, "socket": 0}]}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("pods.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n---\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: b, namespace: x}\nspec: {containers: [{name: c}]}\n",
    )
    .unwrap();
    std::fs::write(
        d.join("kubelet.yaml"),
        "# comment\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("s.yaml"),
        "topology: {file: machine.json, memoryPerNuma: 2Gi}\nkubelet: {file: kubelet.yaml, reservedSystemCPUs: \"1\"}\npods: [pods.yaml]\nexpect: {pods: []}\n",
    )
    .unwrap();
    let s = Scenario::load(&d.join("s.yaml")).unwrap();
    assert_eq!(s.topology.numa[0].memory, 2 << 30);
    assert_eq!(s.kubelet.cpu_manager_policy.as_deref(), Some("static"));
    assert_eq!(s.kubelet.reserved_system_cpus.as_deref(), Some("1"));
    assert!(s.expect.is_some());
    let names: Vec<String> = s
        .steps
        .iter()
        .map(|st| match st {
            Step::Admit { pod, .. } => format!("{}/{}", pod.namespace, pod.name),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["default/a", "x/b"]);
    assert_eq!(s.run().unwrap().report.node.reserved_cpus, "1");

    // A kubelet file may hold other kinds; exactly one KubeletConfiguration is taken.
    std::fs::write(
        d.join("k2.yaml"),
        "topology: machine.json\nkubelet: pods.yaml\n",
    )
    .unwrap();
    let s = Scenario::load(&d.join("k2.yaml")).unwrap();
    assert_eq!(s.kubelet.kind.as_deref(), Some("KubeletConfiguration"));
    std::fs::write(d.join("only-pods.yaml"), "kind: Pod\nmetadata: {name: a}\n").unwrap();
    std::fs::write(
        d.join("k3.yaml"),
        "topology: machine.json\nkubelet: only-pods.yaml\n",
    )
    .unwrap();
    let e = Scenario::load(&d.join("k3.yaml")).unwrap_err().to_string();
    assert!(
        e.ends_with("only-pods.yaml: no KubeletConfiguration document"),
        "{e}"
    );
    std::fs::write(
        d.join("k4.yaml"),
        "topology: machine.json\npods: [kubelet.yaml]\n",
    )
    .unwrap();
    let e = Scenario::load(&d.join("k4.yaml")).unwrap_err().to_string();
    assert!(
        e.ends_with("pods[0]: kubelet.yaml holds no Pod document"),
        "{e}"
    );
}

#[test]
fn steps_remove_pods_and_containers_and_admit_more() {
    let text = format!(
        r#"{MACHINE}pods:
{}{}steps:
- remove: default/a
- remove: {{pod: b, container: init}}
- admit: {{metadata: {{name: c, namespace: ns}}, spec: {{containers: [{{name: x}}]}}}}
"#,
        pod_yaml("a", "    containers: [{name: x}]\n"),
        pod_yaml(
            "b",
            "    initContainers: [{name: init}]\n    containers: [{name: x}]\n"
        ),
    );
    let out = run(&text).unwrap();
    let pods: Vec<(String, Vec<String>)> = out
        .report
        .pods
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace, p.name),
                p.containers.iter().map(|c| c.name.clone()).collect(),
            )
        })
        .collect();
    assert_eq!(
        pods,
        [
            ("default/b".to_string(), vec!["x".to_string()]),
            ("ns/c".to_string(), vec!["x".to_string()])
        ]
    );
}

#[test]
fn errors_name_the_scenario_entry_and_field() {
    let cases: Vec<(String, &str)> = vec![
        ("pods: []".into(), "missing field `topology`"),
        (format!("{MACHINE}unavailableCPUs: \"3-1\""), "<string>: unavailableCPUs: cpu list \"3-1\""),
        (format!("{MACHINE}kubelet: {{cpuManagerPolicy: fast}}"), "<string>: kubelet: cpuManagerPolicy: unknown policy \"fast\""),
        (format!("{MACHINE}kubelet: 3"), "<string>: kubelet: must be KubeletConfiguration fields"),
        (format!("{MACHINE}kubelet: {{featureGates: {{PodLevelResources: maybe}}}}"), "<string>: kubelet: invalid type"),
        (
            format!("{MACHINE}pods:\n- metadata: {{name: ok}}\n- metadata: {{name: bad}}\n  spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 2}}, limits: {{cpu: 1}}}}}}]}}\n"),
            "<string>: pods[1] (default/bad): spec.containers[0].resources.requests[cpu]: must be less than or equal to cpu limit of 1",
        ),
        (format!("{MACHINE}pods: [missing.yaml]"), "read /nonexistent/missing.yaml"),
        (format!("{MACHINE}steps: [{{remove: ghost}}]"), "<string>: steps[0].remove: no live pod default/ghost"),
        (
            format!("{MACHINE}pods:\n{}{}", pod_yaml("a", "    containers: [{name: x}]\n"), pod_yaml("a", "    containers: [{name: y}]\n")),
            "<string>: pods[1]: pod default/a is already admitted (remove it first)",
        ),
        (
            format!("{MACHINE}pods:\n{}steps: [{{remove: {{pod: a, container: y}}}}]", pod_yaml("a", "    containers: [{name: x}]\n")),
            "<string>: steps[0].remove: pod default/a has no live container \"y\"",
        ),
        ("topology: [1]".into(), "<string>: topology: must be a path"),
        (
            "topology: {cpus: [{id: 0, core: 0, socket: 0, numa: 3}], numa: [{id: 0}]}".into(),
            "<string>: topology: topology json inline: topology: cpu 0 is on numa node 3",
        ),
        (format!("{MACHINE}unavailableCPUs: \"9\""), "<string>: the node refuses to start: unavailable CPUs 9"),
    ];
    for (text, want) in cases {
        let got = match run(&text) {
            Ok(o) => format!("accepted: {:?}", o.report),
            Err(e) => e.to_string(),
        };
        assert!(got.contains(want), "for\n{text}\n got: {got}\nwant: {want}");
    }
}

#[test]
fn the_table_marks_every_cpu() {
    let text = format!(
        "{MACHINE}kubelet: {{cpuManagerPolicy: static, reservedSystemCPUs: \"0\"}}\nunavailableCPUs: \"3\"\npods:\n{}",
        pod_yaml("a", "    containers: [{name: x}]\n")
    );
    let s = Scenario::from_str(&text, Path::new(".")).unwrap();
    let out = s.run().unwrap();
    let t = table::render(&out.report, &s.topology);
    assert!(t.contains("default/a"), "{t}");
    assert!(
        t.contains("NUMA node 0\n  cpu    0  core    0  socket  0  reserved\n"),
        "{t}"
    );
    assert!(t.contains("cpu    1  core    1  socket  0  shared"), "{t}");
    assert!(t.contains("NUMA node 1\n"), "{t}");
    assert!(
        t.contains("cpu    3  core    3  socket  1  unavailable"),
        "{t}"
    );
}

#[test]
fn the_static_policy_runs_without_reserved_cpus_with_a_warning() {
    let text = format!(
        "{MACHINE}kubelet: {{cpuManagerPolicy: static, reservedSystemCPUs: \"\"}}\npods:\n{}",
        pod_yaml(
            "all",
            "    containers: [{name: c, resources: {limits: {cpu: 4, memory: 1Gi}}}]\n"
        )
    );
    let out = run(&text).unwrap();
    let fields: Vec<&str> = out.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(fields, ["reservedSystemCPUs"]);
    let c = &out.report.pods[0].containers[0];
    assert!(c.exclusive);
    assert_eq!(c.cpus, "0-3", "every CPU can be granted");
    assert_eq!(out.report.node.shared_cpus, "");
}

#[test]
fn a_removed_pod_may_come_back() {
    let text = format!(
        "{MACHINE}pods:\n{}steps:\n- remove: a\n- admit: {{metadata: {{name: a}}, spec: {{containers: [{{name: z}}]}}}}\n",
        pod_yaml("a", "    containers: [{name: x}]\n"),
    );
    let out = run(&text).unwrap();
    let names: Vec<&str> = out.report.pods[0]
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["z"]);
    assert_eq!(out.report.pods.len(), 1);
}

#[test]
fn resize_steps_grow_keep_and_refuse() {
    let text = format!(
        r#"{MACHINE}kubelet: {{cpuManagerPolicy: static, reservedSystemCPUs: "0", topologyManagerPolicy: single-numa-node}}
pods:
{}{}steps:
- resize: {{pod: a, container: x, resources: {{limits: {{cpu: 2, memory: 1Gi}}}}}}
- resize: {{pod: a, container: x, resources: {{limits: {{cpu: 3, memory: 1Gi}}}}}}
"#,
        pod_yaml(
            "b",
            "    containers: [{name: x, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n"
        ),
        pod_yaml(
            "a",
            "    containers: [{name: x, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n"
        ),
    );
    let out = run(&text).unwrap();
    let json = serde_json::to_value(&out.report).unwrap();
    // b takes node 0's free CPU (0 is reserved), a one CPU of node 1; a keeps it and gets the
    // other CPU of node 1; a third CPU would need node 0: refused, nothing changes.
    assert_eq!(
        json,
        serde_json::json!({
            "pods": [{"namespace": "default", "name": "b", "admitted": true, "containers": [
                {"name": "x", "role": "app", "cpus": "1", "exclusive": true, "cpuQuota": -1}
            ]}, {"namespace": "default", "name": "a", "admitted": true, "containers": [
                {"name": "x", "role": "app", "cpus": "2-3", "exclusive": true, "cpuQuota": -1}
            ], "resizeError": "not enough cpus available to satisfy request: requested=1, available=0 (NUMA node(s) 1: free cpus \"\")"}],
            "node": {"reservedCPUs": "0", "sharedCPUs": "0"}
        })
    );
    let bad = run(&format!(
        "{MACHINE}pods:\n{}steps:\n- resize: {{pod: a, container: nope, resources: {{}}}}\n",
        pod_yaml("a", "    containers: [{name: x}]\n")
    ))
    .unwrap_err();
    assert!(bad.to_string().contains("steps[0].resize"), "{bad}");
}

#[test]
fn the_resize_example_matches_its_expect_block() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/resize.yaml");
    let s = Scenario::load(&path).unwrap();
    let report = serde_json::to_value(s.run().unwrap().report).unwrap();
    let expect = s.expect.clone().expect("an expect block");
    let mismatches = expect::check(&expect, &report);
    assert!(mismatches.is_empty(), "{mismatches:?}\n{report:#}");
}

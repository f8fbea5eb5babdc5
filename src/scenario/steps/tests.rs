use std::path::Path;

use super::super::Scenario;
use super::*;

/// Two NUMA nodes with two single-thread cores each, 4Gi per node; static CPU and memory
/// policies, single-numa-node, container scope.
const HEAD: &str = r#"
id: case-1
topology:
  cpus:
  - {id: 0, core: 0, socket: 0, numa: 0}
  - {id: 1, core: 1, socket: 0, numa: 0}
  - {id: 2, core: 2, socket: 1, numa: 1}
  - {id: 3, core: 3, socket: 1, numa: 1}
  numa:
  - {id: 0, memory: 4Gi}
  - {id: 1, memory: 4Gi}
kubelet:
  featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}
  cpuManagerPolicy: static
  reservedSystemCPUs: "0"
  memoryManagerPolicy: Static
  reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]
  topologyManagerPolicy: single-numa-node
"#;

fn steps(body: &str) -> StepsReport {
    let text = format!("{HEAD}{body}");
    Scenario::from_str_keeping_refusals(&text, Path::new("/nonexistent"))
        .unwrap()
        .run_steps()
        .unwrap()
}

fn free(s: &StepSnapshot, numa: u32) -> u64 {
    s.node
        .memory
        .iter()
        .find(|m| m.numa == numa && m.resource == "memory")
        .unwrap()
        .free
}

const GI: u64 = 1 << 30;

#[test]
fn every_step_gets_a_snapshot_and_later_starts_free_init_memory() {
    let r = steps(
        r#"steps:
- admit: {metadata: {name: a}, spec: {initContainers: [{name: init, resources: {limits: {cpu: 1, memory: 3Gi}}}], containers: [{name: app, resources: {limits: {cpu: 1, memory: 1Gi}}}]}}
  start: false
- start: {pod: a, containers: [init]}
- start: {pod: default/a, containers: [app]}
- remove: {pod: a}
"#,
    );
    assert_eq!(r.id.as_deref(), Some("case-1"));
    assert_eq!(r.config_error, None);
    assert_eq!(r.steps.len(), 4);
    let a = &r.steps[0].pods[0];
    assert!(a.admitted);
    let init = &a.containers[0];
    assert_eq!((init.isolation.as_str(), init.cpus.len()), ("container", 1));
    assert_eq!(init.memory_nodes.as_deref(), Some("0"));
    let all = 4 * GI - (100 << 20);
    assert_eq!(
        free(&r.steps[0], 0),
        all - 3 * GI,
        "the init container's 3Gi are held"
    );
    assert_eq!(
        free(&r.steps[1], 0),
        all - 3 * GI,
        "its own start frees nothing"
    );
    // The app started: the init container's memory is back, its blocks are gone.
    assert_eq!(free(&r.steps[2], 0), all - GI);
    let init = &r.steps[2].pods[0].containers[0];
    assert_eq!((init.memory_nodes.as_ref(), init.memory.len()), (None, 0));
    assert!(r.steps[3].pods.is_empty());
    assert_eq!(r.steps[3].node.shared_cpus, "0-3");
    assert_eq!(free(&r.steps[3], 0), all);
}

#[test]
fn refusals_rejections_and_stopped_containers() {
    let r = steps(
        r#"steps:
- admit: {metadata: {name: bad}, spec: {containers: [{name: c, resources: {requests: {cpu: 2}, limits: {cpu: 1}}}]}}
- admit: {metadata: {name: big}, spec: {containers: [{name: c, resources: {limits: {cpu: 1, memory: 5Gi}}}]}}
- admit: {metadata: {name: ok}, spec: {containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]}}
- remove: {pod: ok, container: c}
- start: {pod: ok, containers: [c]}
- remove: {pod: ok}
- remove: {pod: big}
- remove: {pod: bad}
"#,
    );
    let last = &r.steps[3].pods;
    let names: Vec<&str> = last.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["bad", "big", "ok"]);
    assert!(
        !last[0].admitted && last[0].api_error.is_some(),
        "{:?}",
        last[0]
    );
    assert_eq!(
        (last[1].reason.as_deref(), last[1].message.as_deref()),
        (
            Some("TopologyAffinityError"),
            Some("Resources cannot be allocated with Topology locality")
        )
    );
    // Its only container stopped: the pod is listed without it and still holds its CPU and
    // memory (kubelet v1.37.2 frees them when the pod goes); it starts again on the same CPU.
    assert!(
        last[2].admitted && last[2].containers.is_empty(),
        "{:?}",
        last[2]
    );
    assert_eq!(r.steps[3].node, r.steps[2].node);
    assert_eq!(r.steps[4].pods[2].containers, r.steps[2].pods[2].containers);
    assert_eq!(r.steps[5].node.shared_cpus, "0-3");
    // Pods the node or the API server refused are removed like any pod.
    assert!(r.steps[7].pods.is_empty(), "{:?}", r.steps[7]);
}

#[test]
fn settings_the_kubelet_refuses_are_a_config_error() {
    let text = format!(
        "{}steps: []\n",
        HEAD.replace("  reservedSystemCPUs: \"0\"\n", "")
    );
    let s = Scenario::from_str_keeping_refusals(&text, Path::new("/nonexistent")).unwrap();
    // simulate only warns; the kubelet (and the steps answer) refuses.
    assert!(s.run().is_ok());
    let r = s.run_steps().unwrap();
    assert!(
        r.config_error
            .as_deref()
            .is_some_and(|e| e.contains("systemreserved.cpu + kubereserved.cpu")),
        "{r:?}"
    );
    assert!(r.steps.is_empty());
}

#[test]
fn a_start_names_live_containers_of_a_live_pod() {
    let text = format!(
        "{HEAD}steps:\n- admit: {{metadata: {{name: a}}, spec: {{containers: [{{name: c}}]}}}}\n- start: {{pod: a, containers: [x]}}\n"
    );
    let s = Scenario::from_str(&text, Path::new("/nonexistent")).unwrap();
    let e = s.run_steps().unwrap_err().to_string();
    assert!(
        e.contains("steps[1].start: pod default/a has no live container \"x\""),
        "{e}"
    );
    let text = format!("{HEAD}steps:\n- start: {{pod: nobody, containers: [x]}}\n");
    let e = Scenario::from_str(&text, Path::new("/nonexistent"))
        .unwrap()
        .run()
        .unwrap_err()
        .to_string();
    assert!(e.contains("no live pod default/nobody"), "{e}");
    let text = format!("{HEAD}steps:\n- {{remove: a, start: false}}\n");
    let e = Scenario::from_str(&text, Path::new("/nonexistent")).unwrap_err();
    assert!(
        e.to_string().contains("start: false only beside admit"),
        "{e}"
    );
}

/// With PodLevelResources off the API server drops `spec.resources` (DropDisabledPodFields): the
/// pod is a classic one, its containers' own requests decide.
#[test]
fn without_pod_level_resources_the_api_server_drops_them() {
    let text = HEAD.replace(
        "featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}",
        "featureGates: {PodLevelResources: false, PodLevelResourceManagers: false, \
         InPlacePodLevelResourcesVerticalScaling: false, PodLevelResourcesFixDefaulting: false, \
         PodLevelResourcesFixKubeletQOSClass: false}",
    ) + r#"steps:
- admit: {metadata: {name: a}, spec: {resources: {limits: {cpu: 1, memory: 64Mi}}, containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]}}
"#;
    let r = Scenario::from_str_keeping_refusals(&text, Path::new("/nonexistent"))
        .unwrap()
        .run_steps()
        .unwrap();
    let a = &r.steps[0].pods[0];
    assert!(a.admitted && a.api_error.is_none(), "{a:?}");
    assert_eq!(a.containers[0].isolation, "container");
}

//! Device manager tests: hints (`generateDeviceTopologyHints` rows), allocation with the stub
//! preference, reuse of init containers' devices, and `Node` admissions where the device hint
//! moves the CPUs and memory.

use std::collections::{BTreeMap, BTreeSet};

use super::alloc::{devices_to_allocate, preferred, Ask, Ids};
use super::hints::generate;
use super::requests::pod_requests;
use super::{Device, DeviceFacts, DeviceManager};
use crate::placement::test_pods::{self, container};
use crate::placement::{
    ContainerRole, ContainerSpec, HintProvider, NumaMask, ResourceList, Resources, TopologyHint,
};

const GPU: &str = "example.com/gpu";

fn dev(id: &str, nodes: &[u32]) -> Device {
    Device {
        id: id.into(),
        numa_nodes: nodes.to_vec(),
    }
}

fn ids(list: &[&str]) -> Ids {
    list.iter().map(|s| s.to_string()).collect()
}

fn hint(nodes: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(NumaMask::from_ids(nodes.iter().copied())),
        preferred,
    }
}

fn gpus(name: &str, role: ContainerRole, n: u64) -> ContainerSpec {
    let l = ResourceList {
        extended: BTreeMap::from([(GPU.to_string(), n)]),
        ..ResourceList::default()
    };
    container(
        name,
        role,
        Resources {
            requests: l.clone(),
            limits: l,
        },
    )
}

fn facts(devices: Vec<Device>) -> DeviceFacts {
    DeviceFacts {
        allocatable: BTreeMap::from([(GPU.to_string(), devices)]),
        ..DeviceFacts::default()
    }
}

/// Two devices on node 0, one on node 1, one on node 2.
fn four() -> Vec<Device> {
    vec![
        dev("a", &[0]),
        dev("b", &[0]),
        dev("c", &[1]),
        dev("d", &[2]),
    ]
}

#[test]
fn hints_prefer_the_fewest_nodes_that_could_hold_the_request() {
    let all = ids(&["a", "b", "c", "d"]);
    let h = generate(&four(), &[0, 1, 2], &all, &Ids::new(), 2);
    assert_eq!(
        h,
        vec![
            hint(&[0], true),
            hint(&[0, 1], false),
            hint(&[0, 2], false),
            hint(&[1, 2], false),
            hint(&[0, 1, 2], false),
        ]
    );
}

#[test]
fn devices_in_use_still_count_for_the_minimum() {
    // a and b are taken: node 0 alone could hold 2 devices, so no remaining hint is preferred.
    let h = generate(&four(), &[0, 1, 2], &ids(&["c", "d"]), &Ids::new(), 2);
    assert_eq!(h, vec![hint(&[1, 2], false), hint(&[0, 1, 2], false)]);
}

#[test]
fn hints_cover_only_nodes_with_devices_and_must_hold_reusable_ones() {
    let devices = vec![dev("a", &[0]), dev("b", &[3]), dev("c", &[3])];
    let h = generate(&devices, &[0, 1, 2, 3], &ids(&["b", "c"]), &ids(&["a"]), 2);
    assert_eq!(h, vec![hint(&[0, 3], false)]);
}

#[test]
fn stub_preference_is_must_then_lowest_ids() {
    let p = preferred(&ids(&["d", "b", "c", "a"]), &ids(&["c"]), 3);
    assert_eq!(p, ids(&["a", "b", "c"]));
}

fn ask<'a>(
    held: &'a Ids,
    reusable: &'a Ids,
    healthy: &'a Ids,
    available: &'a Ids,
    devices: &'a [Device],
    hint: &'a TopologyHint,
    required: u64,
) -> Ask<'a> {
    Ask {
        resource: GPU,
        required,
        held,
        reusable,
        registered: true,
        healthy,
        available,
        devices,
        hint,
    }
}

#[test]
fn allocation_takes_aligned_devices_then_the_preference() {
    let devices = four();
    let all = ids(&["a", "b", "c", "d"]);
    let none = Ids::new();
    // One of node 0's two: the preference picks among the aligned ones.
    let h = hint(&[0], true);
    let got = devices_to_allocate(&ask(&none, &none, &all, &all, &devices, &h, 1)).unwrap();
    assert_eq!(got, ids(&["a"]));
    // Hint node 2, three needed: d, then the lowest ids of the rest.
    let h = hint(&[2], false);
    let got = devices_to_allocate(&ask(&none, &none, &all, &all, &devices, &h, 3)).unwrap();
    assert_eq!(got, ids(&["a", "b", "d"]));
    // Not enough.
    let avail = ids(&["c"]);
    let err = devices_to_allocate(&ask(&none, &none, &all, &avail, &devices, &h, 2)).unwrap_err();
    assert_eq!(
        err,
        "requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1"
    );
}

#[test]
fn pod_requests_follow_the_sidecar_formula() {
    let p = test_pods::pod(
        "p",
        vec![
            gpus("init", ContainerRole::Init, 3),
            gpus("side", ContainerRole::Sidecar, 1),
            gpus("init2", ContainerRole::Init, 1),
        ],
        vec![gpus("app", ContainerRole::App, 1)],
        None,
    );
    assert_eq!(pod_requests(&p), BTreeMap::from([(GPU.to_string(), 3)]));
}

#[test]
fn app_container_reuses_the_init_containers_devices() {
    let mut dm = DeviceManager::new(vec![0, 1, 2]);
    dm.set_facts(facts(four()));
    let p = test_pods::pod(
        "p",
        vec![gpus("init", ContainerRole::Init, 2)],
        vec![gpus("app", ContainerRole::App, 2)],
        None,
    );
    let h = hint(&[0], true);
    dm.allocate(&p, &p.init_containers[0], &h).unwrap();
    // The app's hints count the init container's devices as its own.
    let hints = dm.container_hints(&p, &p.containers[0]);
    assert_eq!(hints[GPU].as_ref().unwrap()[0], hint(&[0], true));
    dm.allocate(&p, &p.containers[0], &h).unwrap();
    let held = dm.container_devices("p", "app");
    assert_eq!(held[GPU], vec!["a".to_string(), "b".to_string()]);
}

#[test]
fn devices_the_kubelet_gave_regenerate_their_hints() {
    let mut dm = DeviceManager::new(vec![0, 1, 2]);
    let mut f = facts(four());
    f.allocated = BTreeMap::from([(
        "app".to_string(),
        BTreeMap::from([(GPU.to_string(), vec!["c".to_string()])]),
    )]);
    dm.set_facts(f);
    let p = test_pods::pod("p", vec![], vec![gpus("app", ContainerRole::App, 1)], None);
    // Every combination that holds c; only node 1 alone is preferred.
    let want = Some(vec![
        hint(&[1], true),
        hint(&[0, 1], false),
        hint(&[1, 2], false),
        hint(&[0, 1, 2], false),
    ]);
    assert_eq!(dm.container_hints(&p, &p.containers[0])[GPU], want);
    assert_eq!(dm.pod_hints(&p)[GPU], want);
}

#[test]
fn devices_without_topology_give_no_preference_and_unregistered_resources_none() {
    let mut dm = DeviceManager::new(vec![0, 1]);
    dm.set_facts(facts(vec![dev("x", &[]), dev("y", &[])]));
    let mut c = gpus("app", ContainerRole::App, 1);
    c.resources
        .limits
        .extended
        .insert("example.com/other".into(), 1);
    let p = test_pods::pod("p", vec![], vec![c], None);
    let hints = dm.container_hints(&p, &p.containers[0]);
    assert_eq!(hints.len(), 1);
    assert_eq!(hints[GPU], None);
}

#[test]
fn in_use_devices_are_not_available() {
    let mut dm = DeviceManager::new(vec![0, 1, 2]);
    let mut f = facts(four());
    f.in_use = BTreeMap::from([(GPU.to_string(), BTreeSet::from(["a".to_string()]))]);
    dm.set_facts(f);
    let p = test_pods::pod("p", vec![], vec![gpus("app", ContainerRole::App, 2)], None);
    let hints = dm.container_hints(&p, &p.containers[0]);
    assert!(hints[GPU].as_ref().unwrap().iter().all(|h| !h.preferred));
    let p3 = test_pods::pod("q", vec![], vec![gpus("app", ContainerRole::App, 4)], None);
    assert_eq!(
        dm.container_hints(&p3, &p3.containers[0])[GPU],
        Some(vec![])
    );
}

mod node;

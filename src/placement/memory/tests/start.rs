//! kubelet `AddContainer` (a container starts): the regular init containers before it give
//! their memory back, as `memorymanager.manager.AddContainer` removes them by reference.

use super::*;

/// A 12Gi init container, then a 2Gi app: once the app starts, only the app's 2Gi stay charged.
#[test]
fn an_app_start_gives_back_what_the_init_containers_held() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![gu("init", ContainerRole::Init, 1000, 12 * GI)],
        vec![gu("app", ContainerRole::App, 1000, 2 * GI)],
        None,
    );
    let h = hint(&[0], true);
    m.allocate(&p, &p.init_containers[0], &h).unwrap();
    m.allocate(&p, &p.containers[0], &h).unwrap();
    // Node 0 has 14Gi allocatable (16Gi - 1Gi reserved - 1Gi hugepages). Admission charges the
    // largest need: the init container's 12Gi, which the app reuses.
    assert_eq!(free(&m, 0), 2 * GI);
    m.start_container(&p, "init");
    assert_eq!(
        free(&m, 0),
        2 * GI,
        "an init container's own start frees nothing"
    );
    m.start_container(&p, "app");
    assert_eq!(free(&m, 0), 12 * GI);
    assert_eq!(m.container_blocks("p", "init"), None);
    assert_eq!(m.memory_nodes("p", "init"), None);
    assert_eq!(m.container_blocks("p", "app").unwrap()[0].size, 2 * GI);
    // The group bookkeeping went back too: the app's block is the node's only assignment.
    assert_eq!(m.state().machine[&0].assignments, 1);
    // Removing the pod afterwards leaves the node as it was.
    m.remove_pod("p");
    assert_eq!(m.state(), mm().state());
}

/// A sidecar's start releases the regular init containers before it, not those after it;
/// the sidecar keeps its own memory when the app starts.
#[test]
fn a_sidecar_start_releases_only_earlier_regular_init_containers() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![
            gu("init-a", ContainerRole::Init, 1000, 2 * GI),
            gu("side", ContainerRole::Sidecar, 1000, GI),
            gu("init-b", ContainerRole::Init, 1000, 3 * GI),
        ],
        vec![gu("app", ContainerRole::App, 1000, GI)],
        None,
    );
    let h = hint(&[1], true);
    for c in p.init_containers.iter().chain(&p.containers) {
        m.allocate(&p, c, &h).unwrap();
    }
    m.start_container(&p, "side");
    assert_eq!(m.container_blocks("p", "init-a"), None);
    assert!(m.container_blocks("p", "init-b").is_some());
    m.start_container(&p, "app");
    assert_eq!(m.container_blocks("p", "init-b"), None);
    assert_eq!(m.container_blocks("p", "side").unwrap()[0].size, GI);
    assert_eq!(free(&m, 1), 15 * GI - 2 * GI);
}

/// A pod-level (PLRM) pod: starting the app deletes the init container's blocks but the pod
/// keeps its whole budget until its last container goes (kubelet `RemoveContainer` with pod
/// blocks).
#[test]
fn a_pod_level_pod_keeps_its_budget_when_the_init_container_is_done() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![bare("init", ContainerRole::Init)],
        vec![
            gu("gu", ContainerRole::App, 1000, GI),
            bare("s", ContainerRole::App),
        ],
        Some((2000, 3 * GI)),
    );
    m.allocate_pod(&p, &hint(&[0], true)).unwrap();
    let charged = free(&m, 0);
    m.start_container(&p, "gu");
    assert_eq!(m.container_blocks("p", "init"), None);
    assert_eq!(free(&m, 0), charged);
    assert_eq!(m.pod_blocks("p").unwrap()[0].size, 3 * GI);
}

//! Pod hints (init/sidecar formula), the PLRM bubble and its empty-shared-pool rejections, gates.

use super::*;

#[test]
fn pod_hints_use_init_sidecar_formula() {
    let m = mm();
    let p = pod(
        "p",
        vec![
            gu("side", ContainerRole::Sidecar, 1000, GI),
            gu("init", ContainerRole::Init, 1000, 14 * GI),
        ],
        vec![gu("app", ContainerRole::App, 1000, 2 * GI)],
        None,
    );
    // max(1+14, 2+1) = 15Gi: only node 1 (15Gi) or both.
    assert_eq!(
        memory_hints(&m.pod_hints(&p)),
        vec![(vec![1], true), (vec![0, 1], false)]
    );
}

#[test]
fn plrm_pod_bubble_partitions_and_releases_with_last_container() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![bare("init", ContainerRole::Init)],
        vec![
            gu("gu", ContainerRole::App, 1000, 2 * GI),
            bare("shared", ContainerRole::App),
        ],
        Some((3000, 6 * GI)),
    );
    assert_eq!(
        memory_hints(&m.pod_hints(&p)),
        vec![(vec![0], true), (vec![1], true), (vec![0, 1], false)]
    );
    m.allocate_pod(&p, &hint(&[1], true)).unwrap();
    let size = |c: &str| {
        m.container_blocks("p", c)
            .unwrap()
            .iter()
            .map(|b| b.size)
            .sum::<u64>()
    };
    assert_eq!(size("gu"), 2 * GI);
    assert_eq!(size("shared"), 4 * GI);
    assert_eq!(size("init"), 6 * GI);
    assert_eq!(m.pod_blocks("p").unwrap()[0].size, 6 * GI);
    assert_eq!(free(&m, 1), 9 * GI);
    for c in ["init", "gu", "shared"] {
        assert_eq!(m.memory_nodes("p", c), Some(mask(&[1])));
    }
    m.remove_container("p", "init");
    m.remove_container("p", "gu");
    assert_eq!(
        free(&m, 1),
        9 * GI,
        "nothing returns before the last container"
    );
    m.remove_container("p", "shared");
    assert_eq!(m.state(), mm().state());
}

#[test]
fn plrm_empty_shared_pool_is_rejected() {
    let mut m = mm();
    let p = pod(
        "p",
        vec![],
        vec![
            gu("a", ContainerRole::App, 1000, GI),
            gu("b", ContainerRole::App, 1000, GI),
            bare("shared", ContainerRole::App),
        ],
        Some((2000, 2 * GI)),
    );
    let h = m.pod_hints(&p);
    assert_eq!(h.get(MEMORY), Some(&Some(vec![])));
    let err = m.allocate_pod(&p, &hint(&[0], false)).unwrap_err();
    assert_eq!(err.reason(), "EmptyPodSharedPoolError");
    assert_eq!(
        err.to_string(),
        "pod rejected, sum of exclusive container memory requests equals pod budget, leaving no memory for shared containers"
    );
    assert_eq!(m.state(), mm().state());
}

#[test]
fn plrm_init_container_larger_than_pool_is_rejected() {
    let m = mm();
    let p = pod(
        "p",
        vec![
            gu("side", ContainerRole::Sidecar, 1000, 2 * GI),
            gu("init", ContainerRole::Init, 1000, 3 * GI),
        ],
        vec![bare("app", ContainerRole::App)],
        Some((4000, 4 * GI)),
    );
    let err = crate::placement::memory::pod::validate_pod_scope(&p, m.gates).unwrap_err();
    assert_eq!(err, format!("pod rejected, largest exclusive init container requests {} of memory, but only {} available", 3 * GI, 2 * GI));
}

#[test]
fn gates_off_skip_pod_level_pods() {
    let mut c = config();
    c.gates.pod_level_resource_managers = false;
    let mut m = MemoryManager::new(&topo(), &c).unwrap();
    let p = pod(
        "p",
        vec![],
        vec![gu("gu", ContainerRole::App, 1000, 2 * GI)],
        Some((2000, 4 * GI)),
    );
    assert!(m.pod_hints(&p).is_empty());
    assert!(m.container_hints(&p, &p.containers[0]).is_empty());
    m.allocate(&p, &p.containers[0], &hint(&[0], true)).unwrap();
    assert!(m.container_blocks("p", "gu").is_none());
}

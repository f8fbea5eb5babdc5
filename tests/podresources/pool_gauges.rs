//! The pool gauges are counted straight from the registry (`lifecycle::gauges::pool_counts`); they must
//! match what the placement view shows, CPU by CPU and byte by byte, through admissions,
//! container and pod removals, pod and container scope, and CPUs held by others.

use numa_shim::testing::podresources::registry as support;

use numa_shim::cpuset::CpuSet;
use numa_shim::inspect::{view_pool_counts, PlacementView};
use numa_shim::lifecycle::gauges::pool_counts;
use numa_shim::lifecycle::Registry;
use numa_shim::placement::config::TopologyScope;
use support::*;

fn check(registry: &Registry, step: &str) {
    let fast = pool_counts(registry);
    let view = view_pool_counts(&PlacementView::from_registry(registry));
    assert_eq!(fast, view, "after {step}");
}

fn churn(mut registry: Registry) {
    check(&registry, "start");
    let mut live: Vec<String> = Vec::new();
    for i in 0..120u64 {
        let uid = format!("p{i}");
        let spec = match i % 4 {
            0 => plrm_pod(&uid, 2 + i % 3),
            1 => pod_of(&uid, None, vec![app("solo", guaranteed(1000, GI))]),
            2 => pod_of(&uid, None, vec![app("web", burstable(200))]),
            _ => pod_of(
                &uid,
                None,
                vec![
                    app("a", guaranteed(2000, GI / 2)),
                    app("b", guaranteed(500, GI / 4)),
                ],
            ),
        };
        if run(&mut registry, spec) {
            live.push(uid.clone());
        }
        check(&registry, &format!("admitting {uid}"));
        if i % 7 == 3 && !live.is_empty() {
            let victim = live[(i as usize * 5) % live.len()].clone();
            let id = registry
                .containers()
                .iter()
                .find(|(_, c)| c.pod_uid == victim)
                .map(|(id, _)| id.clone());
            if let Some(id) = id {
                registry.remove_container(&id);
                check(&registry, &format!("removing container {id}"));
            }
        }
        if live.len() > 12 || i % 5 == 0 && !live.is_empty() {
            let victim = live.remove((i as usize * 3) % live.len());
            remove(&mut registry, &victim);
            check(&registry, &format!("removing pod {victim}"));
        }
    }
}

#[test]
fn gauges_match_the_view_in_pod_scope() {
    churn(registry_on(4, 16, TopologyScope::Pod));
}

#[test]
fn gauges_match_the_view_in_container_scope() {
    churn(registry_on(2, 12, TopologyScope::Container));
}

#[test]
fn gauges_match_the_view_with_cpus_held_by_others() {
    let mut registry = registry_on(2, 8, TopologyScope::Pod);
    registry
        .hold_foreign(&CpuSet::parse("14-15").unwrap())
        .unwrap();
    let fast = pool_counts(&registry);
    assert_eq!(
        fast.iter().map(|n| n.cpus.iter().sum::<u64>()).sum::<u64>(),
        14,
        "held CPUs are in no pool"
    );
    churn(registry);
}

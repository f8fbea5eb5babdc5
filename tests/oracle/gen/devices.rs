//! Device plugin devices in a case: some cases get 1–8 devices of `example.com/gpu` on 2–4 of
//! the machine's NUMA nodes (some without topology), and their pods' containers ask for some.
//!
//! Within a pod, each container asks for at least as many devices as the containers before it
//! (kubelet order: init containers, then app containers): a container that asks for fewer
//! devices than the init containers before it left for reuse gets some of them in Go map order
//! (`devicesToAllocate`), which no oracle can answer the same twice (docs/fidelity.md).

use serde_json::{json, Value};

use super::super::machine::Machine;
use super::super::prng::Prng;
use super::{Features, MAX_PERMUTATIONS};

pub const GPU: &str = "example.com/gpu";

/// Adds devices to `case` (its `devices` and the pods' requests) in about one case in three.
pub fn add(rng: &mut Prng, case: &mut Value, machine: &Machine, f: &mut Features) {
    if machine.numa.len() < 2 || !rng.chance(35) {
        return;
    }
    let ids: Vec<u32> = machine.numa.iter().map(|n| n.id).collect();
    let span = rng.range(2, 4.min(ids.len() as u64)) as usize;
    let mut nodes = ids.clone();
    while nodes.len() > span {
        nodes.remove(rng.below(nodes.len() as u64) as usize);
    }
    let count = rng.range(1, 8);
    let untopology = rng.chance(15);
    let devices: Vec<Value> = (0..count)
        .map(|i| {
            let id = format!("gpu-{i}");
            if untopology || rng.chance(8) {
                f.tag("devices=no-topology");
                json!({ "id": id })
            } else if rng.chance(10) {
                let a = *rng.pick(&nodes);
                let b = *rng.pick(&nodes);
                json!({"id": id, "numa": if a == b { vec![a] } else { vec![a.min(b), a.max(b)] }})
            } else {
                json!({"id": id, "numa": [*rng.pick(&nodes)]})
            }
        })
        .collect();
    case["devices"] = json!({ GPU: devices });
    f.tag("devices");
    let device_hints = (1u64 << nodes.len()) - 1;
    let masks = (1u64 << machine.numa.len()) - 1;
    let Some(steps) = case["steps"].as_array_mut() else {
        return;
    };
    for step in steps.iter_mut() {
        let Some(pod) = step.get_mut("admit") else {
            continue;
        };
        // The merge crosses one more hint list: keep it within what both sides answer.
        let k = hinted_resources(pod);
        if masks.saturating_pow(k).saturating_mul(device_hints) > MAX_PERMUTATIONS {
            continue;
        }
        if !rng.chance(60) {
            continue;
        }
        let mut floor = 0u64;
        for list in ["initContainers", "containers"] {
            let Some(containers) = pod
                .get_mut("spec")
                .and_then(|s| s.get_mut(list))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for c in containers {
                if !rng.chance(50) {
                    continue;
                }
                let n = floor.max(rng.range(1, 3));
                floor = n;
                ask(c, n);
                f.tag("devices=requested");
            }
        }
    }
}

/// The hint lists the Topology Manager crosses for a pod without devices.
pub fn hinted_resources(pod: &Value) -> u32 {
    let text = pod.to_string();
    2 + u32::from(text.contains("hugepages-2Mi")) + u32::from(text.contains("hugepages-1Gi"))
}

/// The container asks for `n` devices: in its limits, and in its requests when it writes them.
fn ask(c: &mut Value, n: u64) {
    if !c["resources"].is_object() {
        c["resources"] = json!({});
    }
    let r = &mut c["resources"];
    if !r["limits"].is_object() {
        r["limits"] = json!({});
    }
    r["limits"][GPU] = n.to_string().into();
    if r["requests"].is_object() {
        r["requests"][GPU] = n.to_string().into();
    }
}

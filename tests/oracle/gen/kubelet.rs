//! Kubelet settings for a case: every CPU, Memory and Topology Manager policy, scope and option
//! the kubelet accepts, and now and then one it refuses (static CPU policy without reserved
//! CPUs, incompatible or gated options, `reservedMemory` not matching the reservations,
//! PodLevelResourceManagers without PodLevelResources, an unknown policy name).

use serde_json::{json, Map, Value};

use super::super::machine::{bytes, Machine, GI, MI};
use super::super::prng::Prng;
use super::{Features, MAX_PERMUTATIONS};

/// What the pods of the case are sized against.
#[derive(Debug, Clone)]
pub struct Facts {
    /// CPUs left for exclusive grants (all CPUs minus the reservation).
    pub allocatable_cpus: u64,
    /// The smallest NUMA node's memory.
    pub node_memory: u64,
    /// The machine has 2Mi hugepages.
    pub hugepages: bool,
    /// The machine has 1Gi hugepages.
    pub giant_pages: bool,
}

const CPU_OPTIONS: [(&str, u64, bool); 6] = [
    // (name, percent, alpha)
    ("full-pcpus-only", 25, false),
    ("distribute-cpus-across-numa", 12, false),
    ("align-by-socket", 8, true),
    ("distribute-cpus-across-cores", 6, true),
    ("strict-cpu-reservation", 12, false),
    ("prefer-align-cpus-by-uncorecache", 12, false),
];

pub fn settings(rng: &mut Prng, m: &Machine, f: &mut Features) -> (Value, Facts) {
    let mut k = Map::new();
    let mut gates = Map::new();
    let plr = !rng.chance(8);
    let plrm = if plr { !rng.chance(25) } else { rng.chance(30) };
    gates.insert("PodLevelResources".into(), plr.into());
    gates.insert("PodLevelResourceManagers".into(), plrm.into());
    if !plr {
        // kubelet 1.37's gates that depend on PodLevelResources and default on must go off too
        // (now and then one stays on: the kubelet refuses).
        for gate in [
            "InPlacePodLevelResourcesVerticalScaling",
            "PodLevelResourcesFixDefaulting",
            "PodLevelResourcesFixKubeletQOSClass",
        ] {
            gates.insert(gate.into(), false.into());
        }
    }
    f.tag(match (plr, plrm) {
        (true, true) => "gates=PLR+PLRM",
        (true, false) => "gates=PLR",
        (false, true) => "gates=PLRM-only",
        (false, false) => "gates=none",
    });

    let cpu_static = rng.chance(85);
    let total = m.cpus.len() as u64;
    let mut reserved = 0;
    if cpu_static {
        k.insert("cpuManagerPolicy".into(), "static".into());
        f.tag("cpu=static");
        let mut options = Map::new();
        let mut alpha = false;
        for (name, percent, is_alpha) in CPU_OPTIONS {
            if rng.chance(percent) {
                // Now and then an option named but off.
                let on = !rng.chance(10);
                options.insert(name.into(), on.to_string().into());
                alpha |= is_alpha;
                if on {
                    f.tag(&format!("option={name}"));
                }
            }
        }
        if alpha {
            // Always named: numa-shim defaults the option gates on, the kubelet this one off.
            gates.insert(
                "CPUManagerPolicyAlphaOptions".into(),
                (!rng.chance(15)).into(),
            );
        }
        if !options.is_empty() {
            k.insert("cpuManagerPolicyOptions".into(), Value::Object(options));
        }
        reserved = reserve(rng, m, &mut k);
    } else {
        k.insert(
            "cpuManagerPolicy".into(),
            if rng.chance(10) { "dynamic" } else { "none" }.into(),
        );
        f.tag("cpu=none");
        if rng.chance(50) {
            k.insert("reservedSystemCPUs".into(), "0".into());
        }
    }
    k.insert("featureGates".into(), Value::Object(gates));

    if rng.chance(55) {
        memory_static(rng, m, &mut k);
        f.tag("memory=Static");
    } else {
        k.insert("memoryManagerPolicy".into(), "None".into());
        f.tag("memory=None");
    }

    let policy = *rng.pick(&["none", "best-effort", "restricted", "single-numa-node"]);
    k.insert("topologyManagerPolicy".into(), policy.into());
    f.tag(&format!("topology={policy}"));
    let scope = if rng.chance(55) { "pod" } else { "container" };
    if policy != "none" || rng.chance(30) {
        k.insert("topologyManagerScope".into(), scope.into());
        if policy != "none" {
            f.tag(&format!("scope={scope}"));
        }
    }
    let mut topo_options = Map::new();
    if rng.chance(15) {
        topo_options.insert("prefer-closest-numa-nodes".into(), "true".into());
        f.tag("option=prefer-closest-numa-nodes");
    }
    if rng.chance(4) {
        let max = *rng.pick(&["8", "10", "4"]);
        topo_options.insert("max-allowable-numa-nodes".into(), max.into());
        f.tag("option=max-allowable-numa-nodes");
    }
    if !topo_options.is_empty() {
        k.insert(
            "topologyManagerPolicyOptions".into(),
            Value::Object(topo_options),
        );
    }
    let sizes = hugepage_sizes(m.numa.len());
    let facts = Facts {
        allocatable_cpus: total.saturating_sub(reserved),
        node_memory: m.numa.iter().map(|n| n.memory).min().unwrap_or(0),
        hugepages: sizes >= 1 && m.numa.iter().all(|n| n.hugepages.contains_key(&(2 * MI))),
        giant_pages: sizes >= 2 && m.numa.iter().all(|n| n.hugepages.contains_key(&GI)),
    };
    (Value::Object(k), facts)
}

/// How many hugepage sizes a pod may ask for on a machine with `nodes` NUMA nodes: CPUs, memory
/// and each size are one hint list of up to 2^nodes - 1 hints for the Topology Manager to cross,
/// kept within `MAX_PERMUTATIONS` (8 nodes: none, 6 or 7: 2Mi only, up to 5: both).
fn hugepage_sizes(nodes: usize) -> u32 {
    let masks = (1u64 << nodes.min(63)) - 1;
    (0..=2)
        .rev()
        .find(|&s| {
            masks
                .checked_pow(2 + s)
                .is_some_and(|p| p <= MAX_PERMUTATIONS)
        })
        .unwrap_or(0)
}

/// The CPU reservation; returns how many CPUs it takes.
fn reserve(rng: &mut Prng, m: &Machine, k: &mut Map<String, Value>) -> u64 {
    let ids = m.cpu_ids();
    match rng.below(10) {
        0..=6 => {
            let list: Vec<u32> = match rng.below(4) {
                // CPU 0.
                0 | 1 => vec![ids[0]],
                // CPU 0's whole core.
                2 => {
                    let core = m.cpus[0].core;
                    m.cpus
                        .iter()
                        .filter(|c| c.core == core)
                        .map(|c| c.id)
                        .collect()
                }
                // The first CPU of every socket.
                _ => {
                    let mut first = std::collections::BTreeMap::new();
                    for c in &m.cpus {
                        first.entry(c.socket).or_insert(c.id);
                    }
                    first.into_values().collect()
                }
            };
            let text: Vec<String> = list.iter().map(u32::to_string).collect();
            k.insert("reservedSystemCPUs".into(), text.join(",").into());
            list.len() as u64
        }
        7 | 8 => {
            let (cpu, n) = *rng.pick(&[("1", 1u64), ("2", 2), ("500m", 1), ("1500m", 2)]);
            k.insert("kubeReserved".into(), json!({ "cpu": cpu }));
            n
        }
        // No reservation: the kubelet refuses the static policy.
        _ => 0,
    }
}

/// The Static memory policy with `reservedMemory` = kubeReserved + systemReserved + evictionHard
/// (100Mi by default), all on one node or split over two; now and then 1Mi off (refused).
fn memory_static(rng: &mut Prng, m: &Machine, k: &mut Map<String, Value>) {
    k.insert("memoryManagerPolicy".into(), "Static".into());
    let mut total = 100 * MI;
    if rng.chance(15) {
        // An eviction threshold of its own (replacing the default 100Mi).
        total = *rng.pick(&[50 * MI, 200 * MI]);
        k.insert(
            "evictionHard".into(),
            json!({"memory.available": bytes(total)}),
        );
    }
    for field in ["kubeReserved", "systemReserved"] {
        if rng.chance(15) {
            let extra = *rng.pick(&[128 * MI, 256 * MI]);
            let entry = k.entry(field).or_insert_with(|| json!({}));
            entry["memory"] = bytes(extra).into();
            total += extra;
        }
    }
    if rng.chance(5) {
        total += MI;
    }
    let nodes: Vec<u32> = m.numa.iter().map(|n| n.id).collect();
    let entries = if nodes.len() > 1 && rng.chance(40) {
        let half = total / 2 / MI * MI;
        vec![
            json!({"numaNode": nodes[0], "limits": {"memory": bytes(half)}}),
            json!({"numaNode": nodes[1], "limits": {"memory": bytes(total - half)}}),
        ]
    } else {
        let node = *rng.pick(&nodes);
        vec![json!({"numaNode": node, "limits": {"memory": bytes(total)}})]
    };
    k.insert("reservedMemory".into(), Value::Array(entries));
}

//! The seeded case generator: case `i` of seed `s` is always the same case. A case is a machine
//! (a fixture CPU map or a synthetic one), kubelet settings, and steps: pods admitted in order,
//! some with `start: false` and started later, whole pods and single containers removed.
//! Cases are in kubelet-oracle's format (integration/kubelet-oracle/PROTOCOL.md), which
//! `numa-shim simulate` reads as a scenario.

pub mod devices;
mod kubelet;
mod pods;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::machine::{Cpu, Machine};
use super::prng::Prng;
use pods::{GenPod, PodGen};

/// The most hint permutations one admission may make the Topology Manager walk: its merge
/// crosses one hint list per resource, up to 2^nodes - 1 hints each, so 8 NUMA nodes with CPUs,
/// memory and two hugepage sizes are 255^4 (4.2e9) permutations, which neither kubelet v1.37.2's
/// code nor numa-shim answers within minutes. 2^21 allows 127^3 and 31^4 (docs/fidelity.md).
pub const MAX_PERMUTATIONS: u64 = 1 << 21;

/// The features a case exercises, for the agreement table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features(pub BTreeSet<String>);

impl Features {
    pub fn tag(&mut self, t: &str) {
        self.0.insert(t.to_string());
    }
}

/// One generated case.
#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub machine: Machine,
    /// The case as sent: `id`, `topology`, `kubelet`, `steps`.
    pub json: Value,
    pub features: Features,
}

impl Case {
    pub fn steps(&self) -> &[Value] {
        self.json["steps"].as_array().map_or(&[], Vec::as_slice)
    }

    /// The same case with other steps.
    pub fn with_steps(&self, steps: Vec<Value>) -> Self {
        let mut c = self.clone();
        c.json["steps"] = Value::Array(steps);
        c
    }

    pub fn with_machine(&self, machine: Machine) -> Self {
        let mut c = self.clone();
        c.json["topology"] = machine.to_json();
        c.machine = machine;
        c
    }
}

/// Makes cases from the fixture CPU maps and synthetic machines.
pub struct Generator {
    fixtures: Vec<(String, Vec<Cpu>)>,
    /// Every case on a wide machine of one of these NUMA node counts (`max-allowable-numa-nodes`
    /// raised); empty: the usual machines.
    wide: Vec<u32>,
}

impl Generator {
    pub fn new(fixtures: Vec<(String, Vec<Cpu>)>) -> Self {
        Self {
            fixtures,
            wide: Vec::new(),
        }
    }

    /// Cases on wide machines only: 9-10 NUMA nodes, the kubelet's `max-allowable-numa-nodes`
    /// set to the node count (issue 25: the searched merge against the kubelet's enumeration).
    pub fn wide(self) -> Self {
        self.wide_with(&[9, 10])
    }

    /// [`Generator::wide`] with these NUMA node counts.
    pub fn wide_with(mut self, counts: &[u32]) -> Self {
        self.wide = counts.to_vec();
        self
    }

    /// Case `index` of `seed`.
    pub fn case(&self, seed: u64, index: u64) -> Case {
        let mut rng = Prng::new(seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03));
        rng.next_u64();
        let mut f = Features::default();
        let machine = if !self.wide.is_empty() {
            f.tag("machine=wide");
            Machine::wide(&mut rng, &self.wide)
        } else if !self.fixtures.is_empty() && rng.chance(40) {
            let (name, cpus) = rng.pick(&self.fixtures);
            f.tag("machine=fixture");
            Machine::from_fixture(name, cpus, &mut rng)
        } else {
            f.tag("machine=synthetic");
            Machine::synthetic(&mut rng)
        };
        if machine.mixed_cores() {
            f.tag("mixed-cores");
        }
        let (mut kubelet, facts) = kubelet::settings(&mut rng, &machine, &mut f);
        if !self.wide.is_empty() {
            let options = kubelet
                .as_object_mut()
                .expect("kubelet settings are an object")
                .entry("topologyManagerPolicyOptions")
                .or_insert_with(|| json!({}));
            options["max-allowable-numa-nodes"] = machine.numa_count().to_string().into();
        }
        let gen = PodGen { facts: &facts };
        let id = format!("seed-{seed}/{index}");
        let steps = steps(&mut rng, &gen, index, &mut f);
        let mut json = json!({
            "id": id,
            "topology": machine.to_json(),
            "kubelet": kubelet,
            "steps": steps,
        });
        devices::add(&mut rng, &mut json, &machine, &mut f);
        Case {
            json,
            id,
            machine,
            features: f,
        }
    }
}

/// A pod of the plan and what the plan did with it so far.
struct Planned {
    pod: GenPod,
    started: usize,
    removed: bool,
    stopped: Vec<String>,
}

fn steps(rng: &mut Prng, gen: &PodGen<'_>, index: u64, f: &mut Features) -> Vec<Value> {
    let count = if rng.chance(10) {
        rng.range(6, 9)
    } else {
        rng.range(1, 6)
    };
    let mut plan: Vec<Planned> = Vec::new();
    let mut out = Vec::new();
    for k in 0..count {
        let name = format!("p{k}");
        let uid = format!("00000000-0000-4000-8000-{:06x}{:06x}", index % 0xff_ffff, k);
        let pod = gen.random_pod(rng, &name, &uid, f);
        let later = rng.chance(15);
        let mut step = json!({ "admit": pod.manifest });
        if later {
            step["start"] = false.into();
        }
        out.push(step);
        let started = if later { 0 } else { pod.start_order.len() };
        plan.push(Planned {
            pod,
            started,
            removed: false,
            stopped: Vec::new(),
        });
        if rng.chance(35) {
            out.extend(action(rng, &mut plan, f));
        }
    }
    if rng.chance(50) {
        for p in plan.iter_mut().filter(|p| !p.removed) {
            if p.started < p.pod.start_order.len() {
                out.push(start(p, p.pod.start_order.len()));
                f.tag("steps=start");
            }
        }
    }
    if rng.chance(30) {
        out.extend(action(rng, &mut plan, f));
    }
    out
}

/// A start, a pod removal or a container removal on some pod of the plan.
fn action(rng: &mut Prng, plan: &mut [Planned], f: &mut Features) -> Vec<Value> {
    let live: Vec<usize> = (0..plan.len()).filter(|&i| !plan[i].removed).collect();
    if live.is_empty() {
        return Vec::new();
    }
    let p = &mut plan[*rng.pick(&live)];
    let total = p.pod.start_order.len();
    match rng.below(10) {
        0..=3 if p.started < total => {
            f.tag("steps=start");
            let upto = rng.range(p.started as u64 + 1, total as u64) as usize;
            let mut step = start(p, upto);
            // Now and then out of the kubelet's order (the protocol allows any order).
            if rng.chance(15) {
                if let Some(list) = step["start"]["containers"].as_array_mut() {
                    list.reverse();
                }
            }
            vec![step]
        }
        0..=6 => {
            f.tag("steps=remove");
            p.removed = true;
            vec![json!({"remove": {"pod": format!("default/{}", p.pod.name)}})]
        }
        7 if !p.stopped.is_empty() => {
            // A stopped container starts again (a restart: AddContainer once more).
            f.tag("steps=restart");
            let c = p.stopped.remove(rng.below(p.stopped.len() as u64) as usize);
            vec![json!({"start": {"pod": format!("default/{}", p.pod.name), "containers": [c]}})]
        }
        _ => {
            let running: Vec<&String> = p.pod.start_order[..p.started]
                .iter()
                .filter(|c| !p.stopped.contains(c))
                .collect();
            if running.is_empty() {
                return Vec::new();
            }
            let c = (*rng.pick(&running)).clone();
            f.tag("steps=remove-container");
            p.stopped.push(c.clone());
            vec![json!({"remove": {"pod": format!("default/{}", p.pod.name), "container": c}})]
        }
    }
}

/// Starts the pod's containers from where it stopped up to `upto` (start order).
fn start(p: &mut Planned, upto: usize) -> Value {
    let names = p.pod.start_order[p.started..upto].to_vec();
    p.started = upto;
    json!({"start": {"pod": format!("default/{}", p.pod.name), "containers": names}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_depends_only_on_seed_and_index() {
        let g = Generator::new(Vec::new());
        let a = g.case(42, 7);
        let b = g.case(42, 7);
        assert_eq!(a.json, b.json);
        assert_ne!(a.json, g.case(42, 8).json);
        assert_ne!(a.json, g.case(43, 7).json);
    }

    /// The hint lists the Topology Manager crosses for one pod: CPUs and memory, and one per
    /// hugepage size the pod asks for anywhere (its containers, init containers, pod level),
    /// and the devices' (at most 2^4 - 1 hints: devices are on 2 to 4 nodes).
    fn hinted_resources(case: &Case, pod: &Value) -> (u32, u64) {
        let nodes: BTreeSet<u64> = case.json["devices"][devices::GPU]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["numa"].as_array().into_iter().flatten())
            .filter_map(Value::as_u64)
            .collect();
        let devices = if pod.to_string().contains(devices::GPU) {
            (1u64 << nodes.len().max(1)) - 1
        } else {
            1
        };
        (devices::hinted_resources(pod), devices)
    }

    /// The kubelet's merge walks (2^nodes - 1)^resources permutations per admission: the
    /// generator keeps that within what kubelet v1.37.2 answers in reasonable time (seed
    /// 1796136667278424001 case 4114: 8 nodes, 4 resources, 4.2e9 permutations, no answer from
    /// numa-shim (debug) in 300 s nor from kubelet-oracle in about 2 CPU-minutes).
    #[test]
    fn no_case_asks_the_kubelet_for_an_exponential_merge() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/topologies");
        let g = Generator::new(super::super::machine::fixtures(&dir));
        let cases = (0..3000)
            .map(|i| g.case(1, i))
            .chain(std::iter::once(g.case(1_796_136_667_278_424_001, 4114)));
        for case in cases {
            let masks = (1u64 << case.machine.numa.len()) - 1;
            for step in case.steps() {
                let Some(pod) = step.get("admit") else {
                    continue;
                };
                let (k, devices) = hinted_resources(&case, pod);
                assert!(
                    masks.pow(k) * devices <= MAX_PERMUTATIONS,
                    "{} ({}): {k} hinted resources on {} NUMA nodes: {} permutations",
                    case.id,
                    case.machine.name,
                    case.machine.numa.len(),
                    masks.pow(k)
                );
            }
        }
    }

    #[test]
    fn cases_cover_the_features() {
        let g = Generator::new(Vec::new());
        let mut all = BTreeSet::new();
        for i in 0..400 {
            all.extend(g.case(1, i).features.0);
        }
        for want in [
            "cpu=static",
            "cpu=none",
            "memory=Static",
            "memory=None",
            "topology=single-numa-node",
            "scope=pod",
            "scope=container",
            "pods=classic",
            "pods=pod-level",
            "steps=start",
            "steps=remove",
            "steps=remove-container",
            "mixed-cores",
            "option=full-pcpus-only",
            "option=prefer-closest-numa-nodes",
            "devices",
            "devices=requested",
            "devices=no-topology",
        ] {
            assert!(all.contains(want), "no case has {want}: {all:?}");
        }
    }
}

//! Pods for a case: classic Guaranteed, Burstable and BestEffort pods, pod-level-resources pods
//! mixing exclusive containers with shared ones, sidecars (init containers with restartPolicy
//! Always), regular init containers and containers without resources; memory and hugepages;
//! now and then a pod the API server refuses.

use serde_json::{json, Map, Value};

use super::super::machine::{bytes, GI, MI};
use super::super::prng::Prng;
use super::kubelet::Facts;
use super::Features;

/// A generated pod: its manifest and its containers in the kubelet's start order.
#[derive(Debug, Clone)]
pub struct GenPod {
    pub name: String,
    pub manifest: Value,
    pub start_order: Vec<String>,
}

/// One container's resources.
#[derive(Debug, Clone, Copy)]
enum Res {
    /// Whole CPUs, requests = limits (exclusive CPUs in a Guaranteed pod).
    Exclusive {
        cpus: u64,
        memory: u64,
        pages: u64,
        /// 1Gi hugepages.
        giant: u64,
    },
    /// Fractional CPU, requests = limits.
    Fractional {
        milli: u64,
        memory: u64,
    },
    /// Requests below limits.
    Burstable {
        milli: u64,
        memory: u64,
    },
    None,
}

impl Res {
    /// (cpu milli, memory) it requests.
    fn requests(self) -> (u64, u64) {
        match self {
            Self::Exclusive { cpus, memory, .. } => (cpus * 1000, memory),
            Self::Fractional { milli, memory } | Self::Burstable { milli, memory } => {
                (milli, memory)
            }
            Self::None => (0, 0),
        }
    }

    fn pages(self) -> u64 {
        match self {
            Self::Exclusive { pages, .. } => pages,
            _ => 0,
        }
    }

    fn to_json(self, rng: &mut Prng) -> Value {
        match self {
            Self::Exclusive {
                cpus,
                memory,
                pages,
                giant,
            } => {
                let mut l = json!({"cpu": cpus.to_string(), "memory": bytes(memory)});
                if pages > 0 {
                    l["hugepages-2Mi"] = bytes(pages).into();
                }
                if giant > 0 {
                    l["hugepages-1Gi"] = bytes(giant).into();
                }
                equal(l, rng)
            }
            Self::Fractional { milli, memory } => equal(
                json!({"cpu": milli_cpu(milli), "memory": bytes(memory)}),
                rng,
            ),
            Self::Burstable { milli, memory } => {
                let requests = json!({"cpu": milli_cpu(milli), "memory": bytes(memory)});
                if rng.chance(30) {
                    json!({ "requests": requests })
                } else {
                    let limits = json!({"cpu": milli_cpu(milli * 2), "memory": bytes(memory * 2)});
                    json!({"requests": requests, "limits": limits})
                }
            }
            Self::None => json!({}),
        }
    }
}

/// Limits, with the same requests written out now and then (the API defaults them anyway).
fn equal(limits: Value, rng: &mut Prng) -> Value {
    if rng.chance(30) {
        json!({"requests": limits.clone(), "limits": limits})
    } else {
        json!({ "limits": limits })
    }
}

fn milli_cpu(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Init,
    Sidecar,
    App,
}

/// A pod being put together.
struct Draft {
    containers: Vec<(String, Role, Res)>,
}

impl Draft {
    /// The API server's aggregate of container requests (cpu milli, memory, pages): apps plus
    /// sidecars, or a regular init container plus the sidecars started before it.
    fn aggregate(&self) -> (u64, u64, u64) {
        let mut side = (0, 0, 0);
        let mut init_max = (0, 0, 0);
        let mut apps = (0, 0, 0);
        for (_, role, res) in &self.containers {
            let (c, m) = res.requests();
            let p = res.pages();
            match role {
                Role::Sidecar => side = (side.0 + c, side.1 + m, side.2 + p),
                Role::Init => {
                    init_max = (
                        init_max.0.max(side.0 + c),
                        init_max.1.max(side.1 + m),
                        init_max.2.max(side.2 + p),
                    )
                }
                Role::App => apps = (apps.0 + c, apps.1 + m, apps.2 + p),
            }
        }
        let long = (apps.0 + side.0, apps.1 + side.1, apps.2 + side.2);
        (
            long.0.max(init_max.0),
            long.1.max(init_max.1),
            long.2.max(init_max.2),
        )
    }
}

pub struct PodGen<'a> {
    pub facts: &'a Facts,
}

impl PodGen<'_> {
    fn cpus(&self, rng: &mut Prng) -> u64 {
        let most = (self.facts.allocatable_cpus / 2).clamp(1, 6);
        if rng.chance(60) {
            rng.range(1, most.min(2))
        } else {
            rng.range(1, most)
        }
    }

    fn memory(&self, rng: &mut Prng) -> u64 {
        let m = *rng.pick(&[64 * MI, 128 * MI, 256 * MI, 512 * MI, GI, 2 * GI, 3 * GI]);
        m.min(self.facts.node_memory * 3 / 2).max(32 * MI)
    }

    fn exclusive(&self, rng: &mut Prng) -> Res {
        let pages = if self.facts.hugepages && rng.chance(20) {
            2 * MI * rng.range(1, 32)
        } else {
            0
        };
        let giant = if self.facts.giant_pages && rng.chance(15) {
            GI
        } else {
            0
        };
        Res::Exclusive {
            cpus: self.cpus(rng),
            memory: self.memory(rng),
            pages,
            giant,
        }
    }

    fn fractional(&self, rng: &mut Prng) -> Res {
        Res::Fractional {
            milli: *rng.pick(&[100, 250, 500, 1500, 2500]),
            memory: self.memory(rng),
        }
    }

    fn burstable(&self, rng: &mut Prng) -> Res {
        Res::Burstable {
            milli: *rng.pick(&[100, 200, 500]),
            memory: *rng.pick(&[64 * MI, 128 * MI]),
        }
    }

    fn shape(rng: &mut Prng, mut res: impl FnMut(&mut Prng, Role) -> Res) -> Draft {
        let mut containers = Vec::new();
        let inits = *rng.pick(&[0usize, 0, 0, 1, 1, 2]);
        let sidecars = *rng.pick(&[0usize, 0, 0, 1, 1, 2]);
        let apps = rng.range(1, 3) as usize;
        // Sidecars and regular init containers interleave in spec order.
        let mut order: Vec<Role> =
            [vec![Role::Init; inits], vec![Role::Sidecar; sidecars]].concat();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let (mut ni, mut ns) = (0, 0);
        for role in order {
            let name = match role {
                Role::Init => {
                    ni += 1;
                    format!("init-{ni}")
                }
                _ => {
                    ns += 1;
                    format!("side-{ns}")
                }
            };
            let r = res(rng, role);
            containers.push((name, role, r));
        }
        for a in 0..apps {
            let r = res(rng, Role::App);
            containers.push((format!("app-{}", a + 1), Role::App, r));
        }
        Draft { containers }
    }

    /// One pod named `name` with `uid`.
    pub fn random_pod(&self, rng: &mut Prng, name: &str, uid: &str, f: &mut Features) -> GenPod {
        let (draft, level) = match rng.below(100) {
            0..=29 => {
                f.tag("pods=classic");
                let d = Self::shape(rng, |rng, _| {
                    if rng.chance(60) {
                        self.exclusive(rng)
                    } else {
                        self.fractional(rng)
                    }
                });
                (d, None)
            }
            30..=39 => {
                f.tag("pods=classic");
                let d = Self::shape(rng, |rng, _| match rng.below(4) {
                    0 => self.burstable(rng),
                    1 => Res::None,
                    _ => self.exclusive(rng),
                });
                (d, None)
            }
            40..=44 => {
                f.tag("pods=classic");
                (Self::shape(rng, |_, _| Res::None), None)
            }
            _ => {
                f.tag("pods=pod-level");
                let d = Self::shape(rng, |rng, _| match rng.below(100) {
                    0..=39 => self.exclusive(rng),
                    40..=54 => self.fractional(rng),
                    55..=89 => Res::None,
                    _ => self.burstable(rng),
                });
                let level = self.pod_level(rng, &d);
                (d, Some(level))
            }
        };
        let invalid = rng.chance(3);
        let mut init = Vec::new();
        let mut apps = Vec::new();
        for (cname, role, res) in &draft.containers {
            let mut c = json!({"name": cname, "image": "busybox"});
            let mut r = res.to_json(rng);
            if invalid && *role == Role::App && apps.is_empty() {
                // Requests above limits: the API server refuses the pod.
                r = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
            }
            if r.as_object().is_some_and(|o| !o.is_empty()) {
                c["resources"] = r;
            }
            match role {
                Role::App => apps.push(c),
                Role::Sidecar => {
                    c["restartPolicy"] = "Always".into();
                    init.push(c);
                }
                Role::Init => init.push(c),
            }
        }
        let mut spec = Map::new();
        if !init.is_empty() {
            spec.insert("initContainers".into(), Value::Array(init));
        }
        spec.insert("containers".into(), Value::Array(apps));
        if let Some(level) = level {
            spec.insert("resources".into(), level);
        }
        let manifest = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": Value::Object(spec),
        });
        let start_order = draft
            .containers
            .iter()
            .filter(|c| c.1 != Role::App)
            .chain(draft.containers.iter().filter(|c| c.1 == Role::App))
            .map(|c| c.0.clone())
            .collect();
        GenPod {
            name: name.to_string(),
            manifest,
            start_order,
        }
    }

    /// `spec.resources` for a pod-level pod: at least the containers' aggregate, a whole number
    /// of CPUs most of the time, with some room for the shared containers (or none).
    fn pod_level(&self, rng: &mut Prng, d: &Draft) -> Value {
        let (cpu, memory, pages) = d.aggregate();
        let extra_cpu = *rng.pick(&[0u64, 0, 1000, 1000, 2000, 500]);
        let mut cpu = (cpu + extra_cpu).div_ceil(1000) * 1000;
        if extra_cpu == 500 {
            cpu += 500;
        }
        let cpu = cpu.max(1000);
        let extra_mem = *rng.pick(&[0u64, 0, 128 * MI, 256 * MI, GI]);
        let memory = (memory + extra_mem).max(64 * MI);
        let mut limits = json!({"cpu": milli_cpu(cpu), "memory": bytes(memory)});
        if pages > 0 || (self.facts.hugepages && rng.chance(10)) {
            limits["hugepages-2Mi"] = bytes(pages + 2 * MI * rng.range(0, 8)).into();
        }
        if rng.chance(4) {
            // Below what the containers ask for: the API server refuses the pod.
            limits["memory"] = bytes(memory / 2).into();
        }
        match rng.below(20) {
            0..=13 => json!({ "limits": limits }),
            14..=18 => json!({"requests": limits.clone(), "limits": limits}),
            _ => json!({ "requests": limits }),
        }
    }
}

//! Shrinking a disagreement to a minimal case: fewer steps, pods and containers, a smaller
//! machine, simpler settings, each change kept only if the answers still disagree. The result is
//! a scenario file both `numa-shim simulate` and `kubelet-oracle FILE` run.

use serde_json::Value;

use super::gen::Case;
use super::machine::{bytes, parse_bytes};

/// Shrinks `case` while `fails` says a candidate still disagrees; `fails` returns the candidate
/// as it was run (possibly repaired) when it does. At most `budget` candidates are tried.
pub fn shrink(case: &Case, budget: usize, fails: &mut dyn FnMut(&Case) -> Option<Case>) -> Case {
    let mut best = case.clone();
    let mut tried = 0;
    loop {
        let mut progressed = false;
        for candidate in candidates(&best) {
            if tried >= budget {
                return best;
            }
            tried += 1;
            if let Some(kept) = fails(&candidate) {
                best = kept;
                progressed = true;
                break;
            }
        }
        if !progressed {
            return best;
        }
    }
}

/// Every one-step simplification of the case, the biggest cuts first.
fn candidates(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    let steps = case.steps();
    // Fewer steps: drop one (an admission takes the steps naming its pod along).
    for i in (0..steps.len()).rev() {
        out.push(case.with_steps(without_step(steps, i)));
    }
    // Fewer containers.
    for (i, step) in steps.iter().enumerate() {
        let Some(pod) = step.get("admit") else {
            continue;
        };
        for list in ["initContainers", "containers"] {
            let n = pod["spec"][list].as_array().map_or(0, Vec::len);
            for c in (0..n).rev() {
                if list == "containers" && n == 1 {
                    continue;
                }
                out.push(case.with_steps(without_container(steps, i, list, c)));
            }
        }
        if pod["spec"].get("resources").is_some() {
            let mut s = steps.to_vec();
            if let Some(spec) = s[i]["admit"]["spec"].as_object_mut() {
                spec.remove("resources");
            }
            out.push(case.with_steps(s));
        }
    }
    // Simpler settings.
    out.extend(simpler_settings(case));
    // A smaller machine.
    let ids: Vec<u32> = case.machine.numa.iter().map(|n| n.id).collect();
    for &id in ids.iter().rev() {
        if let Some(m) = case.machine.without_numa(id) {
            let mut c = case.with_machine(m);
            fit_reservations(&mut c, id);
            out.push(c);
        }
    }
    let mut cores: Vec<u32> = case.machine.cpus.iter().map(|c| c.core).collect();
    cores.dedup();
    for &core in cores.iter().rev().take(16) {
        if let Some(m) = case.machine.without_core(core) {
            out.push(case.with_machine(m));
        }
    }
    out
}

fn pod_of(step: &Value) -> Option<String> {
    if let Some(p) = step.get("admit") {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or("default");
        return Some(format!(
            "{ns}/{}",
            p["metadata"]["name"].as_str().unwrap_or("")
        ));
    }
    let named = step
        .get("start")
        .or_else(|| step.get("remove"))
        .and_then(|s| s.get("pod"))
        .and_then(Value::as_str)?;
    Some(if named.contains('/') {
        named.to_string()
    } else {
        format!("default/{named}")
    })
}

fn without_step(steps: &[Value], i: usize) -> Vec<Value> {
    let admitted = steps[i].get("admit").and(pod_of(&steps[i]));
    steps
        .iter()
        .enumerate()
        .filter(|&(j, s)| j != i && (admitted.is_none() || j < i || pod_of(s) != admitted))
        .map(|(_, s)| s.clone())
        .collect()
}

/// Steps without container `c` of `list` in the pod admitted at step `i`.
fn without_container(steps: &[Value], i: usize, list: &str, c: usize) -> Vec<Value> {
    let mut s = steps.to_vec();
    let pod = pod_of(&s[i]);
    let Some(name) = s[i]["admit"]["spec"][list][c]["name"]
        .as_str()
        .map(str::to_string)
    else {
        return s;
    };
    if let Some(a) = s[i]["admit"]["spec"][list].as_array_mut() {
        a.remove(c);
        if a.is_empty() {
            if let Some(spec) = s[i]["admit"]["spec"].as_object_mut() {
                spec.remove(list);
            }
        }
    }
    s.into_iter()
        .enumerate()
        .filter_map(|(j, mut step)| {
            if j == i || pod_of(&step) != pod {
                return Some(step);
            }
            if let Some(list) = step["start"]["containers"].as_array_mut() {
                list.retain(|n| n.as_str() != Some(&name));
                if list.is_empty() {
                    return None;
                }
            }
            if step["remove"]["container"].as_str() == Some(&name) {
                return None;
            }
            Some(step)
        })
        .collect()
}

fn simpler_settings(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    let k = &case.json["kubelet"];
    let with = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut c = case.clone();
        if let Some(obj) = c.json["kubelet"].as_object_mut() {
            f(obj);
        }
        c
    };
    for field in ["cpuManagerPolicyOptions", "topologyManagerPolicyOptions"] {
        if let Some(opts) = k[field].as_object() {
            for name in opts.keys() {
                out.push(with(&|o| {
                    if let Some(m) = o.get_mut(field).and_then(Value::as_object_mut) {
                        m.remove(name);
                        if m.is_empty() {
                            o.remove(field);
                        }
                    }
                }));
            }
        }
    }
    if k["topologyManagerScope"] == "pod" {
        out.push(with(&|o| {
            o.insert("topologyManagerScope".into(), "container".into());
        }));
    }
    if k["topologyManagerPolicy"] != "none" {
        out.push(with(&|o| {
            o.insert("topologyManagerPolicy".into(), "none".into());
        }));
    }
    if k["memoryManagerPolicy"] == "Static" {
        out.push(with(&|o| {
            o.insert("memoryManagerPolicy".into(), "None".into());
            o.remove("reservedMemory");
        }));
    }
    out
}

/// After NUMA node `gone` left the machine: its `reservedMemory` moves to the first node left,
/// and reserved CPUs it had are dropped from the list.
fn fit_reservations(case: &mut Case, gone: u32) {
    let first = case.machine.numa.first().map_or(0, |n| n.id);
    let cpus: Vec<u32> = case.machine.cpu_ids();
    let k = &mut case.json["kubelet"];
    if let Some(entries) = k["reservedMemory"].as_array_mut() {
        let mut moved = 0;
        entries.retain(|e| {
            if e["numaNode"].as_u64() == Some(u64::from(gone)) {
                moved += parse_bytes(e["limits"]["memory"].as_str().unwrap_or("0"));
                false
            } else {
                true
            }
        });
        if moved > 0 {
            match entries
                .iter_mut()
                .find(|e| e["numaNode"].as_u64() == Some(u64::from(first)))
            {
                Some(e) => {
                    let had = parse_bytes(e["limits"]["memory"].as_str().unwrap_or("0"));
                    e["limits"]["memory"] = bytes(had + moved).into();
                }
                None => entries.push(serde_json::json!({
                    "numaNode": first, "limits": {"memory": bytes(moved)}
                })),
            }
        }
    }
    if let Some(list) = k["reservedSystemCPUs"].as_str().map(str::to_string) {
        let kept: Vec<String> = list
            .split(',')
            .filter(|id| id.parse::<u32>().is_ok_and(|id| cpus.contains(&id)))
            .map(str::to_string)
            .collect();
        k["reservedSystemCPUs"] = if kept.is_empty() {
            cpus.first().map_or(String::new(), u32::to_string)
        } else {
            kept.join(",")
        }
        .into();
    }
}

#[cfg(test)]
mod tests {
    use super::super::gen::Generator;
    use super::*;

    /// A made-up "disagreement" (any case admitting a pod named p2) shrinks to one step.
    #[test]
    fn a_disagreement_shrinks_to_the_steps_that_matter() {
        let g = Generator::new(Vec::new());
        let case = (0..200)
            .map(|i| g.case(9, i))
            .find(|c| {
                c.steps().len() > 3
                    && c.steps()
                        .iter()
                        .any(|s| pod_of(s).as_deref() == Some("default/p2"))
            })
            .expect("a case with p2");
        let has_p2 = |c: &Case| {
            c.steps()
                .iter()
                .any(|s| s.get("admit").is_some() && pod_of(s).as_deref() == Some("default/p2"))
        };
        let small = shrink(&case, 500, &mut |c| has_p2(c).then(|| c.clone()));
        assert!(has_p2(&small));
        assert_eq!(small.steps().len(), 1, "{}", small.json);
        assert_eq!(small.machine.numa.len(), 1, "the machine shrank too");
        let spec = &small.steps()[0]["admit"]["spec"];
        assert_eq!(spec["containers"].as_array().map(Vec::len), Some(1));
        assert!(spec.get("initContainers").is_none());
    }
}

//! Drives every `shared/fixtures/vectors/{T,S,P}*.yaml` scenario directly against [`CpuManager`]
//! (topology counters derived from the CPU map, as `simulate` does). The Topology Manager is
//! stood in for by a one-provider merge: policy `none` → no affinity; otherwise the best hint
//! (preferred first, then fewest NUMA nodes, then lowest mask).

use std::collections::BTreeMap;

use super::fixtures::{fixtures_dir, machine, set};
use crate::placement::config::{
    Config, CpuPolicy, CpuPolicyOptions, ReservedCpus, TopologyPolicy, TopologyScope,
};
use crate::placement::cpu::{ContainerAssignment, CpuManager, CpuState};
use crate::placement::pod::{ContainerRole, ContainerSpec, PodSpec, ResourceList, Resources};
use crate::placement::qos::{self, IsolationLevel};
use crate::placement::{AdmissionError, HintProvider, ResourceHints, TopologyHint};
use crate::quantity::Quantity;

type Quantities = BTreeMap<String, serde_yaml_ng::Value>;

#[derive(serde::Deserialize)]
struct Vector {
    topology: String,
    kubelet: Kubelet,
    #[serde(default, rename = "unavailableCPUs")]
    unavailable: Option<String>,
    pods: Vec<Pod>,
    expect: Expect,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kubelet {
    #[serde(default)]
    cpu_manager_policy_options: BTreeMap<String, String>,
    #[serde(default, rename = "reservedSystemCPUs")]
    reserved: String,
    topology_manager_policy: String,
    topology_manager_scope: String,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
}

#[derive(serde::Deserialize)]
struct Pod {
    metadata: Meta,
    spec: Spec,
}

#[derive(serde::Deserialize)]
struct Meta {
    name: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    #[serde(default)]
    resources: Option<Res>,
    #[serde(default)]
    init_containers: Vec<Ctr>,
    containers: Vec<Ctr>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ctr {
    name: String,
    #[serde(default)]
    resources: Option<Res>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct Res {
    #[serde(default)]
    requests: Quantities,
    #[serde(default)]
    limits: Quantities,
}

#[derive(serde::Deserialize)]
struct Expect {
    pods: Vec<ExpectPod>,
}

#[derive(serde::Deserialize)]
struct ExpectPod {
    name: String,
    admitted: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    containers: Vec<ExpectContainer>,
}

#[derive(serde::Deserialize)]
struct ExpectContainer {
    name: String,
    cpus: String,
    exclusive: bool,
}

fn quantity(v: &serde_yaml_ng::Value) -> Quantity {
    let s = match v {
        serde_yaml_ng::Value::String(s) => s.clone(),
        serde_yaml_ng::Value::Number(n) => n.to_string(),
        other => panic!("quantity {other:?}"),
    };
    Quantity::parse(&s).unwrap()
}

fn list(q: &Quantities) -> ResourceList {
    ResourceList {
        cpu_milli: q.get("cpu").map(|v| quantity(v).milli_value() as u64),
        memory: q.get("memory").map(|v| quantity(v).value() as u64),
        hugepages: BTreeMap::new(),
        extended: BTreeMap::new(),
    }
}

/// API defaulting: a limit without a request sets the request.
fn resources(r: Option<&Res>) -> Resources {
    let Some(r) = r else {
        return Resources::default();
    };
    let limits = list(&r.limits);
    let mut requests = list(&r.requests);
    requests.cpu_milli = requests.cpu_milli.or(limits.cpu_milli);
    requests.memory = requests.memory.or(limits.memory);
    Resources { requests, limits }
}

fn pod_spec(p: &Pod) -> PodSpec {
    let ctr = |c: &Ctr, role| ContainerSpec {
        name: c.name.clone(),
        role,
        resources: resources(c.resources.as_ref()),
    };
    PodSpec {
        uid: p.metadata.name.clone(),
        namespace: "default".into(),
        name: p.metadata.name.clone(),
        resources: p.spec.resources.as_ref().map(|r| resources(Some(r))),
        init_containers: p
            .spec
            .init_containers
            .iter()
            .map(|c| {
                let sidecar = c.restart_policy.as_deref() == Some("Always");
                ctr(
                    c,
                    if sidecar {
                        ContainerRole::Sidecar
                    } else {
                        ContainerRole::Init
                    },
                )
            })
            .collect(),
        containers: p
            .spec
            .containers
            .iter()
            .map(|c| ctr(c, ContainerRole::App))
            .collect(),
    }
}

fn config(k: &Kubelet) -> Config {
    let on = |name: &str| {
        k.cpu_manager_policy_options
            .get(name)
            .is_some_and(|v| v == "true")
    };
    let mut c = Config {
        cpu_policy: CpuPolicy::Static,
        cpu_options: CpuPolicyOptions {
            full_pcpus_only: on("full-pcpus-only"),
            distribute_cpus_across_numa: on("distribute-cpus-across-numa"),
            align_by_socket: on("align-by-socket"),
            distribute_cpus_across_cores: on("distribute-cpus-across-cores"),
            strict_cpu_reservation: on("strict-cpu-reservation"),
            prefer_align_cpus_by_uncore_cache: on("prefer-align-cpus-by-uncorecache"),
        },
        reserved_cpus: ReservedCpus::Explicit(set(&k.reserved)),
        topology_policy: match k.topology_manager_policy.as_str() {
            "none" => TopologyPolicy::None,
            "best-effort" => TopologyPolicy::BestEffort,
            "restricted" => TopologyPolicy::Restricted,
            "single-numa-node" => TopologyPolicy::SingleNumaNode,
            other => panic!("policy {other}"),
        },
        topology_scope: match k.topology_manager_scope.as_str() {
            "pod" => TopologyScope::Pod,
            _ => TopologyScope::Container,
        },
        ..Config::default()
    };
    if let Some(&v) = k.feature_gates.get("PodLevelResources") {
        c.gates.pod_level_resources = v;
    }
    if let Some(&v) = k.feature_gates.get("PodLevelResourceManagers") {
        c.gates.pod_level_resource_managers = v;
    }
    c
}

/// A one-provider Topology Manager merge.
pub(super) fn merge(policy: TopologyPolicy, hints: &ResourceHints) -> TopologyHint {
    let any = TopologyHint {
        affinity: None,
        preferred: true,
    };
    if policy == TopologyPolicy::None {
        return any;
    }
    let Some(list) = hints.get("cpu") else {
        return any;
    };
    let Some(list) = list else { return any };
    list.iter()
        .copied()
        .min_by_key(|h| {
            let m = h
                .affinity
                .map(|m| (m.count(), m.0))
                .unwrap_or((u32::MAX, u64::MAX));
            (!h.preferred, m)
        })
        .unwrap_or(TopologyHint {
            affinity: None,
            preferred: false,
        })
}

pub(super) fn admit(
    cm: &mut CpuManager,
    cfg: &Config,
    pod: &PodSpec,
) -> Result<(), AdmissionError> {
    let check = |h: TopologyHint| {
        let strict = matches!(
            cfg.topology_policy,
            TopologyPolicy::Restricted | TopologyPolicy::SingleNumaNode
        );
        if strict && !h.preferred {
            return Err(AdmissionError::TopologyAffinity);
        }
        Ok(h)
    };
    if cfg.topology_scope == TopologyScope::Pod && cfg.topology_policy != TopologyPolicy::None {
        let hint = check(merge(cfg.topology_policy, &cm.pod_hints(pod)))?;
        if qos::pod_level_managed(pod, &cfg.gates) {
            return cm.allocate_pod(pod, &hint);
        }
        for c in pod.init_containers.iter().chain(&pod.containers) {
            cm.allocate(pod, c, &hint)?;
        }
        return Ok(());
    }
    for c in pod.init_containers.iter().chain(&pod.containers) {
        let hint = check(merge(cfg.topology_policy, &cm.container_hints(pod, c)))?;
        cm.allocate(pod, c, &hint)?;
    }
    Ok(())
}

fn run(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Vector = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let topo_name = v
        .topology
        .trim_start_matches("../topologies/")
        .trim_end_matches(".json");
    let cfg = config(&v.kubelet);
    let mut cm = CpuManager::new(&machine(topo_name), &cfg).unwrap();
    if let Some(u) = &v.unavailable {
        let u = set(u);
        let mut state = CpuState {
            default_cpu_set: cm.shared_pool().difference(&u),
            ..CpuState::default()
        };
        let held = ContainerAssignment {
            cpus: u,
            isolation: IsolationLevel::Container,
        };
        state
            .entries
            .entry("fake-pod".into())
            .or_default()
            .insert("fake".into(), held);
        cm.restore(state).unwrap();
    }
    let results: BTreeMap<String, Result<(), AdmissionError>> = v
        .pods
        .iter()
        .map(|p| {
            let spec = pod_spec(p);
            (spec.uid.clone(), admit(&mut cm, &cfg, &spec))
        })
        .collect();
    for want in &v.expect.pods {
        let got = &results[&want.name];
        assert_eq!(
            got.is_ok(),
            want.admitted,
            "{path:?} pod {}: {got:?}",
            want.name
        );
        if let (Err(e), Some(reason)) = (got, &want.reason) {
            assert_eq!(e.reason(), reason, "{path:?}: {e}");
        }
        for c in &want.containers {
            let got = cm.cpuset_or_default(&want.name, &c.name);
            assert_eq!(got, set(&c.cpus), "{path:?} container {}", c.name);
            let exclusive = matches!(
                cm.container_cpus(&want.name, &c.name),
                Some((_, IsolationLevel::Container))
            );
            assert_eq!(exclusive, c.exclusive, "{path:?} container {}", c.name);
        }
    }
}

#[test]
fn shared_vectors() {
    let dir = fixtures_dir().join("vectors");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".yaml")
            && (name.starts_with('T') || name.starts_with('S') || name.starts_with('P'))
        {
            run(&path);
            count += 1;
        }
    }
    assert!(count >= 36, "only {count} vectors found in {dir:?}");
}

#[test]
fn rejection_messages() {
    let path = fixtures_dir().join("vectors/S12-dual-socket-ht-not-enough-physical-cpus.yaml");
    let v: Vector = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cfg = config(&v.kubelet);
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let err = admit(&mut cm, &cfg, &pod_spec(&v.pods[0])).unwrap_err();
    assert_eq!(err.to_string(), "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 8, requested CPUs = 10, CPUs per core = 2");

    let path = fixtures_dir().join("vectors/P7-pod-level-empty-shared-pool.yaml");
    let v: Vector = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cfg = config(&v.kubelet);
    let mut cm = CpuManager::new(&machine("topoDualSocketHT"), &cfg).unwrap();
    let before = cm.snapshot();
    let err = admit(&mut cm, &cfg, &pod_spec(&v.pods[0])).unwrap_err();
    assert_eq!(err.reason(), "EmptyPodSharedPoolError");
    assert_eq!(err.to_string(), "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers");
    assert_eq!(cm.snapshot(), before);

    let path = fixtures_dir().join("vectors/T1-single-socket-ht-more-than-available.yaml");
    let v: Vector = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cfg = config(&v.kubelet);
    let mut cm = CpuManager::new(&machine("topoSingleSocketHT"), &cfg).unwrap();
    let err = admit(&mut cm, &cfg, &pod_spec(&v.pods[0])).unwrap_err();
    assert_eq!(err.to_string(), "Allocate failed due to not enough cpus available to satisfy request: requested=5, available=4, which is unexpected");
}

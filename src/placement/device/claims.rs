//! DRA claims as one more hint input: the devices a pod's ResourceClaims were allocated (by the
//! scheduler, before the pod reached this node) and the NUMA nodes their ResourceSlices name.
//! The kubelet's Topology Manager ignores DRA devices; numa-shim merges them like the device
//! manager's hints for devices the kubelet already handed out (`generateDeviceTopologyHints`
//! over the held devices): a claim whose devices sit on node 1 asks for node 1.
//!
//! Pure data in, hints out. The shell reads the claims (`knowledge::apiserver::claims`) and hands
//! them over per decision (`Node::set_claims`); docs/devices.md, "DRA claims".

use std::collections::BTreeSet;

use super::hints::generate;
use super::Device;
use crate::placement::{ContainerSpec, NumaMask, PodSpec, ResourceHints, TopologyHint};

/// One ResourceClaim of a pod, as far as NUMA placement goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    /// The ResourceClaim object, `namespace/name` (what refusals name).
    pub name: String,
    /// The containers that use it (`resources.claims` of the container naming the pod's
    /// `spec.resourceClaims` entry). Container scope: only their hints carry the claim.
    pub containers: BTreeSet<String>,
    /// The allocated devices (`<driver>/<pool>/<device>`), each with the NUMA nodes its
    /// ResourceSlice attribute gives (empty: no NUMA attribute; such a device places nothing).
    pub devices: Vec<Device>,
}

impl Claim {
    /// The NUMA nodes of the claim's devices (those that name one).
    pub fn nodes(&self) -> BTreeSet<u32> {
        self.devices
            .iter()
            .flat_map(|d| d.numa_nodes.iter().copied())
            .collect()
    }
}

/// The claims of the pod decided next.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimFacts {
    /// The pod they belong to; facts about another pod are not used.
    pub pod_uid: String,
    pub claims: Vec<Claim>,
}

/// The resource name a claim's hints go under in the merge (never a device plugin resource: those
/// have no spaces).
pub fn resource_name(claim: &Claim) -> String {
    format!("ResourceClaim {}", claim.name)
}

/// Hints for one claim: the combinations of the machine's NUMA nodes that hold all of its devices
/// with a node (the device manager's rule for devices a container already holds); `None` when no
/// device names a node (no preference).
pub fn claim_hints(claim: &Claim, machine_nodes: &[u32]) -> Option<Vec<TopologyHint>> {
    let placed: Vec<Device> = claim
        .devices
        .iter()
        .filter(|d| !d.numa_nodes.is_empty())
        .cloned()
        .collect();
    if placed.is_empty() {
        return None;
    }
    let held: BTreeSet<String> = placed.iter().map(|d| d.id.clone()).collect();
    Some(generate(
        &placed,
        machine_nodes,
        &held,
        &BTreeSet::new(),
        held.len() as u64,
    ))
}

impl ClaimFacts {
    fn for_pod<'a>(&'a self, pod: &PodSpec) -> impl Iterator<Item = &'a Claim> {
        let mine = self.pod_uid == pod.uid;
        self.claims.iter().filter(move |_| mine)
    }

    /// Claim hints for one container (container scope): the claims it uses.
    pub fn container_hints(
        &self,
        pod: &PodSpec,
        c: &ContainerSpec,
        machine_nodes: &[u32],
    ) -> ResourceHints {
        self.for_pod(pod)
            .filter(|claim| claim.containers.contains(&c.name))
            .map(|claim| (resource_name(claim), claim_hints(claim, machine_nodes)))
            .collect()
    }

    /// Claim hints for the whole pod (pod scope): every claim of the pod.
    pub fn pod_hints(&self, pod: &PodSpec, machine_nodes: &[u32]) -> ResourceHints {
        self.for_pod(pod)
            .map(|claim| (resource_name(claim), claim_hints(claim, machine_nodes)))
            .collect()
    }

    /// The claims behind `hints` that place something (a hint list other than "any").
    pub fn placing<'a>(&'a self, hints: &ResourceHints) -> Vec<&'a Claim> {
        self.claims
            .iter()
            .filter(|c| matches!(hints.get(&resource_name(c)), Some(Some(_))))
            .collect()
    }
}

/// The refusal text's part about the claims: `ResourceClaim ns/a (devices on NUMA node 1)`.
pub fn describe(claims: &[&Claim]) -> String {
    claims
        .iter()
        .map(|c| {
            let nodes: Vec<String> = c.nodes().iter().map(u32::to_string).collect();
            let mask = NumaMask::from_ids(c.nodes());
            let word = if mask.count() == 1 { "node" } else { "nodes" };
            format!(
                "ResourceClaim {} (devices on NUMA {word} {})",
                c.name,
                nodes.join(",")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

//! `DeviceManager`: the kubelet's device manager as a hint provider, over [`DeviceFacts`] given
//! per decision and the devices it handed out itself (its `podDevices`).

use std::collections::BTreeMap;

use super::alloc::{devices_to_allocate, Ask, Ids};
use super::hints::{generate, has_topology};
use super::requests::{container_requests, pod_requests};
use super::{Device, DeviceFacts};
use crate::placement::{
    AdmissionError, ContainerRole, ContainerSpec, HintProvider, PodSpec, ResourceHints,
    TopologyHint,
};

/// Resource name → device ids.
pub type ResourceIds = BTreeMap<String, Ids>;

/// Devices held, as the device manager's `podDevices`: pod uid → container → resource → ids.
pub type Ledger = BTreeMap<String, BTreeMap<String, ResourceIds>>;

/// The device manager of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceManager {
    /// The machine's NUMA node ids (cAdvisor's nodes), ascending.
    numa_nodes: Vec<u32>,
    /// What the kubelet said last; `allocated` is about the next pod admitted.
    facts: DeviceFacts,
    /// Devices this node handed out or took over from `facts.allocated`.
    ledger: Ledger,
    /// The kubelet's `devicesToReuse`: kept for one pod, the last one allocated for.
    reuse: Option<(String, ResourceIds)>,
}

impl DeviceManager {
    pub fn new(numa_nodes: Vec<u32>) -> Self {
        Self {
            numa_nodes,
            ..Self::default()
        }
    }

    /// Replaces what the kubelet's device manager is known to hold (before a decision).
    pub fn set_facts(&mut self, facts: DeviceFacts) {
        self.facts = facts;
    }

    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The devices held per pod.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Restores the devices held (from a checkpoint).
    pub fn restore(&mut self, ledger: Ledger) {
        self.ledger = ledger;
        self.reuse = None;
    }

    /// The devices one container holds, resource → ids ascending.
    pub fn container_devices(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> BTreeMap<String, Vec<String>> {
        self.ledger
            .get(pod_uid)
            .and_then(|p| p.get(container))
            .map(|r| {
                r.iter()
                    .filter(|(_, ids)| !ids.is_empty())
                    .map(|(res, ids)| (res.clone(), ids.iter().cloned().collect()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The pod's record, to put back if its admission fails.
    pub(crate) fn pod_record(&self, pod_uid: &str) -> Option<BTreeMap<String, ResourceIds>> {
        self.ledger.get(pod_uid).cloned()
    }

    /// Puts a pod's record back as it was (`None`: it held nothing).
    pub(crate) fn put_back(
        &mut self,
        pod_uid: &str,
        record: Option<BTreeMap<String, ResourceIds>>,
    ) {
        match record {
            Some(r) => {
                self.ledger.insert(pod_uid.to_string(), r);
            }
            None => {
                self.ledger.remove(pod_uid);
            }
        }
        self.reuse = None;
        // What the kubelet gave the refused pod is not about the next pod decided.
        self.facts.allocated.clear();
    }

    /// The admitted pod owns what `facts.allocated` said; those facts are not about the next pod.
    pub(crate) fn admitted(&mut self, pod: &PodSpec) {
        let allocated = std::mem::take(&mut self.facts.allocated);
        for (container, resources) in allocated {
            let entry = self
                .ledger
                .entry(pod.uid.clone())
                .or_default()
                .entry(container)
                .or_default();
            for (res, ids) in resources {
                entry.entry(res).or_default().extend(ids);
            }
        }
    }

    /// The pod is gone (the kubelet frees its devices once it is no longer active).
    pub fn remove_pod(&mut self, pod_uid: &str) {
        self.ledger.remove(pod_uid);
        if self.reuse.as_ref().is_some_and(|(uid, _)| uid == pod_uid) {
            self.reuse = None;
        }
    }

    /// Whether the container asks for a device it does not hold yet (the kubelet then
    /// allocates at container start, `GetDeviceRunContainerOptions`).
    pub fn needs_allocation(&self, pod: &PodSpec, c: &ContainerSpec) -> bool {
        container_requests(c)
            .iter()
            .filter(|(res, &n)| n > 0 && self.registered(res))
            .any(|(res, _)| self.held(pod, &c.name, res).is_empty())
    }

    /// `isDevicePluginResource`: registered by a plugin or already handed out.
    fn registered(&self, res: &str) -> bool {
        self.facts.allocatable.contains_key(res)
            || self.facts.in_use.contains_key(res)
            || self.facts.allocated.values().any(|r| r.contains_key(res))
            || self
                .ledger
                .values()
                .flat_map(|p| p.values())
                .any(|r| r.contains_key(res))
    }

    fn devices(&self, res: &str) -> &[Device] {
        self.facts.allocatable.get(res).map_or(&[], Vec::as_slice)
    }

    fn healthy(&self, res: &str) -> Ids {
        self.devices(res).iter().map(|d| d.id.clone()).collect()
    }

    /// What the container holds: in this node's ledger, or given by the kubelet.
    fn held(&self, pod: &PodSpec, container: &str, res: &str) -> Ids {
        let mut ids: Ids = self
            .ledger
            .get(&pod.uid)
            .and_then(|p| p.get(container))
            .and_then(|r| r.get(res))
            .cloned()
            .unwrap_or_default();
        if let Some(given) = self.facts.allocated.get(container).and_then(|r| r.get(res)) {
            ids.extend(given.iter().cloned());
        }
        ids
    }

    /// `getAvailableDevices`: healthy devices nobody holds (this pod's containers included).
    fn available(&self, res: &str) -> Ids {
        let mut ids = self.healthy(res);
        if let Some(used) = self.facts.in_use.get(res) {
            ids.retain(|id| !used.contains(id));
        }
        for r in self.ledger.values().flat_map(|p| p.values()) {
            if let Some(used) = r.get(res) {
                ids.retain(|id| !used.contains(id));
            }
        }
        for r in self.facts.allocated.values() {
            if let Some(used) = r.get(res) {
                ids.retain(|id| !used.contains(id));
            }
        }
        ids
    }

    fn reusable(&self, pod_uid: &str, res: &str) -> Ids {
        match &self.reuse {
            Some((uid, map)) if uid == pod_uid => map.get(res).cloned().unwrap_or_default(),
            _ => Ids::new(),
        }
    }

    fn hints_for(
        &self,
        res: &str,
        request: u64,
        held: &Ids,
        reusable: &Ids,
    ) -> Option<Vec<TopologyHint>> {
        let devices = self.devices(res);
        if !has_topology(devices) {
            return None;
        }
        if !held.is_empty() {
            if held.len() as u64 != request {
                return Some(Vec::new());
            }
            return Some(generate(
                devices,
                &self.numa_nodes,
                held,
                &Ids::new(),
                request,
            ));
        }
        let available = self.available(res);
        if ((available.len() + reusable.len()) as u64) < request {
            return Some(Vec::new());
        }
        Some(generate(
            devices,
            &self.numa_nodes,
            &available,
            reusable,
            request,
        ))
    }

    /// `allocateContainerResources`: each registered resource the container asks for.
    fn allocate_container(
        &mut self,
        pod: &PodSpec,
        c: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        let reusable = match &self.reuse {
            Some((uid, map)) if *uid == pod.uid => map.clone(),
            _ => ResourceIds::new(),
        };
        for (res, n) in container_requests(c) {
            if !self.registered(&res) {
                continue;
            }
            let held = self.held(pod, &c.name, &res);
            let healthy = self.healthy(&res);
            let mut available = self.available(&res);
            available.retain(|id| !held.contains(id));
            let empty = Ids::new();
            let ask = Ask {
                resource: &res,
                required: n,
                held: &held,
                reusable: reusable.get(&res).unwrap_or(&empty),
                registered: self.facts.allocatable.contains_key(&res),
                healthy: &healthy,
                available: &available,
                devices: self.devices(&res),
                hint,
            };
            let new = devices_to_allocate(&ask).map_err(AdmissionError::Unexpected)?;
            if new.is_empty() && held.is_empty() {
                continue;
            }
            let entry = self
                .ledger
                .entry(pod.uid.clone())
                .or_default()
                .entry(c.name.clone())
                .or_default()
                .entry(res)
                .or_default();
            entry.extend(held);
            entry.extend(new);
        }
        Ok(())
    }
}

/// The most NUMA nodes a resource's devices may sit on for its hints to be generated: the
/// kubelet's device manager enumerates every subset of those nodes (2^N), and numa-shim does
/// the same; beyond this a pod that asks for the resource is refused, never left to hang
/// (docs/devices.md).
pub const MAX_DEVICE_NODES: usize = 16;

impl DeviceManager {
    /// `Exhausted` when a resource the pod asks for has devices on more than
    /// [`MAX_DEVICE_NODES`] NUMA nodes.
    fn enumerable<'a>(
        &self,
        resources: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), crate::placement::topology_manager::Exhausted> {
        for res in resources {
            let nodes: std::collections::BTreeSet<u32> = self
                .devices(res)
                .iter()
                .flat_map(|d| d.numa_nodes.iter().copied())
                .collect();
            if nodes.len() > MAX_DEVICE_NODES {
                return Err(crate::placement::topology_manager::Exhausted);
            }
        }
        Ok(())
    }
}

impl HintProvider for DeviceManager {
    fn container_hint_sets(
        &self,
        pod: &PodSpec,
        c: &ContainerSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        let requests = container_requests(c);
        self.enumerable(requests.keys())?;
        Ok(crate::placement::provider::spelled_out(
            self.container_hints(pod, c),
        ))
    }

    fn pod_hint_sets(
        &self,
        pod: &PodSpec,
    ) -> Result<crate::placement::HintSets, crate::placement::topology_manager::Exhausted> {
        let requests = pod_requests(pod);
        self.enumerable(requests.keys())?;
        Ok(crate::placement::provider::spelled_out(self.pod_hints(pod)))
    }

    /// `GetTopologyHints`.
    fn container_hints(&self, pod: &PodSpec, c: &ContainerSpec) -> ResourceHints {
        let mut out = ResourceHints::new();
        for (res, n) in container_requests(c) {
            if !self.registered(&res) {
                continue;
            }
            let held = self.held(pod, &c.name, &res);
            let reusable = self.reusable(&pod.uid, &res);
            let hints = self.hints_for(&res, n, &held, &reusable);
            out.insert(res, hints);
        }
        out
    }

    /// `GetPodTopologyHints`.
    fn pod_hints(&self, pod: &PodSpec) -> ResourceHints {
        let mut out = ResourceHints::new();
        for (res, n) in pod_requests(pod) {
            if !self.registered(&res) {
                continue;
            }
            let held: Ids = pod
                .init_containers
                .iter()
                .chain(&pod.containers)
                .flat_map(|c| self.held(pod, &c.name, &res))
                .collect();
            let hints = self.hints_for(&res, n, &held, &Ids::new());
            out.insert(res, hints);
        }
        out
    }

    /// `Allocate`: the container's devices, then the init containers' bookkeeping of devices the
    /// next containers may reuse.
    fn allocate(
        &mut self,
        pod: &PodSpec,
        c: &ContainerSpec,
        hint: &TopologyHint,
    ) -> Result<(), AdmissionError> {
        if self.reuse.as_ref().is_none_or(|(uid, _)| *uid != pod.uid) {
            self.reuse = Some((pod.uid.clone(), ResourceIds::new()));
        }
        self.allocate_container(pod, c, hint)?;
        let own = self
            .ledger
            .get(&pod.uid)
            .and_then(|p| p.get(&c.name))
            .cloned()
            .unwrap_or_default();
        if let Some((_, reuse)) = self.reuse.as_mut() {
            for (res, ids) in own {
                let set = reuse.entry(res).or_default();
                if c.role == ContainerRole::Init {
                    set.extend(ids);
                } else {
                    set.retain(|id| !ids.contains(id));
                }
            }
        }
        Ok(())
    }

    /// `AllocatePod` does nothing: the kubelet allocates a pod-level pod's devices at each
    /// container's start.
    fn allocate_pod(&mut self, _pod: &PodSpec, _hint: &TopologyHint) -> Result<(), AdmissionError> {
        Ok(())
    }

    /// Devices stay with the pod until it is gone.
    fn remove_container(&mut self, _pod_uid: &str, _container: &str) {}
}

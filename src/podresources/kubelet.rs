//! The kubelet's own PodResources socket, asked for what numa-shim does not know: devices and
//! dynamic resources. numa-shim stays authoritative for CPUs and memory; only those two fields
//! are taken from the kubelet. When the kubelet does not answer, answers go out without them and
//! the failure is logged at most once per [`WARN_EVERY`].
//!
//! The same socket gives the decision its device facts ([`KubeletSource::device_facts`]): when
//! the kubelet does not answer, the pod is decided without them (as before devices were read),
//! with its own warning, also at most once per [`WARN_EVERY`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tracing::{info, warn};

use super::devices::{allocatable_devices, device_facts, overlay_pod, overlay_topology};
use crate::placement::device::DeviceFacts;
use crate::proto::podresources::v1 as pr;
use crate::transport::limits::MAX_MESSAGE;
use crate::transport::unix_channel;
use pr::pod_resources_lister_client::PodResourcesListerClient;

/// The shortest time between two warnings about an unreachable kubelet.
pub const WARN_EVERY: Duration = Duration::from_secs(300);

/// A lazily connected client to the kubelet's PodResources socket.
#[derive(Debug)]
pub struct KubeletSource {
    path: PathBuf,
    client: PodResourcesListerClient<Channel>,
    timeout: Duration,
    /// When the last warning was logged; `None` while the kubelet answers.
    warned: Mutex<Option<Instant>>,
    /// The same for the device facts of decisions.
    facts_warned: Mutex<Option<Instant>>,
    /// Healthy allocatable devices per resource as last seen (`None`: never seen), so that a
    /// change — a device plugin gone, its devices unhealthy — is logged once when seen.
    inventory: Mutex<Option<BTreeMap<String, usize>>>,
    /// The true NUMA nodes of devices numa-shim's device plugin front hides from the kubelet,
    /// put back on every answer read here (`None`: no front).
    fronted: Option<std::sync::Arc<crate::lifecycle::devices::FrontedTopology>>,
}

impl KubeletSource {
    pub fn new(path: &Path, timeout: Duration) -> Self {
        let client = PodResourcesListerClient::new(unix_channel(path))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Self {
            path: path.to_path_buf(),
            client,
            timeout,
            warned: Mutex::new(None),
            facts_warned: Mutex::new(None),
            inventory: Mutex::new(None),
            fronted: None,
        }
    }

    /// Puts the front's true device topology back on the kubelet's answers.
    pub fn with_fronted(
        mut self,
        fronted: std::sync::Arc<crate::lifecycle::devices::FrontedTopology>,
    ) -> Self {
        self.fronted = Some(fronted);
        self
    }

    fn overlay_list(&self, list: &mut pr::ListPodResourcesResponse) {
        if let Some(t) = &self.fronted {
            for pod in &mut list.pod_resources {
                overlay_pod(pod, t);
            }
        }
    }

    fn overlay_allocatable(&self, a: &mut pr::AllocatableResourcesResponse) {
        if let Some(t) = &self.fronted {
            overlay_topology(&mut a.devices, t);
        }
    }

    /// The kubelet's `List`, or `None` if it did not answer.
    pub async fn list(&self) -> Option<pr::ListPodResourcesResponse> {
        let mut client = self.client.clone();
        let call = client.list(pr::ListPodResourcesRequest {});
        let mut list = self.outcome("List", tokio::time::timeout(self.timeout, call).await);
        if let Some(l) = list.as_mut() {
            self.overlay_list(l);
        }
        list
    }

    /// The kubelet's `Get` for one pod, or `None` (unknown there, or no answer).
    pub async fn get(&self, namespace: &str, name: &str) -> Option<pr::PodResources> {
        let mut client = self.client.clone();
        let call = client.get(pr::GetPodResourcesRequest {
            pod_name: name.to_string(),
            pod_namespace: namespace.to_string(),
        });
        let result = tokio::time::timeout(self.timeout, call).await;
        // An unknown pod is an answer, not an unreachable kubelet.
        if let Ok(Err(status)) = &result {
            if status.message().contains("not found") {
                self.reachable();
                return None;
            }
        }
        let mut pod = self
            .outcome("Get", result)
            .and_then(|r: pr::GetPodResourcesResponse| r.pod_resources);
        if let (Some(p), Some(t)) = (pod.as_mut(), &self.fronted) {
            overlay_pod(p, t);
        }
        pod
    }

    /// The kubelet's `GetAllocatableResources`, or `None`.
    pub async fn allocatable(&self) -> Option<pr::AllocatableResourcesResponse> {
        let mut client = self.client.clone();
        let call = client.get_allocatable_resources(pr::AllocatableResourcesRequest {});
        let mut answer = self.outcome(
            "GetAllocatableResources",
            tokio::time::timeout(self.timeout, call).await,
        );
        if let Some(a) = answer.as_mut() {
            self.overlay_allocatable(a);
        }
        if let Some(a) = &answer {
            self.seen_inventory(&a.devices);
        }
        answer
    }

    /// Logs how the kubelet's healthy allocatable devices changed since last seen: info for
    /// devices that appear or change in number, a warning for a resource whose devices are all
    /// gone (its device plugin stopped, or reports them unhealthy: the kubelet keeps pods that
    /// hold them and refuses new pods asking for them).
    fn seen_inventory(&self, devices: &[pr::ContainerDevices]) {
        let now: BTreeMap<String, usize> = allocatable_devices(devices)
            .into_iter()
            .map(|(resource, d)| (resource, d.len()))
            .collect();
        let mut inventory = self.inventory.lock().unwrap_or_else(|e| e.into_inner());
        let before = inventory.replace(now.clone()).unwrap_or_default();
        for (resource, &count) in &now {
            let was = before.get(resource).copied().unwrap_or(0);
            if count != was {
                info!(socket = %self.path.display(), resource, devices = count, was, "kubelet allocatable devices changed");
            }
        }
        for (resource, &was) in &before {
            if was > 0 && !now.contains_key(resource) {
                warn!(socket = %self.path.display(), resource, was, "kubelet lists no allocatable devices of this resource any more: its device plugin stopped or reports them unhealthy; pods holding them keep them, new pods asking for them are refused by the kubelet");
            }
        }
    }

    /// The device manager's facts for pod `namespace`/`name`: the kubelet's
    /// `GetAllocatableResources` and `List`, asked together ([`super::devices::device_facts`]).
    /// `None` when its socket is not there, it answers an error or not within the timeout: the
    /// caller decides without device facts, as numa-shim did before it read devices (the
    /// documented fallback, docs/devices.md); a warning says so at most once per
    /// [`WARN_EVERY`], and an info line when the kubelet answers again. Never panics.
    pub async fn device_facts(&self, namespace: &str, name: &str) -> Option<DeviceFacts> {
        let (mut a, mut l) = (self.client.clone(), self.client.clone());
        let (allocatable, list) = tokio::join!(
            tokio::time::timeout(
                self.timeout,
                a.get_allocatable_resources(pr::AllocatableResourcesRequest {})
            ),
            tokio::time::timeout(self.timeout, l.list(pr::ListPodResourcesRequest {})),
        );
        let answers = self
            .answer("GetAllocatableResources", allocatable)
            .and_then(|a| Ok((a, self.answer("List", list)?)));
        let mut warned = self.facts_warned.lock().unwrap_or_else(|e| e.into_inner());
        match answers {
            Ok((mut allocatable, mut list)) => {
                self.overlay_allocatable(&mut allocatable);
                self.overlay_list(&mut list);
                self.seen_inventory(&allocatable.devices);
                if warned.take().is_some() {
                    info!(socket = %self.path.display(), "kubelet pod-resources answering again; device facts back in decisions");
                }
                Some(device_facts(&allocatable, &list, namespace, name))
            }
            Err((method, reason)) => {
                let now = Instant::now();
                if warned.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
                    warn!(socket = %self.path.display(), method, reason, pod = %format!("{namespace}/{name}"), "kubelet pod-resources not answering; deciding without device facts (CPUs and memory placed as without devices)");
                    *warned = Some(now);
                }
                None
            }
        }
    }

    /// A call's answer, or the method and why there is none.
    fn answer<T>(
        &self,
        method: &'static str,
        result: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
    ) -> Result<T, (&'static str, String)> {
        match result {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err((method, format!("{:?}: {}", status.code(), status.message()))),
            Err(_) => Err((method, format!("no answer within {:?}", self.timeout))),
        }
    }

    fn outcome<T>(
        &self,
        method: &'static str,
        result: Result<Result<tonic::Response<T>, tonic::Status>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        match self.answer(method, result) {
            Ok(answer) => {
                self.reachable();
                Some(answer)
            }
            Err((method, reason)) => {
                self.unreachable(method, &reason);
                None
            }
        }
    }

    fn reachable(&self) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.take().is_some() {
            info!(socket = %self.path.display(), "kubelet pod-resources answering again");
        }
    }

    fn unreachable(&self, method: &'static str, reason: &str) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if warned.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
            warn!(socket = %self.path.display(), method, reason, "kubelet pod-resources not answering; serving without devices and dynamic resources");
            *warned = Some(now);
        }
    }
}

/// Devices and dynamic resources of one kubelet pod, by container name.
type Extras<'a> = HashMap<&'a str, &'a pr::ContainerResources>;

/// Copies the kubelet's devices and dynamic resources into `ours`, container by container (same
/// name). Everything else in `ours` is kept.
pub fn merge_pod(ours: &mut pr::PodResources, theirs: &pr::PodResources) {
    let extras: Extras<'_> = theirs
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    merge_containers(ours, &extras);
}

fn merge_containers(ours: &mut pr::PodResources, extras: &Extras<'_>) {
    for c in &mut ours.containers {
        if let Some(k) = extras.get(c.name.as_str()) {
            c.devices.clone_from(&k.devices);
            c.dynamic_resources.clone_from(&k.dynamic_resources);
        }
    }
}

/// Merges a kubelet `List` into numa-shim's, pod by pod (namespace and name).
pub fn merge_list(ours: &mut pr::ListPodResourcesResponse, theirs: &pr::ListPodResourcesResponse) {
    let by_pod: HashMap<(&str, &str), &pr::PodResources> = theirs
        .pod_resources
        .iter()
        .filter(|p| p.containers.iter().any(has_extras))
        .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
        .collect();
    if by_pod.is_empty() {
        return;
    }
    for pod in &mut ours.pod_resources {
        if let Some(k) = by_pod.get(&(pod.namespace.as_str(), pod.name.as_str())) {
            merge_pod(pod, k);
        }
    }
}

/// Whether a kubelet `List` carries anything [`merge_list`] would copy.
pub(crate) fn list_has_extras(theirs: &pr::ListPodResourcesResponse) -> bool {
    theirs
        .pod_resources
        .iter()
        .any(|p| p.containers.iter().any(has_extras))
}

fn has_extras(c: &pr::ContainerResources) -> bool {
    !c.devices.is_empty() || !c.dynamic_resources.is_empty()
}

/// Takes the kubelet's allocatable devices; CPUs and memory stay numa-shim's.
pub fn merge_allocatable(
    ours: &mut pr::AllocatableResourcesResponse,
    theirs: &pr::AllocatableResourcesResponse,
) {
    ours.devices.clone_from(&theirs.devices);
}

/// Decisions read the kubelet's devices here (`lifecycle::DeviceSource`); a kubelet that does
/// not answer was logged by [`KubeletSource::device_facts`] already.
impl crate::lifecycle::DeviceSource for KubeletSource {
    fn facts<'a>(
        &'a self,
        pod: &'a crate::placement::PodSpec,
    ) -> crate::lifecycle::DeviceFuture<'a> {
        Box::pin(async move {
            self.device_facts(&pod.namespace, &pod.name)
                .await
                .ok_or_else(|| {
                    crate::lifecycle::DeviceSourceError(format!(
                        "kubelet pod-resources at {} did not answer",
                        self.path.display()
                    ))
                })
        })
    }
}

//! Where a decision learns the pod's DRA claims and their devices' NUMA nodes: a
//! [`ClaimSource`], asked before the decision and outside every lock (the real one,
//! [`ClaimReader`], reads the API server: pod → claim status → allocated device → ResourceSlice
//! attribute). A source that fails leaves the decision without claim hints, and says so in the
//! log; a device without a NUMA attribute places nothing, also logged (docs/devices.md, "DRA
//! claims").

use std::future::Future;
use std::pin::Pin;

use crate::knowledge::apiserver::claims::ClaimReader;
use crate::placement::device::claims::{Claim, ClaimFacts};
use crate::placement::PodSpec;

/// Why a pod's claims could not be read (API server down, 403, a timeout).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClaimSourceError(pub String);

/// The future a [`ClaimSource`] answers with.
pub type ClaimFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Claim>, ClaimSourceError>> + Send + 'a>>;

/// The DRA claims of one pod, with the NUMA nodes of their allocated devices.
pub trait ClaimSource: Send + Sync + std::fmt::Debug + 'static {
    fn claims<'a>(&'a self, pod: &'a PodSpec) -> ClaimFuture<'a>;
}

impl ClaimSource for ClaimReader {
    fn claims<'a>(&'a self, pod: &'a PodSpec) -> ClaimFuture<'a> {
        Box::pin(async move {
            self.read(&pod.namespace, &pod.name)
                .await
                .map_err(|e| ClaimSourceError(format!("{} ({})", e, self.server())))
        })
    }
}

/// Asks `source` for the pod's claims: the facts for the decision, logged. A failure gives no
/// claims (a warning naming the pod and the reason); a device without a NUMA node a warning
/// naming the claim and the device.
pub async fn read(source: &dyn ClaimSource, pod: &PodSpec) -> ClaimFacts {
    let claims = match source.claims(pod).await {
        Ok(claims) => claims,
        Err(err) => {
            tracing::warn!(pod = %pod.uid, namespace = %pod.namespace, name = %pod.name, error = %err, "the pod's DRA claims could not be read; deciding without their devices' NUMA nodes");
            Vec::new()
        }
    };
    for claim in &claims {
        for device in claim.devices.iter().filter(|d| d.numa_nodes.is_empty()) {
            tracing::warn!(pod = %pod.uid, claim = %claim.name, device = %device.id, "DRA device without a NUMA node attribute (resource.kubernetes.io/numaNode or draNumaAttributes); it does not place the pod");
        }
        if !claim.devices.is_empty() {
            tracing::debug!(pod = %pod.uid, claim = %claim.name, nodes = ?claim.nodes(), "DRA claim read");
        }
    }
    ClaimFacts {
        pod_uid: pod.uid.clone(),
        claims,
    }
}

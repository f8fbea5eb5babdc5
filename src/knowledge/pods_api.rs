//! The kubelet Pods API source: keeps a `WatchPods` stream open on the kubelet's socket and feeds
//! every pod it reports into the `PodCache`. The socket may not exist yet when numa-shim starts
//! (the kubelet makes it when it starts) or go away (the kubelet stops): the watcher looks for it
//! every [`POLL`], connects as soon as it is there, and keeps the cache's link state (`Absent`,
//! `Connecting`, `Live`) so RunPodSandbox waits for a pod only while the source can deliver it.
//! Each link change is logged once. Pods arrive as core/v1 protobuf bytes; only the fields
//! placement needs are read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use serde_json::{json, Map, Value};
use tracing::{debug, info, warn};

use super::{Link, PodCache};
use crate::k8s::pod::Pod;
use crate::placement::PodSpec;
use crate::proto::podsapi::core_v1;
use crate::proto::podsapi::v1alpha1::{pods_client::PodsClient, EventType, WatchPodsRequest};
use crate::transport::limits::MAX_PODS_LIST;
use crate::transport::unix_channel;

/// The kubelet's Pods API socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pods-api/pods-api.sock";

/// Why a pod from the Pods API could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PodsApiError {
    #[error("pod bytes do not decode as core/v1 Pod: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("pod {uid}: {reason}")]
    Spec { uid: String, reason: String },
}

/// Decodes `v1.Pod#Marshal()` bytes into the decision core's pod (with API defaulting).
pub fn decode_pod(bytes: &[u8]) -> Result<PodSpec, PodsApiError> {
    let pod = core_v1::Pod::decode(bytes)?;
    let uid = pod
        .metadata
        .as_ref()
        .and_then(|m| m.uid.clone())
        .unwrap_or_default();
    let spec_err = |reason: String| PodsApiError::Spec {
        uid: uid.clone(),
        reason,
    };
    let manifest: Pod =
        serde_json::from_value(manifest(&pod)).map_err(|e| spec_err(e.to_string()))?;
    manifest.to_pod_spec().map_err(|e| spec_err(e.to_string()))
}

/// The pod's creation time and whether it finished, from the same bytes.
pub fn pod_meta(bytes: &[u8]) -> super::PodMeta {
    let Ok(pod) = core_v1::Pod::decode(bytes) else {
        return super::PodMeta::default();
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    super::PodMeta {
        created: pod
            .metadata
            .as_ref()
            .and_then(|m| m.creation_timestamp.as_ref())
            .and_then(|t| t.seconds),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
    }
}

/// The pod as the JSON a manifest would hold, so manifests and the Pods API share one parser.
fn manifest(pod: &core_v1::Pod) -> Value {
    let meta = pod.metadata.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut spec_json = Map::new();
    spec_json.insert(
        "containers".into(),
        Value::Array(spec.containers.iter().map(container).collect()),
    );
    spec_json.insert(
        "initContainers".into(),
        Value::Array(spec.init_containers.iter().map(container).collect()),
    );
    if let Some(resources) = &spec.resources {
        spec_json.insert("resources".into(), requirements(resources));
    }
    json!({
        "metadata": {"name": meta.name.unwrap_or_default(), "namespace": meta.namespace.unwrap_or_default(), "uid": meta.uid.unwrap_or_default()},
        "spec": spec_json,
    })
}

fn container(c: &core_v1::Container) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(c.name.clone().unwrap_or_default()));
    if let Some(policy) = &c.restart_policy {
        out.insert("restartPolicy".into(), json!(policy));
    }
    if let Some(resources) = &c.resources {
        out.insert("resources".into(), requirements(resources));
    }
    Value::Object(out)
}

fn requirements(r: &core_v1::ResourceRequirements) -> Value {
    let list = |m: &std::collections::HashMap<String, core_v1::Quantity>| -> Value {
        m.iter()
            .map(|(k, q)| (k.clone(), json!(q.string.clone().unwrap_or_default())))
            .collect::<Map<_, _>>()
            .into()
    };
    json!({"requests": list(&r.requests), "limits": list(&r.limits)})
}

/// How often the watcher looks for a socket that is not there.
pub const POLL: Duration = Duration::from_millis(250);

/// Watches the Pods API forever (until the task is dropped), filling `cache`.
pub async fn watch(socket: PathBuf, cache: Arc<PodCache>) {
    let mut backoff = POLL;
    let mut ever_live = false;
    loop {
        if !socket.exists() {
            if cache.set_link(Link::Absent) != Link::Absent {
                if ever_live {
                    warn!(socket = %socket.display(), "pods api socket gone (kubelet stopped?): pod specs are inferred from CRI until it is back");
                } else {
                    info!(socket = %socket.display(), "pods api socket absent: pod specs are inferred from CRI until it appears");
                }
            }
            backoff = POLL;
            tokio::time::sleep(POLL).await;
            continue;
        }
        if cache.link() == Link::Absent {
            cache.set_link(Link::Connecting);
        }
        let result = watch_once(&socket, &cache).await;
        let was_live = cache.set_link(Link::Connecting) == Link::Live;
        ever_live |= was_live;
        match result {
            Ok(()) => info!(socket = %socket.display(), "pods api stream ended; reconnecting"),
            Err(status) if was_live => {
                warn!(socket = %socket.display(), code = ?status.code(), message = status.message(), "pods api lost; reconnecting (pods it delivered stay known)")
            }
            Err(status) => {
                debug!(socket = %socket.display(), code = ?status.code(), message = status.message(), "pods api not answering yet")
            }
        }
        if was_live {
            backoff = POLL;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// The kubelet's pods as its pod manager holds them now (`ListPods`), with their meta: also
/// the pod it is admitting, which the watch stream delivers only once its status is set
/// (after admission). Pods that do not decode are left out (logged).
pub async fn list_pods(
    socket: &Path,
    timeout: Duration,
) -> Result<Vec<(PodSpec, super::PodMeta)>, tonic::Status> {
    let mut client = PodsClient::new(unix_channel(socket)).max_decoding_message_size(MAX_PODS_LIST);
    let call = client.list_pods(crate::proto::podsapi::v1alpha1::ListPodsRequest {});
    let response = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded(format!("ListPods took over {timeout:?}")))??
        .into_inner();
    let mut out = Vec::with_capacity(response.pods.len());
    for bytes in &response.pods {
        match decode_pod(bytes) {
            Ok(spec) => out.push((spec, pod_meta(bytes))),
            Err(err) => debug!(error = %err, "pod from the pods api's ListPods ignored"),
        }
    }
    Ok(out)
}

async fn watch_once(socket: &Path, cache: &PodCache) -> Result<(), tonic::Status> {
    let mut client = PodsClient::new(unix_channel(socket)).max_decoding_message_size(MAX_PODS_LIST);
    let mut stream = client.watch_pods(WatchPodsRequest {}).await?.into_inner();
    cache.begin_sync();
    if cache.set_link(Link::Live) != Link::Live {
        info!(socket = %socket.display(), "pods api connected: pod specs from the kubelet");
    }
    while let Some(event) = stream.message().await? {
        match EventType::try_from(event.r#type).unwrap_or(EventType::Unspecified) {
            EventType::Added | EventType::Modified => match decode_pod(&event.pod) {
                Ok(spec) => cache.insert_with(spec, pod_meta(&event.pod)),
                Err(err) => warn!(error = %err, "pod from the pods api ignored"),
            },
            EventType::Deleted => {
                if let Ok(pod) = core_v1::Pod::decode(event.pod.as_slice()) {
                    if let Some(uid) = pod.metadata.and_then(|m| m.uid) {
                        cache.remove(&uid);
                    }
                }
            }
            EventType::InitialSyncComplete => {
                let gone = cache.end_sync();
                info!(pods = cache.len(), gone, "pods api synced");
            }
            EventType::Unspecified => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! The API objects a refusal report writes, built from plain inputs (the clock is a parameter):
//! the core/v1 Event the kubelet's recorder would create for its own refusal, the pod status
//! patch of the kubelet's `rejectPod` (phase Failed, its reason, "Pod was rejected: " + message),
//! and the checks on the pod as the API server has it that decide what may be written. Pure: no
//! I/O, no clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{json, Value};

/// The annotation the kubelet puts on the mirror pod of a static pod (value: the static pod's
/// UID, which is the UID the CRI calls carry).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The annotation the status patch sets on a refused pod (value: the kubelet's reason). A
/// status-only change reaches the kubelet as a "reconcile", which its status manager answers by
/// writing its own `Pending` back within 10 s, before the pod worker's next retry reads the
/// phase; an annotation change makes it an "update", handed to the pod worker at once, which
/// sees the terminal phase and tears the pod down (docs/refusals.md).
pub(crate) const REFUSED_ANNOTATION: &str = "numa-shim.io/refused";

/// What numa-shim writes as `source.component` / `reportingComponent`.
pub(super) const COMPONENT: &str = "numa-shim";

/// The pod as the API server has it: the parts the checks read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ApiPod {
    pub metadata: Metadata,
    pub spec: Spec,
    pub status: Status,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    pub uid: String,
    pub annotations: std::collections::BTreeMap<String, String>,
    pub deletion_timestamp: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Spec {
    pub node_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    pub phase: String,
    pub container_statuses: Vec<ContainerStatus>,
    pub init_container_statuses: Vec<ContainerStatus>,
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub state: Value,
}

/// Which API object a refused CRI pod is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The pod itself (same UID).
    Pod,
    /// The mirror pod of a static pod; its own UID (Events name it, status is the kubelet's).
    Mirror(String),
    /// Another pod with the same name (the refused one is gone): nothing is written.
    Other,
}

impl ApiPod {
    /// How this API pod relates to the CRI pod `uid`.
    pub fn target(&self, uid: &str) -> Target {
        if self.metadata.uid == uid {
            Target::Pod
        } else if self
            .metadata
            .annotations
            .get(MIRROR_ANNOTATION)
            .map(String::as_str)
            == Some(uid)
        {
            Target::Mirror(self.metadata.uid.clone())
        } else {
            Target::Other
        }
    }

    /// Why numa-shim must not end this pod Failed, or `None` when it may: the pod is bound to
    /// `node`, not being deleted, Pending, and none of its containers ever got a container ID
    /// or left the waiting state (so nothing of it runs or ran).
    pub fn must_not_end(&self, node: &str) -> Option<String> {
        if self.spec.node_name != node {
            return Some(format!(
                "bound to node {:?}, not {node:?}",
                self.spec.node_name
            ));
        }
        if self.metadata.deletion_timestamp.is_some() {
            return Some("being deleted".into());
        }
        if !matches!(self.status.phase.as_str(), "" | "Pending") {
            return Some(format!("phase is {}", self.status.phase));
        }
        let statuses = self
            .status
            .init_container_statuses
            .iter()
            .chain(&self.status.container_statuses)
            .chain(&self.status.ephemeral_container_statuses);
        for c in statuses {
            let started = ["running", "terminated"]
                .iter()
                .any(|s| c.state.get(s).is_some());
            if !c.container_id.is_empty() || started {
                return Some(format!("container {} was created", c.name));
            }
        }
        None
    }
}

/// What the kubelet's `rejectPod` writes as the status message.
pub(super) fn rejected_message(message: &str) -> String {
    format!("Pod was rejected: {message}")
}

/// The status patch (strategic merge, with the UID precondition the kubelet's status manager
/// sends too): phase Failed with the kubelet's reason and message, and [`REFUSED_ANNOTATION`]
/// so that the kubelet acts on it.
pub(super) fn status_patch(uid: &str, reason: &str, message: &str) -> Value {
    json!({
        "metadata": {"uid": uid, "annotations": {REFUSED_ANNOTATION: reason}},
        "status": {"phase": "Failed", "reason": reason, "message": rejected_message(message)},
    })
}

/// A core/v1 Event about pod `namespace/name` (UID `uid`), as client-go's recorder builds it:
/// named `<pod>.<nanoseconds hex>`, type Warning, first and last timestamp `now`, count 1.
pub(super) struct EventFields<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub node: &'a str,
}

pub(super) fn event(fields: &EventFields<'_>, now: SystemTime) -> (String, Value) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let name = format!("{}.{:x}", fields.pod, since.as_nanos());
    let time = rfc3339(now);
    let object = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": fields.namespace},
        "involvedObject": {
            "apiVersion": "v1", "kind": "Pod",
            "namespace": fields.namespace, "name": fields.pod, "uid": fields.uid,
        },
        "reason": fields.reason,
        "message": fields.message,
        "type": "Warning",
        "source": {"component": COMPONENT, "host": fields.node},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
        "reportingComponent": COMPONENT,
        "reportingInstance": fields.node,
    });
    (name, object)
}

/// The patch of a repeated Event (the kubelet retried and numa-shim refused again).
pub(super) fn event_repeat(count: u32, now: SystemTime) -> Value {
    json!({"count": count, "lastTimestamp": rfc3339(now)})
}

/// `2006-01-02T15:04:05Z` (UTC, whole seconds), the API's timestamp format.
pub(super) fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

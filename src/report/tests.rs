use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::objects::*;
use super::*;

fn api_pod(value: serde_json::Value) -> ApiPod {
    serde_json::from_value(value).unwrap()
}

fn pending(node: &str) -> serde_json::Value {
    // What the kubelet reports for a pod whose sandbox it could not create.
    json!({
        "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
        "spec": {"nodeName": node},
        "status": {"phase": "Pending", "qosClass": "Guaranteed",
            "initContainerStatuses": [{"name": "sidecar", "image": "busybox", "imageID": "",
                "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}],
            "containerStatuses": [{"name": "app", "image": "busybox", "imageID": "",
                "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}
    })
}

#[test]
fn a_pending_pod_of_this_node_that_never_ran_may_be_ended() {
    assert_eq!(api_pod(pending("n1")).must_not_end("n1"), None);
    assert_eq!(
        api_pod(json!({"metadata": {"uid": "u"}, "spec": {"nodeName": "n1"}})).must_not_end("n1"),
        None
    );
}

#[test]
fn pods_that_ran_or_are_elsewhere_or_going_are_never_ended() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(Edit, &str); 7] = [
        (
            |v| v["spec"]["nodeName"] = json!("n2"),
            "bound to node \"n2\"",
        ),
        (
            |v| v["status"]["phase"] = json!("Running"),
            "phase is Running",
        ),
        (
            |v| v["status"]["phase"] = json!("Failed"),
            "phase is Failed",
        ),
        (
            |v| v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
            "being deleted",
        ),
        (
            |v| v["status"]["containerStatuses"][0]["containerID"] = json!("containerd://abc"),
            "container app",
        ),
        (
            |v| v["status"]["containerStatuses"][0]["state"] = json!({"running": {}}),
            "container app",
        ),
        (
            |v| v["status"]["initContainerStatuses"][0]["state"] = json!({"terminated": {}}),
            "container sidecar",
        ),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let mut v = pending("n1");
        edit(&mut v);
        let why = api_pod(v).must_not_end("n1");
        assert!(
            why.as_deref().is_some_and(|w| w.contains(want)),
            "case {i}: {why:?}"
        );
    }
}

#[test]
fn the_cri_uid_names_the_pod_or_its_mirror_and_nothing_else() {
    let p = api_pod(json!({"metadata": {"uid": "u1"}}));
    assert_eq!(p.target("u1"), Target::Pod);
    assert_eq!(p.target("u2"), Target::Other);
    let mirror =
        api_pod(json!({"metadata": {"uid": "m1", "annotations": {MIRROR_ANNOTATION: "hash-1"}}}));
    assert_eq!(mirror.target("hash-1"), Target::Mirror("m1".into()));
    assert_eq!(mirror.target("m1"), Target::Pod);
    assert_eq!(mirror.target("hash-2"), Target::Other);
}

#[test]
fn the_status_patch_is_the_kubelets_reject_pod_status_with_a_uid_precondition() {
    let patch = status_patch(
        "u1",
        "TopologyAffinityError",
        "Resources cannot be allocated with Topology locality",
    );
    assert_eq!(
        patch,
        json!({"metadata": {"uid": "u1",
                "annotations": {"numa-shim.io/refused": "TopologyAffinityError"}},
            "status": {"phase": "Failed",
            "reason": "TopologyAffinityError",
            "message": "Pod was rejected: Resources cannot be allocated with Topology locality"}})
    );
}

#[test]
fn events_look_like_the_kubelet_recorders() {
    let now = UNIX_EPOCH + Duration::from_nanos(1_764_588_487_000_000_123);
    let fields = EventFields {
        namespace: "plrm-tutorial",
        pod: "empty-shared-pool",
        uid: "u1",
        reason: "TopologyAffinityError",
        message: "Resources cannot be allocated with Topology locality",
        node: "node-1",
    };
    let (name, event) = event(&fields, now);
    assert_eq!(
        name,
        format!("empty-shared-pool.{:x}", 1_764_588_487_000_000_123u128)
    );
    assert_eq!(
        event["metadata"],
        json!({"name": name, "namespace": "plrm-tutorial"})
    );
    assert_eq!(
        event["involvedObject"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "plrm-tutorial",
               "name": "empty-shared-pool", "uid": "u1"})
    );
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "TopologyAffinityError");
    assert_eq!(
        event["source"],
        json!({"component": "numa-shim", "host": "node-1"})
    );
    assert_eq!(event["firstTimestamp"], "2025-12-01T11:28:07Z");
    assert_eq!(event["lastTimestamp"], event["firstTimestamp"]);
    assert_eq!(event["count"], 1);
    assert_eq!(
        event_repeat(3, now + Duration::from_secs(12)),
        json!({"count": 3, "lastTimestamp": "2025-12-01T11:28:19Z"})
    );
}

#[test]
fn timestamps_are_utc_seconds() {
    for (secs, want) in [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_709_251_199, "2024-02-29T23:59:59Z"),
        (4_102_444_800, "2100-01-01T00:00:00Z"),
    ] {
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(secs)), want);
    }
}

#[test]
fn only_unreachable_or_overloaded_servers_are_retried() {
    let status = |status| ApiServerError::Status {
        method: "PATCH".into(),
        url: "u".into(),
        status,
        body: String::new(),
    };
    assert!(transient(&status(503)) && transient(&status(429)) && transient(&status(500)));
    for code in [400, 401, 403, 404, 409, 422] {
        assert!(!transient(&status(code)), "{code}");
    }
    let connect = ApiServerError::Connect {
        url: "u".into(),
        source: std::io::ErrorKind::ConnectionRefused.into(),
    };
    assert!(transient(&connect));
    assert_eq!(segment("a b/c"), "a%20b%2Fc");
}

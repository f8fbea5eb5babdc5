//! The DRA claim reader: pod → claim status → allocated device → ResourceSlice attribute, on
//! JSON shaped as the API server writes it (v1 resource.k8s.io), and over the wire against the
//! test server (answers in order, a 403, a server that is gone).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::super::claims::*;
use super::server::TestServer;
use super::write_kubeconfig;
use crate::knowledge::apiserver::Connection;

/// A pod with a claim from a template (`gpu`, used by `app`) and a named claim (`nic`, used by
/// `init` and `app`), and one entry no container uses.
fn pod_json() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "uid": "u1"},
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "nic", "resourceClaimName": "shared-nic"},
                {"name": "spare", "resourceClaimTemplateName": "one-gpu"}
            ],
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "nic"}]}}],
            "containers": [{"name": "app", "resources": {
                "claims": [{"name": "gpu"}, {"name": "nic", "request": "port"}],
                "limits": {"cpu": "2", "memory": "1Gi"}}}]
        },
        "status": {"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "trainer-gpu-x7k2p"},
            {"name": "spare"}
        ]}
    })
}

fn claim_json(name: &str, results: &[(&str, &str, &str)]) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
        "status": {"allocation": {"devices": {"results": results.iter().map(|(d, p, n)| json!({
            "request": "gpu", "driver": d, "pool": p, "device": n})).collect::<Vec<_>>()},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}},
          "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "u1"}]}
    })
}

fn slices_json() -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "metadata": {}, "items": [
        {"metadata": {"name": "node-a-gpu.example.com-abcde"}, "spec": {
            "driver": "gpu.example.com", "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 2, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu0", "attributes": {"resource.kubernetes.io/numaNode": {"int": 0}, "numaNode": {"int": 0}}},
                {"name": "gpu1", "attributes": {"resource.kubernetes.io/numaNode": {"ints": [1, 0]}}},
                {"name": "gpu2", "attributes": {"numaNode": {"int": 3}}},
                {"name": "gpu3", "attributes": {"pcieRoot": {"string": "pci0000:80"}}}
            ]}},
        {"metadata": {"name": "node-a-gpu.example.com-old"}, "spec": {
            "driver": "gpu.example.com", "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu3", "attributes": {"resource.kubernetes.io/numaNode": {"int": 7}}}]}}
    ]})
}

fn key(d: &str) -> DeviceKey {
    ("gpu.example.com".into(), "node-a".into(), d.into())
}

#[test]
fn the_pods_claims_with_object_names_and_their_containers() {
    let claims = pod_claims(&pod_json());
    assert_eq!(
        claims,
        vec![
            PodClaim {
                entry: "gpu".into(),
                claim: Some("trainer-gpu-x7k2p".into()),
                containers: BTreeSet::from(["app".to_string()]),
            },
            PodClaim {
                entry: "nic".into(),
                claim: Some("shared-nic".into()),
                containers: BTreeSet::from(["app".to_string(), "init".to_string()]),
            },
            PodClaim {
                entry: "spare".into(),
                claim: None,
                containers: BTreeSet::new(),
            },
        ]
    );
    assert!(pod_claims(&json!({"spec": {"containers": [{"name": "a"}]}})).is_empty());
}

#[test]
fn allocated_devices_of_a_claim() {
    let c = claim_json("x", &[("gpu.example.com", "node-a", "gpu1")]);
    assert_eq!(allocated(&c), vec![key("gpu1")]);
    // Not allocated yet: nothing.
    assert!(allocated(&json!({"metadata": {"name": "x"}, "status": {}})).is_empty());
}

#[test]
fn numa_nodes_from_the_standard_attribute_its_list_form_and_configured_names() {
    let standard = attribute_names(&[]);
    let nodes = slice_nodes(&slices_json(), &standard);
    assert_eq!(nodes[&key("gpu0")], vec![0]);
    // The list form: the first entry is the device's own node.
    assert_eq!(nodes[&key("gpu1")], vec![1]);
    // Only the driver's own attribute: no node unless configured.
    assert_eq!(nodes[&key("gpu2")], Vec::<u32>::new());
    assert_eq!(
        nodes[&key("gpu3")],
        Vec::<u32>::new(),
        "an old generation does not count"
    );
    let configured = attribute_names(&["gpu.example.com/numaNode".to_string()]);
    let nodes = slice_nodes(&slices_json(), &configured);
    assert_eq!(nodes[&key("gpu2")], vec![3]);
    assert_eq!(nodes[&key("gpu0")], vec![0]);
}

#[test]
fn claims_for_the_decision() {
    let pod = pod_claims(&pod_json());
    let allocations = [
        ("trainer-gpu-x7k2p".to_string(), vec![key("gpu1")]),
        ("shared-nic".to_string(), vec![key("gpu3"), key("gone")]),
    ]
    .into_iter()
    .collect();
    let nodes = slice_nodes(&slices_json(), &attribute_names(&[]));
    let claims = claims("ml", &pod, &allocations, &nodes);
    assert_eq!(claims.len(), 2);
    assert_eq!(claims[0].name, "ml/trainer-gpu-x7k2p");
    assert_eq!(claims[0].devices[0].id, "gpu.example.com/node-a/gpu1");
    assert_eq!(claims[0].devices[0].numa_nodes, vec![1]);
    assert_eq!(claims[0].containers, BTreeSet::from(["app".to_string()]));
    // No attribute, and a device missing from the slices: no node (they place nothing).
    assert!(claims[1].devices.iter().all(|d| d.numa_nodes.is_empty()));
}

async fn reader(server: &TestServer, dir: &std::path::Path) -> ClaimReader {
    let path = write_kubeconfig(
        dir,
        &format!("    server: http://127.0.0.1:{}/", server.addr.port()),
        "    token: t",
    );
    ClaimReader::new(Connection::from_kubeconfig(&path).unwrap(), &[])
}

/// Queues the API server's answers to reading pod `ml/trainer`: the pod, its two claims (gpu1
/// and gpu0 of node-a), the driver's slices.
fn reply_trainer(server: &TestServer) {
    server.reply(200, pod_json().to_string());
    server.reply(
        200,
        claim_json(
            "trainer-gpu-x7k2p",
            &[("gpu.example.com", "node-a", "gpu1")],
        )
        .to_string(),
    );
    server.reply(
        200,
        claim_json("shared-nic", &[("gpu.example.com", "node-a", "gpu0")]).to_string(),
    );
    server.reply(200, slices_json().to_string());
}

#[tokio::test]
async fn read_walks_pod_claim_and_slices() {
    let server = TestServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let reader = reader(&server, dir.path()).await;
    reply_trainer(&server);
    let claims = reader.read("ml", "trainer").await.unwrap();
    let nodes: Vec<(String, BTreeSet<u32>)> =
        claims.iter().map(|c| (c.name.clone(), c.nodes())).collect();
    assert_eq!(
        nodes,
        vec![
            ("ml/trainer-gpu-x7k2p".to_string(), BTreeSet::from([1])),
            ("ml/shared-nic".to_string(), BTreeSet::from([0])),
        ]
    );
    let paths: Vec<String> = server
        .requests(4)
        .await
        .into_iter()
        .map(|s| s.path)
        .collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/ml/pods/trainer",
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/trainer-gpu-x7k2p",
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/shared-nic",
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dgpu.example.com",
        ]
    );
}

#[tokio::test]
async fn forbidden_and_unreachable_are_errors_that_name_the_cause() {
    let server = TestServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let reader = reader(&server, dir.path()).await;
    server.reply(200, pod_json().to_string());
    server.reply(
        403,
        r#"{"kind":"Status","status":"Failure","message":"resourceclaims.resource.k8s.io \"trainer-gpu-x7k2p\" is forbidden","reason":"Forbidden","code":403}"#,
    );
    let err = reader.read("ml", "trainer").await.unwrap_err().to_string();
    assert!(
        err.contains("status 403") && err.contains("forbidden"),
        "{err}"
    );
    drop(server);
    let gone = TestServer::start(None).await;
    let port = gone.addr.port();
    drop(gone);
    let path = write_kubeconfig(
        dir.path(),
        &format!("    server: http://127.0.0.1:{port}/"),
        "    token: t",
    );
    let reader = ClaimReader::new(Connection::from_kubeconfig(&path).unwrap(), &[]);
    let err = reader.read("ml", "trainer").await.unwrap_err().to_string();
    assert!(err.contains("cannot connect"), "{err}");
}

/// A slow API server (a loaded control plane, an emulated guest): a read waits for it up to
/// its timeout (`draClaimsTimeout`), then gives up with the reason; the default waits longer
/// than the 2.5 s this server takes.
#[tokio::test]
async fn a_read_waits_for_a_slow_api_server_up_to_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(None).await;
    let quick = reader(&server, dir.path())
        .await
        .with_timeout(std::time::Duration::from_millis(200));
    let err = quick.read("ml", "trainer").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("no answer from the API server within 200ms"),
        "{err}"
    );

    let slow = TestServer::start(None).await;
    let patient = reader(&slow, dir.path()).await;
    let replies = async {
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        reply_trainer(&slow);
    };
    let (read, ()) = tokio::join!(patient.read("ml", "trainer"), replies);
    assert_eq!(read.unwrap().len(), 2);
}

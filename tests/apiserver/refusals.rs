//! Refusal reports (`numa_shim::report`) written to the real API server with the credentials the
//! packaging ships (the kube-system/numa-shim ServiceAccount and its RBAC) or the kubelet's own:
//! the Event `kubectl describe pod` shows, the pod ended Failed as the kubelet's rejectPod ends
//! it, and what is never written (pods that ran, pods replaced under the same name, other modes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use numa_shim::knowledge::apiserver::Connection;
use numa_shim::report::{self, Refusal, ReportMode, ReportStats, Reporter, Stage};

use super::support::*;

const REASON: &str = "TopologyAffinityError";
const MESSAGE: &str = "Resources cannot be allocated with Topology locality";

fn refusal(node: &TestNode, name: &str, uid: &str) -> Refusal {
    Refusal {
        uid: uid.to_string(),
        namespace: node.namespace.clone(),
        name: name.to_string(),
        reason: REASON.into(),
        message: MESSAGE.into(),
        stage: Stage::Admission,
    }
}

fn writer(config: &std::path::Path, node: &TestNode, mode: ReportMode) -> Reporter {
    let conn = Connection::from_kubeconfig(config).unwrap();
    let (reporter, _task) = report::start(conn, node.name.clone(), mode);
    reporter
}

fn count(reporter: &Reporter, which: fn(&ReportStats) -> &AtomicU64) -> u64 {
    which(reporter.stats()).load(Ordering::Relaxed)
}

async fn settled(reporter: &Reporter, total: u64) {
    let s = reporter.stats().clone();
    eventually("the writer done", 30, move || {
        let all = [&s.events, &s.repeats, &s.statuses, &s.skipped, &s.failures];
        all.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>() >= total
    })
    .await;
}

fn status(node: &TestNode, pod: &str) -> String {
    node.cp.kubectl(&[
        "-n",
        &node.namespace,
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.phase}/{.status.reason}/{.status.message}",
    ])
}

/// The Events numa-shim wrote about pod UID `uid`: "reason|type|component|count|message".
fn events(node: &TestNode, uid: &str) -> Vec<String> {
    let out = node.cp.kubectl(&[
        "-n",
        &node.namespace,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.uid={uid},source=numa-shim"),
        "-o",
        "jsonpath={range .items[*]}{.reason}|{.type}|{.source.component}|{.count}|{.message}{\"\\n\"}{end}",
    ]);
    out.lines().map(str::to_string).collect()
}

fn sa_kubeconfig(cp: &Cp, dir: &std::path::Path) -> std::path::PathBuf {
    let token = cp.dir.join("numa-shim.token");
    kubeconfig(
        cp,
        dir,
        &format!("https://127.0.0.1:{}", cp.port()),
        &[format!("tokenFile: {}", token.display())],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn a_refused_pod_gets_the_kubelets_event_and_ends_failed() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "refused");
    let dir = tempfile::tempdir().unwrap();
    let uid = node.create_pod("empty-shared-pool", "2");
    let reporter = writer(
        &sa_kubeconfig(&cp, dir.path()),
        &node,
        ReportMode::EventsAndStatus,
    );
    reporter.refused(refusal(&node, "empty-shared-pool", &uid));
    settled(&reporter, 2).await;
    assert_eq!(count(&reporter, |s| &s.failures), 0);
    assert_eq!(
        status(&node, "empty-shared-pool"),
        format!("Failed/{REASON}/Pod was rejected: {MESSAGE}")
    );
    assert_eq!(
        events(&node, &uid),
        [format!("{REASON}|Warning|numa-shim|1|{MESSAGE}")]
    );
    let describe = cp.kubectl(&[
        "-n",
        &node.namespace,
        "describe",
        "pod",
        "empty-shared-pool",
    ]);
    eprintln!("{describe}");
    for want in [
        "Status:           Failed".to_string(),
        format!("Reason:           {REASON}"),
        format!("Message:          Pod was rejected: {MESSAGE}"),
    ] {
        assert!(describe.contains(&want), "describe lacks {want:?}");
    }
    assert!(describe.contains(&format!("Annotations:      numa-shim.io/refused: {REASON}")));
    let line = describe
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .find(|l| l.contains("numa-shim"))
        .unwrap_or_else(|| panic!("no numa-shim event in describe"));
    for want in ["Warning", REASON, MESSAGE] {
        assert!(line.contains(want), "{line:?} lacks {want:?}");
    }

    // The kubelet retries before it sees the status: the same Event counts it.
    reporter.refused(refusal(&node, "empty-shared-pool", &uid));
    settled(&reporter, 3).await;
    assert_eq!(count(&reporter, |s| &s.repeats), 1);
    assert_eq!(
        count(&reporter, |s| &s.statuses),
        1,
        "the status is written once"
    );
    assert_eq!(
        events(&node, &uid),
        [format!("{REASON}|Warning|numa-shim|2|{MESSAGE}")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn events_mode_and_container_refusals_leave_the_status_alone() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "events-only");
    let dir = tempfile::tempdir().unwrap();
    let config = sa_kubeconfig(&cp, dir.path());
    let a = node.create_pod("a", "1");
    let events_only = writer(&config, &node, ReportMode::Events);
    events_only.refused(refusal(&node, "a", &a));
    settled(&events_only, 1).await;
    assert_eq!(status(&node, "a"), "Pending//");
    assert_eq!(events(&node, &a).len(), 1);

    let b = node.create_pod("b", "1");
    let full = writer(&config, &node, ReportMode::EventsAndStatus);
    full.refused(Refusal {
        stage: Stage::Container,
        ..refusal(&node, "b", &b)
    });
    settled(&full, 1).await;
    assert_eq!(
        status(&node, "b"),
        "Pending//",
        "a container refusal never ends the pod"
    );
    assert_eq!(events(&node, &b).len(), 1);

    let none = writer(&config, &node, ReportMode::None);
    let c = node.create_pod("c", "1");
    none.refused(refusal(&node, "c", &c));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(events(&node, &c).is_empty());
    assert_eq!(status(&node, "c"), "Pending//");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn a_pod_that_ran_keeps_its_status_and_a_replaced_pod_is_never_touched() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "never");
    let dir = tempfile::tempdir().unwrap();
    let reporter = writer(
        &sa_kubeconfig(&cp, dir.path()),
        &node,
        ReportMode::EventsAndStatus,
    );

    // A pod whose container runs (its sandbox re-created, say): an Event, no status.
    let ran = node.create_pod("ran", "1");
    let running = r#"{"status":{"phase":"Running","containerStatuses":[{"name":"app","image":"busybox","imageID":"","ready":true,"restartCount":0,"containerID":"containerd://0123","state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}]}}"#;
    cp.kubectl(&[
        "-n",
        &node.namespace,
        "patch",
        "pod",
        "ran",
        "--subresource=status",
        "--type=strategic",
        "-p",
        running,
    ]);
    reporter.refused(refusal(&node, "ran", &ran));
    settled(&reporter, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status(&node, "ran"), "Running//");
    assert_eq!(events(&node, &ran).len(), 1);
    assert_eq!(count(&reporter, |s| &s.statuses), 0);

    // The refused pod was deleted and another one took its name: nothing is written.
    let old = node.create_pod("reused", "1");
    node.delete_pod("reused");
    let new = node.create_pod("reused", "1");
    assert_ne!(old, new);
    reporter.refused(refusal(&node, "reused", &old));
    reporter.refused(refusal(&node, "gone", "no-such-uid"));
    settled(&reporter, 3).await;
    assert_eq!(count(&reporter, |s| &s.skipped), 2);
    assert_eq!(status(&node, "reused"), "Pending//");
    assert!(events(&node, &old).is_empty() && events(&node, &new).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn the_mirror_pod_of_a_static_pod_gets_the_event_only() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "mirror");
    let dir = tempfile::tempdir().unwrap();
    let reporter = writer(
        &sa_kubeconfig(&cp, dir.path()),
        &node,
        ReportMode::EventsAndStatus,
    );
    // What the kubelet creates for a static pod: the CRI calls carry the static pod's UID (the
    // config hash), the mirror pod names it in an annotation and has a UID of its own.
    let mirror = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"static-web","namespace":"{ns}",
          "annotations":{{"kubernetes.io/config.mirror":"static-hash-1","kubernetes.io/config.hash":"static-hash-1","kubernetes.io/config.source":"file"}}}},
          "spec":{{"nodeName":"{node}","automountServiceAccountToken":false,"containers":[{{"name":"app","image":"busybox"}}]}}}}"#,
        ns = node.namespace,
        node = node.name
    );
    let mirror_uid = cp.create(&mirror);
    reporter.refused(refusal(&node, "static-web", "static-hash-1"));
    settled(&reporter, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        events(&node, &mirror_uid).len(),
        1,
        "the event names the mirror pod"
    );
    assert_eq!(
        status(&node, "static-web"),
        "Pending//",
        "the kubelet owns a static pod's status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn the_kubelets_own_credentials_are_enough() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "node-creds");
    let dir = tempfile::tempdir().unwrap();
    let uid = node.create_pod("p", "1");
    // The node's identity: the Node authorizer and NodeRestriction limit it to its own pods.
    let pem = dir.path().join("kubelet-client-current.pem");
    let identity = format!("system:node:{}", node.name);
    std::fs::write(
        &pem,
        client_cert(&cp, &identity, "system:nodes", Duration::from_secs(3600)),
    )
    .unwrap();
    let config = kubeconfig(
        &cp,
        dir.path(),
        &format!("https://127.0.0.1:{}", cp.port()),
        &[
            format!("client-certificate: {}", pem.display()),
            format!("client-key: {}", pem.display()),
        ],
    );
    let reporter = writer(&config, &node, ReportMode::EventsAndStatus);
    reporter.refused(refusal(&node, "p", &uid));
    settled(&reporter, 2).await;
    assert_eq!(count(&reporter, |s| &s.failures), 0);
    assert_eq!(
        status(&node, "p"),
        format!("Failed/{REASON}/Pod was rejected: {MESSAGE}")
    );
    assert_eq!(events(&node, &uid).len(), 1);

    // Another node's pod: NodeRestriction refuses the status, the writer gives up cleanly.
    let other = TestNode::new(&cp, "node-creds-other");
    let foreign = other.create_pod("q", "1");
    let reporter = writer(&config, &other, ReportMode::EventsAndStatus);
    reporter.refused(refusal(&other, "q", &foreign));
    settled(&reporter, 1).await;
    assert_eq!(status(&other, "q"), "Pending//");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn writes_wait_out_a_short_outage() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "outage");
    let dir = tempfile::tempdir().unwrap();
    let uid = node.create_pod("p", "1");
    let link = Link::start(cp.port()).await;
    let token = cp.dir.join("numa-shim.token");
    let config = kubeconfig(
        &cp,
        dir.path(),
        &link.server(),
        &[format!("tokenFile: {}", token.display())],
    );
    let reporter = writer(&config, &node, ReportMode::EventsAndStatus);
    link.cut();
    reporter.refused(refusal(&node, "p", &uid));
    tokio::time::sleep(Duration::from_millis(700)).await;
    link.restore();
    settled(&reporter, 2).await;
    assert_eq!(count(&reporter, |s| &s.failures), 0);
    assert_eq!(
        status(&node, "p"),
        format!("Failed/{REASON}/Pod was rejected: {MESSAGE}")
    );
}

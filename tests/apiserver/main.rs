//! `podKnowledge: apiserver` against the real kube-apiserver v1.37.2 (with etcd) of the loopback
//! control plane: list then watch from the list's resourceVersion, bookmarks, missed events
//! replayed, an expired resourceVersion (410) forcing a re-list after an API server restart, the
//! API server down for a while, token and client-certificate rotation. Run by
//! integration/apiserver-tests.sh (`cargo test --test apiserver -- --ignored`), which starts the
//! control plane.
//!
//! Each test has its own namespace and Node object (no kubelet: the pods stay Pending); numa-shim
//! reaches the API server through a TCP link the test can cut.

mod dra;
mod refusals;
mod serve;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use numa_shim::knowledge::apiserver::WatchStats;
use numa_shim::testing::control_plane as support;
use support::*;

const LONG: Duration = Duration::from_secs(300);

fn cpu_of(cache: &numa_shim::knowledge::PodCache, uid: &str) -> Option<u64> {
    cache.get(uid)?.containers[0].resources.requests.cpu_milli
}

fn lists(s: &WatchStats) -> &AtomicU64 {
    &s.lists
}
fn watches(s: &WatchStats) -> &AtomicU64 {
    &s.watches
}
fn bookmarks(s: &WatchStats) -> &AtomicU64 {
    &s.bookmarks
}
fn expired(s: &WatchStats) -> &AtomicU64 {
    &s.expired
}
fn errors(s: &WatchStats) -> &AtomicU64 {
    &s.errors
}

/// numa-shim's kubeconfig from the control plane (the kube-system/numa-shim token), pointed at
/// `server`.
fn numa_shim_kubeconfig(cp: &Cp, dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let token = cp.dir.join("numa-shim.token");
    kubeconfig(
        cp,
        dir,
        server,
        &[format!("tokenFile: {}", token.display())],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn lists_then_watches_from_the_list_resource_version() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "list-watch");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    let config = numa_shim_kubeconfig(&cp, dir.path(), &format!("https://127.0.0.1:{}", cp.port()));
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("a listed", 20, |c| cpu_of(c, &a) == Some(1000))
        .await;
    assert_eq!(w.count(lists), 1, "{}", w.summary());

    let b = node.create_pod("b", "500m");
    w.eventually("b added", 20, |c| cpu_of(c, &b) == Some(500))
        .await;
    let before = w.count(|s| &s.events);
    node.label_pod("a", "changed=yes");
    w.eventually("a modified", 20, |_| w.count(|s| &s.events) > before)
        .await;
    node.delete_pod("b");
    w.eventually("b deleted", 20, |c| {
        c.get(&b).is_none() && c.get(&a).is_some()
    })
    .await;
    // Pods of other nodes never arrive.
    let other = TestNode::new(&cp, "list-watch-other");
    let c = other.create_pod("c", "1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        w.cache.get(&c).is_none(),
        "a pod of another node was cached"
    );
    assert_eq!(w.cache.len(), 1);
    assert_eq!(
        w.count(lists),
        1,
        "one list, then one watch: {}",
        w.summary()
    );
    assert_eq!(w.count(expired) + w.count(errors), 0, "{}", w.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn bookmarks_move_the_resource_version_without_relisting() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "bookmarks");
    let dir = tempfile::tempdir().unwrap();
    node.create_pod("a", "1");
    let config = numa_shim_kubeconfig(&cp, dir.path(), &format!("https://127.0.0.1:{}", cp.port()));
    // 6 s watches: the API server sends a bookmark 2 s before each one ends.
    let w = Watched::start(&config, &node.name, Duration::from_secs(6));
    w.eventually("listed", 20, |c| c.len() == 1).await;
    let listed: u64 = w.stats.resource_version().unwrap().parse().unwrap();
    // Other objects move the store's revision; no pod of this node changes.
    for i in 0..8 {
        cp.kubectl(&[
            "-n",
            &node.namespace,
            "create",
            "configmap",
            &format!("c{i}"),
        ]);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    w.eventually("two bookmarks", 20, |_| w.count(bookmarks) >= 2)
        .await;
    let now: u64 = w.stats.resource_version().unwrap().parse().unwrap();
    assert!(
        now > listed,
        "bookmarks moved the version from {listed} to {now}"
    );
    assert!(w.count(watches) >= 2, "{}", w.summary());
    assert_eq!(
        w.count(lists),
        1,
        "watched again from the bookmark: {}",
        w.summary()
    );
    assert_eq!(w.count(expired) + w.count(errors), 0, "{}", w.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn events_missed_during_a_short_cut_are_replayed() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "replay");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    let link = Link::start(cp.port()).await;
    let config = numa_shim_kubeconfig(&cp, dir.path(), &link.server());
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("a listed", 20, |c| c.get(&a).is_some()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    link.cut();
    w.eventually("the cut noticed", 20, |_| w.count(errors) >= 1)
        .await;
    node.delete_pod("a");
    let b = node.create_pod("b", "2");
    link.restore();
    w.eventually("a gone, b there", 30, |c| {
        c.get(&a).is_none() && cpu_of(c, &b) == Some(2000)
    })
    .await;
    assert_eq!(
        w.count(lists),
        1,
        "resumed from the version: {}",
        w.summary()
    );
    assert_eq!(w.count(expired), 0, "{}", w.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn an_api_server_restart_expires_the_version_and_forces_a_relist() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "relist");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    let keep = node.create_pod("keep", "1");
    let link = Link::start(cp.port()).await;
    let config = numa_shim_kubeconfig(&cp, dir.path(), &link.server());
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("listed", 20, |c| c.len() == 2).await;

    // Changes numa-shim does not see, then a restart: the new watch cache starts after them.
    link.cut();
    node.delete_pod("a");
    let b = node.create_pod("b", "2");
    let stopped = cp.stop_apiserver();
    cp.bump_etcd_revision();
    stopped.start();
    link.restore();
    w.eventually("re-listed: a gone, b and keep there", 60, |c| {
        c.get(&a).is_none() && cpu_of(c, &b) == Some(2000) && c.get(&keep).is_some()
    })
    .await;
    assert!(w.count(expired) >= 1, "410 seen: {}", w.summary());
    assert_eq!(w.count(lists), 2, "{}", w.summary());
    // And it watches again from the new list.
    let c = node.create_pod("c", "1");
    w.eventually("c added after the re-list", 20, |cache| {
        cache.get(&c).is_some()
    })
    .await;
    assert_eq!(w.count(lists), 2, "{}", w.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn the_api_server_down_for_a_while_and_back() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "down");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    let config = numa_shim_kubeconfig(&cp, dir.path(), &format!("https://127.0.0.1:{}", cp.port()));
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("listed", 20, |c| c.get(&a).is_some()).await;

    let stopped = cp.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let failed = w.count(errors);
    assert!(failed >= 2, "retried while down: {}", w.summary());
    // Backed off: at most one attempt per 5 s after the first few.
    assert!(failed <= 10, "retries are backed off: {}", w.summary());
    assert!(w.cache.get(&a).is_some(), "the cache keeps what it knew");
    stopped.start();
    let b = node.create_pod("b", "1");
    w.eventually("b seen after the API server came back", 30, |c| {
        c.get(&b).is_some() && c.get(&a).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn a_rotated_token_is_read_on_the_next_request() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "token");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    // Tokens bound to Secrets: deleting the Secret revokes the token.
    for s in ["numa-shim-it-t1", "numa-shim-it-t2"] {
        let _ = cp.try_kubectl(&["-n", "kube-system", "delete", "secret", s], None);
        cp.kubectl(&["-n", "kube-system", "create", "secret", "generic", s]);
    }
    let bound = |secret: &str| {
        cp.script(&[
            "token",
            "--bound-object-kind",
            "Secret",
            "--bound-object-name",
            secret,
        ])
    };
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, bound("numa-shim-it-t1")).unwrap();
    let link = Link::start(cp.port()).await;
    let config = kubeconfig(
        &cp,
        dir.path(),
        &link.server(),
        &[format!("tokenFile: {}", token_file.display())],
    );
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("listed with token 1", 20, |c| c.get(&a).is_some())
        .await;

    // Rotate as the kubelet rotates projected tokens, then revoke the old one.
    replace_file(&token_file, &bound("numa-shim-it-t2"));
    cp.kubectl(&["-n", "kube-system", "delete", "secret", "numa-shim-it-t1"]);
    link.cut();
    tokio::time::sleep(Duration::from_secs(1)).await;
    link.restore();
    let b = node.create_pod("b", "1");
    w.eventually("b seen with token 2", 30, |c| c.get(&b).is_some())
        .await;

    // Control: the revoked token really is refused.
    let old_dir = tempfile::tempdir().unwrap();
    std::fs::write(old_dir.path().join("token"), bound("numa-shim-it-t2")).unwrap();
    cp.kubectl(&["-n", "kube-system", "delete", "secret", "numa-shim-it-t2"]);
    let revoked = kubeconfig(
        &cp,
        old_dir.path(),
        &format!("https://127.0.0.1:{}", cp.port()),
        &[format!(
            "tokenFile: {}",
            old_dir.path().join("token").display()
        )],
    );
    let control = Watched::start(&revoked, &node.name, LONG);
    eventually("the revoked token refused", 30, || {
        control.count(errors) >= 1
    })
    .await;
    assert_eq!(control.count(lists), 0, "{}", control.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane (integration/apiserver-tests.sh)"]
async fn a_rotated_client_certificate_is_used_once_the_old_one_expired() {
    let _serial = SERIAL.lock().await;
    let cp = Cp::get();
    let node = TestNode::new(&cp, "cert");
    let dir = tempfile::tempdir().unwrap();
    let a = node.create_pod("a", "1");
    // The kubelet's layout: one PEM with certificate and key, named by both kubeconfig fields,
    // replaced when the kubelet rotates it. The node's own identity (Node authorizer).
    let identity = format!("system:node:{}", node.name);
    let pem = dir.path().join("kubelet-client-current.pem");
    let issued = std::time::Instant::now();
    let lifetime = Duration::from_secs(20);
    std::fs::write(&pem, client_cert(&cp, &identity, "system:nodes", lifetime)).unwrap();
    let link = Link::start(cp.port()).await;
    let config = kubeconfig(
        &cp,
        dir.path(),
        &link.server(),
        &[
            format!("client-certificate: {}", pem.display()),
            format!("client-key: {}", pem.display()),
        ],
    );
    let w = Watched::start(&config, &node.name, LONG);
    w.eventually("listed with certificate 1", 20, |c| c.get(&a).is_some())
        .await;

    replace_file(
        &pem,
        &client_cert(&cp, &identity, "system:nodes", Duration::from_secs(3600)),
    );
    let expiry = issued + lifetime + Duration::from_secs(2);
    tokio::time::sleep_until(expiry.into()).await;
    link.cut();
    tokio::time::sleep(Duration::from_secs(1)).await;
    link.restore();
    let b = node.create_pod("b", "1");
    w.eventually("b seen with certificate 2", 30, |c| c.get(&b).is_some())
        .await;

    // Control: a certificate that has expired is refused.
    let old = dir.path().join("expired.pem");
    std::fs::write(
        &old,
        client_cert(&cp, &identity, "system:nodes", Duration::from_secs(1)),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let old_dir = tempfile::tempdir().unwrap();
    let expired_config = kubeconfig(
        &cp,
        old_dir.path(),
        &format!("https://127.0.0.1:{}", cp.port()),
        &[
            format!("client-certificate: {}", old.display()),
            format!("client-key: {}", old.display()),
        ],
    );
    let control = Watched::start(&expired_config, &node.name, LONG);
    eventually("the expired certificate refused", 30, || {
        control.count(errors) >= 1
    })
    .await;
    assert_eq!(control.count(lists), 0, "{}", control.summary());
}

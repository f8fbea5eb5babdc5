use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::*;

mod claims;
mod server;

use server::{Pki, TestServer};

fn pod_json(uid: &str, cpu: &str, rv: &str) -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": format!("pod-{uid}"), "namespace": "ns", "uid": uid,
            "resourceVersion": rv, "labels": {"app": "x"},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "spec": {"nodeName": "node-a", "restartPolicy": "Always", "containers": [{
            "name": "app", "image": "busybox", "command": ["sleep", "inf"],
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"},
                          "limits": {"cpu": cpu, "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed"}
    })
}

fn list(items: &[Value], rv: &str) -> String {
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})
        .to_string()
}

fn event(kind: &str, object: Value) -> String {
    format!("{}\n", json!({"type": kind, "object": object}))
}

fn expired() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410})
}

fn cpu_of(cache: &PodCache, uid: &str) -> Option<u64> {
    cache.get(uid)?.containers[0].resources.requests.cpu_milli
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn write_kubeconfig(dir: &Path, cluster: &str, user: &str) -> PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
         contexts:\n- name: other\n  context: {{cluster: nowhere, user: nobody}}\n\
         - name: test\n  context: {{cluster: c, user: u}}\n\
         clusters:\n- name: c\n  cluster:\n{cluster}\n\
         users:\n- name: u\n  user:\n{user}\n"
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

const LIST_PATH: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a";

#[tokio::test]
async fn https_kubeconfig_lists_watches_and_relists() {
    let pki = Pki::new();
    let server = TestServer::start(Some(pki.server.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_kubeconfig(
        dir.path(),
        &format!(
            "    server: https://127.0.0.1:{}\n    certificate-authority-data: {}",
            server.addr.port(),
            b64(&pki.ca_pem)
        ),
        "    token: secret-token",
    );
    let conn = Connection::from_kubeconfig(&path).unwrap();
    let cache = Arc::new(PodCache::default());
    let task = tokio::spawn(watch(conn, "node-a".into(), cache.clone()));

    server.reply(
        200,
        list(
            &[pod_json("a", "1", "10"), pod_json("b", "500m", "11")],
            "100",
        ),
    );
    let watch1 = server.stream();
    eventually("a and b listed", || cache.len() == 2).await;
    assert_eq!(cpu_of(&cache, "b"), Some(500));
    let seen = server.requests(2).await;
    assert_eq!(seen[0].path, LIST_PATH);
    assert!(seen[1].path.starts_with(LIST_PATH), "{}", seen[1].path);
    for part in [
        "watch=true",
        "resourceVersion=100",
        "allowWatchBookmarks=true",
    ] {
        assert!(seen[1].path.contains(part), "{} lacks {part}", seen[1].path);
    }

    // One event split over two chunks, then two events in one chunk.
    let added = event("ADDED", pod_json("c", "2", "101"));
    let (head, tail) = added.split_at(40);
    watch1.send(head.to_string()).unwrap();
    watch1.send(tail.to_string()).unwrap();
    eventually("c added", || cache.get("c").is_some()).await;
    watch1
        .send(
            event("MODIFIED", pod_json("a", "3", "102"))
                + &event("DELETED", pod_json("b", "500m", "140")),
        )
        .unwrap();
    eventually("a modified, b deleted", || {
        cpu_of(&cache, "a") == Some(3000) && cache.get("b").is_none()
    })
    .await;
    let bookmark =
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "150"}});
    watch1.send(event("BOOKMARK", bookmark)).unwrap();
    // The stream ends: the watcher watches again from the bookmark.
    let watch2 = server.stream();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(watch1);
    let seen = server.requests(3).await;
    assert!(
        seen[2].path.contains("watch=true&resourceVersion=150"),
        "{}",
        seen[2].path
    );

    // An ERROR 410 event forces a re-list, which replaces the cache's content.
    server.reply(
        200,
        list(
            &[pod_json("a", "3", "180"), pod_json("d", "1", "190")],
            "200",
        ),
    );
    let watch3 = server.stream();
    watch2.send(event("ERROR", expired())).unwrap();
    eventually("re-listed: c gone, d there", || {
        cache.get("c").is_none() && cache.get("d").is_some() && cache.get("a").is_some()
    })
    .await;
    let seen = server.requests(5).await;
    assert_eq!(seen[3].path, LIST_PATH);
    assert!(
        seen[4].path.contains("resourceVersion=200"),
        "{}",
        seen[4].path
    );

    // A 410 Gone answer to the watch request also forces a re-list.
    server.reply(410, expired().to_string());
    server.reply(200, list(&[], "300"));
    let _watch4 = server.stream();
    drop(watch3);
    eventually("re-listed empty", || cache.is_empty()).await;
    let seen = server.requests(8).await;
    assert!(
        seen[5].path.contains("resourceVersion=200"),
        "{}",
        seen[5].path
    );
    assert_eq!(seen[6].path, LIST_PATH);
    assert!(
        seen[7].path.contains("resourceVersion=300"),
        "{}",
        seen[7].path
    );
    for s in &seen {
        assert_eq!(
            s.authorization.as_deref(),
            Some("Bearer secret-token"),
            "{}",
            s.path
        );
    }
    task.abort();
}

#[tokio::test]
async fn plain_http_with_a_token_file() {
    let server = TestServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "file-token\n").unwrap();
    let path = write_kubeconfig(
        dir.path(),
        &format!("    server: http://127.0.0.1:{}/", server.addr.port()),
        "    tokenFile: token",
    );
    let conn = Connection::from_kubeconfig(&path).unwrap();
    let cache = Arc::new(PodCache::default());
    let task = tokio::spawn(watch(conn, "node-a".into(), cache.clone()));
    server.reply(200, list(&[pod_json("a", "1", "1")], "7"));
    let stream = server.stream();
    eventually("a listed", || cache.get("a").is_some()).await;
    stream
        .send(event("ADDED", pod_json("b", "2", "8")))
        .unwrap();
    stream
        .send(event("DELETED", pod_json("a", "1", "9")))
        .unwrap();
    eventually("b added, a deleted", || {
        cache.get("b").is_some() && cache.get("a").is_none()
    })
    .await;
    let seen = server.requests(2).await;
    assert_eq!(seen[0].path, LIST_PATH);
    assert!(
        seen[1].path.contains("resourceVersion=7"),
        "{}",
        seen[1].path
    );
    assert_eq!(seen[1].authorization.as_deref(), Some("Bearer file-token"));
    task.abort();
}

#[tokio::test]
async fn in_cluster_config_from_a_root_dir() {
    let pki = Pki::new();
    let server = TestServer::start(Some(pki.server.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "sa-token").unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    let port = server.addr.port().to_string();
    let env = |name: &str| match name {
        "KUBERNETES_SERVICE_HOST" => Some("127.0.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some(port.clone()),
        _ => None,
    };
    let conn = Connection::in_cluster(env, dir.path()).unwrap();
    assert_eq!(conn.server(), format!("https://127.0.0.1:{port}"));
    let cache = Arc::new(PodCache::default());
    let task = tokio::spawn(watch(conn, "node-a".into(), cache.clone()));
    server.reply(200, list(&[pod_json("a", "1", "1")], "2"));
    let _stream = server.stream();
    eventually("a listed", || cache.get("a").is_some()).await;
    let seen = server.requests(1).await;
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sa-token"));
    task.abort();

    let err = Connection::in_cluster(|_| None, dir.path()).unwrap_err();
    assert!(err.to_string().contains("KUBERNETES_SERVICE_HOST"), "{err}");
    std::fs::remove_file(dir.path().join("ca.crt")).unwrap();
    let err = Connection::in_cluster(env, dir.path()).unwrap_err();
    assert!(err.to_string().contains("ca.crt"), "{err}");
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_refused() {
    let (pki, other) = (Pki::new(), Pki::new());
    let server = TestServer::start(Some(pki.server.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_kubeconfig(
        dir.path(),
        &format!(
            "    server: https://127.0.0.1:{}\n    certificate-authority-data: {}",
            server.addr.port(),
            b64(&other.ca_pem)
        ),
        "    token: t",
    );
    let conn = Connection::from_kubeconfig(&path).unwrap();
    let err = http::get(&conn, LIST_PATH).await.unwrap_err();
    assert!(matches!(err, ApiServerError::Tls { .. }), "{err}");
    assert!(err.to_string().contains(&server.addr.to_string()), "{err}");
}

#[test]
fn bad_kubeconfigs_name_the_field() {
    let pki = Pki::new();
    let ca = format!("    certificate-authority-data: {}", b64(&pki.ca_pem));
    let server = "    server: https://127.0.0.1:6443";
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(String, String, &str)> = vec![
        (
            format!("{server}\n    certificate-authority-data: '%%%'"),
            String::new(),
            "clusters[c].cluster.certificate-authority-data: invalid base64",
        ),
        (
            format!(
                "{server}\n    certificate-authority-data: {}",
                b64("not pem")
            ),
            String::new(),
            "clusters[c].cluster.certificate-authority-data: holds no PEM certificate",
        ),
        (
            server.to_string(),
            String::new(),
            "clusters[c].cluster.certificate-authority: required",
        ),
        (
            format!("{server}\n    certificate-authority: missing.crt"),
            String::new(),
            "clusters[c].cluster.certificate-authority: cannot read",
        ),
        (
            ca.clone(),
            String::new(),
            "clusters[c].cluster.server: not set",
        ),
        (
            format!("    server: ftp://x\n{ca}"),
            String::new(),
            "clusters[c].cluster.server",
        ),
        (
            format!("{server}\n{ca}"),
            "    client-key-data: '!!'".into(),
            "users[u].user.client-key-data: invalid base64",
        ),
        (
            format!("{server}\n{ca}"),
            format!("    client-certificate-data: {}", b64(&pki.ca_pem)),
            "users[u].user.client-key: required with client-certificate",
        ),
        (
            format!("{server}\n{ca}"),
            "    exec: {command: aws}".into(),
            "users[u].user.exec: not supported",
        ),
    ];
    for (cluster, user, want) in cases {
        let user = if user.is_empty() {
            "    token: t".to_string()
        } else {
            user
        };
        let path = write_kubeconfig(dir.path(), &cluster, &user);
        let err = Connection::from_kubeconfig(&path).unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?} in {err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
    let path = dir.path().join("contexts");
    for (text, want) in [
        ("clusters: []", "current-context: not set"),
        (
            "current-context: nope\ncontexts: []",
            "current-context: no context named \"nope\"",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: gone}}]",
            "contexts[x].context.cluster: no cluster named \"gone\"",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = Connection::from_kubeconfig(&path).unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?} in {err}");
    }
    let err = Connection::from_kubeconfig(&dir.path().join("absent")).unwrap_err();
    assert!(err.to_string().contains("absent"), "{err}");
}

#[test]
fn client_certificates_load_from_data_and_files() {
    let pki = Pki::new();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["node-a".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("client.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("client.key"), key.serialize_pem()).unwrap();
    let cluster = "    server: https://localhost:6443\n    certificate-authority: ca.crt";
    let by_data = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        b64(&cert.pem()),
        b64(&key.serialize_pem())
    );
    let by_file = "    client-certificate: client.crt\n    client-key: client.key";
    for user in [by_data.as_str(), by_file] {
        let path = write_kubeconfig(dir.path(), cluster, user);
        let conn = Connection::from_kubeconfig(&path).unwrap();
        assert_eq!(conn.server(), "https://localhost:6443");
        assert!(conn.token().unwrap().is_none());
    }
    let user = format!(
        "    client-certificate: client.crt\n    client-key-data: {}",
        b64("junk")
    );
    let path = write_kubeconfig(dir.path(), cluster, &user);
    let err = Connection::from_kubeconfig(&path).unwrap_err().to_string();
    assert!(
        err.contains("users[u].user.client-key-data: invalid PEM private key"),
        "{err}"
    );
}

#[test]
fn node_names_are_encoded_in_the_selector() {
    assert_eq!(
        encode("spec.nodeName=node-a.b_c~"),
        "spec.nodeName%3Dnode-a.b_c~"
    );
    assert_eq!(encode("a b/&"), "a%20b%2F%26");
    let options = ApiServerOptions::new(None, None).unwrap();
    assert!(!options.node_name.is_empty());
    assert_eq!(options.node_name, options.node_name.to_lowercase());
    let options = ApiServerOptions::new(None, Some("n1".into())).unwrap();
    assert_eq!(options.node_name, "n1");
}

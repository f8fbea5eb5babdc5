use std::time::Instant;

use super::*;

fn spec(uid: &str) -> PodSpec {
    PodSpec {
        uid: uid.into(),
        namespace: "default".into(),
        name: uid.into(),
        resources: None,
        init_containers: vec![],
        containers: vec![],
    }
}

fn watched(origin: SpecOrigin, cache: &Arc<PodCache>) -> Watched {
    Watched {
        origin,
        cache: cache.clone(),
    }
}

#[tokio::test]
async fn the_first_source_that_knows_the_pod_answers_and_is_named() {
    let pods_api = Arc::new(PodCache::default());
    let api = Arc::new(PodCache::default());
    api.insert(spec("a"));
    pods_api.insert(spec("b"));
    let knowledge = Knowledge::Watched(vec![
        watched(SpecOrigin::PodsApi, &pods_api),
        watched(SpecOrigin::ApiServer, &api),
    ]);
    assert_eq!(
        knowledge.spec_of("a").await.unwrap().1,
        SpecOrigin::ApiServer
    );
    assert_eq!(knowledge.spec_of("b").await.unwrap().1, SpecOrigin::PodsApi);
}

#[tokio::test]
async fn an_absent_pods_api_is_not_waited_for_and_one_that_appears_is() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pods-api.sock");
    let cache = Arc::new(PodCache::new(Some(socket.clone())));
    cache.set_link(Link::Absent);
    let knowledge = Knowledge::Watched(vec![watched(SpecOrigin::PodsApi, &cache)]);
    let start = Instant::now();
    assert!(knowledge.spec_of("x").await.is_none());
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "no wait while absent"
    );

    // The kubelet made its socket; the watcher has not looked yet: a pod on its way is waited for.
    std::fs::write(&socket, "").unwrap();
    assert_eq!(cache.link(), Link::Connecting);
    let late = cache.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        late.insert(spec("x"));
    });
    let (got, origin) = knowledge.spec_of("x").await.unwrap();
    assert_eq!((got.uid.as_str(), origin), ("x", SpecOrigin::PodsApi));
}

#[test]
fn a_full_resync_drops_pods_the_stream_no_longer_has() {
    let cache = PodCache::default();
    cache.begin_sync();
    cache.insert(spec("old"));
    cache.insert(spec("kept"));
    assert_eq!(cache.end_sync(), 0);
    // Reconnected: the kubelet lists what it has now; `old` was deleted meanwhile.
    cache.begin_sync();
    cache.insert(spec("kept"));
    assert_eq!(cache.end_sync(), 1);
    assert!(cache.get("old").is_none());
    assert!(cache.get("kept").is_some());
}

#[test]
fn origins_have_the_names_logs_metrics_and_inspect_use() {
    assert_eq!(SpecOrigin::PodsApi.as_str(), "pods-api");
    assert_eq!(SpecOrigin::ApiServer.as_str(), "apiserver");
    assert_eq!(SpecOrigin::Cri.as_str(), "cri");
    assert_eq!(
        serde_json::to_string(&SpecOrigin::ApiServer).unwrap(),
        "\"apiserver\""
    );
}

#[test]
fn creation_times_and_phases_for_the_device_plugin_front() {
    assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(rfc3339_seconds("2026-12-06T03:54:38Z"), Some(1_796_529_278));
    assert_eq!(rfc3339_seconds("2000-02-29T12:00:01Z"), Some(951_825_601));
    assert_eq!(rfc3339_seconds("yesterday"), None);
    assert_eq!(rfc3339_seconds("2026-13-06T03:54:38Z"), None);
    let meta = PodMeta::from_api(Some("2026-12-06T03:54:38Z"), Some("Failed"));
    assert_eq!(meta.created, Some(1_796_529_278));
    assert!(meta.finished);
    assert!(!PodMeta::from_api(None, Some("Pending")).finished);
}

#[test]
fn every_watched_pod_once_best_source_first() {
    let pod = |uid: &str, name: &str| PodSpec {
        uid: uid.into(),
        namespace: "ns".into(),
        name: name.into(),
        resources: None,
        init_containers: Vec::new(),
        containers: Vec::new(),
    };
    let best = Arc::new(PodCache::default());
    let other = Arc::new(PodCache::default());
    best.insert_with(
        pod("a", "from-best"),
        PodMeta {
            created: Some(5),
            finished: false,
        },
    );
    other.insert(pod("a", "from-other"));
    other.insert(pod("b", "only-other"));
    let knowledge = Knowledge::Watched(vec![
        Watched {
            origin: SpecOrigin::PodsApi,
            cache: best,
        },
        Watched {
            origin: SpecOrigin::ApiServer,
            cache: other,
        },
    ]);
    let mut all = knowledge.all_pods();
    all.sort_by(|x, y| x.0.uid.cmp(&y.0.uid));
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].0.name, "from-best");
    assert_eq!(all[0].1.created, Some(5));
    assert_eq!(all[1].0.name, "only-other");
    assert!(Knowledge::CriOnly.all_pods().is_empty());
}

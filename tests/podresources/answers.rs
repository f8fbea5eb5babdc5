//! PodResources v1 over a real unix socket: List/Get/GetAllocatableResources answers, the
//! kubelet's NotFound and rate-limit messages, socket mode and stale-socket replacement, an old
//! client without the pod-level fields, and consistency of List under admit/remove churn.

use numa_shim::testing::podresources::registry as support;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use numa_shim::cpuset::CpuSet;
use numa_shim::listen::{self, SocketOptions};
use numa_shim::podresources::{PodResourcesService, RegistrySource};
use numa_shim::proto::podresources::v1 as pr;
use numa_shim::transport::unix_channel;
use support::*;
use tonic::Code;

fn shared_with_pods() -> Shared {
    let mut r = registry();
    assert!(run(&mut r, plrm_pod("a", 3)));
    assert!(run(&mut r, plrm_pod("b", 4)));
    assert!(run(
        &mut r,
        pod_of("c", None, vec![app("web", burstable(500))])
    ));
    Arc::new(Mutex::new(r))
}

#[tokio::test]
async fn list_get_allocatable_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let shared = shared_with_pods();
    let served = Served::start(dir.path(), shared.clone(), options()).await;
    let mode = std::fs::metadata(&served.path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "root-only socket");
    let mut client = served.client();

    let list = client
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = list.pod_resources.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["name-a", "name-b", "name-c"]);
    let a = &list.pod_resources[0];
    let bubble = ids(&a.cpu_ids);
    assert_eq!(bubble.len(), 3);
    assert_eq!(ids(&a.containers[0].cpu_ids).len(), 2);
    assert!(ids(&a.containers[0].cpu_ids).is_subset(&bubble));
    assert!(a.containers[1].cpu_ids.is_empty());
    assert_eq!(a.memory.len(), 1);
    assert_eq!(a.memory[0].size, 3 * GI);
    assert!(ids(&list.pod_resources[1].cpu_ids).is_disjoint(&bubble));
    assert!(list.pod_resources[2].cpu_ids.is_empty());

    let got = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "name-b".into(),
            pod_namespace: "ns".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_resources
        .unwrap();
    assert_eq!(&got, &list.pod_resources[1], "Get answers what List does");

    let err = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "name-b".into(),
            pod_namespace: "other".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(err.message(), "pod name-b in namespace other not found");

    let alloc = client
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(&alloc.cpu_ids), CpuSet::parse("0-15").unwrap());
    let per_node: Vec<(i64, String, u64)> = alloc
        .memory
        .iter()
        .map(|m| {
            let t = m.topology.as_ref().unwrap();
            (t.nodes[0].id, m.memory_type.clone(), m.size)
        })
        .collect();
    assert_eq!(
        per_node,
        [(0, "memory".into(), 63 * GI), (1, "memory".into(), 63 * GI)]
    );

    // A stopped pod leaves the answers at once.
    support::remove(&mut shared.lock().unwrap(), "a");
    let list = client
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.pod_resources.len(), 2);
    served.stop().await;
}

#[tokio::test]
async fn stale_socket_replaced_live_socket_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/numa-shim.sock");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "stale socket left behind");
    let options = SocketOptions {
        mode: 0o600,
        group: None,
    };
    let live = listen::bind(&path, options).await.unwrap();
    let err = listen::bind(&path, options).await.unwrap_err();
    assert!(err.to_string().contains("another server"), "{err}");
    let inode = live.inode();
    drop(live);
    assert!(
        !listen::remove_if_same(&path, inode + 1),
        "another inode is left alone"
    );
    assert!(listen::remove_if_same(&path, inode));
    assert!(!path.exists());
    std::fs::write(&path, b"not a socket").unwrap();
    let err = listen::bind(&path, options).await.unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
}

#[tokio::test]
async fn rate_limit_answers_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options();
    o.qps = 1;
    o.burst = 3;
    let served = Served::start(dir.path(), shared_with_pods(), o).await;
    let mut client = served.client();
    let mut codes = Vec::new();
    for _ in 0..6 {
        let r = client.list(pr::ListPodResourcesRequest {}).await;
        codes.push(r.err().map(|s| (s.code(), s.message().to_string())));
    }
    assert!(
        codes[..3].iter().all(Option::is_none),
        "burst of 3: {codes:?}"
    );
    for c in &codes[3..] {
        assert_eq!(
            c.as_ref(),
            Some(&(
                Code::ResourceExhausted,
                "rejected by rate limit".to_string()
            ))
        );
    }
    // Every method shares the bucket.
    let e = client
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    served.stop().await;
}

/// PodResources as a client built before fields 4 and 5 existed sees it.
mod old {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesRequest {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodResourcesResponse {
        #[prost(message, repeated, tag = "1")]
        pub pod_resources: Vec<PodResources>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub namespace: String,
        #[prost(message, repeated, tag = "3")]
        pub containers: Vec<ContainerResources>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerResources {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(int64, repeated, tag = "3")]
        pub cpu_ids: Vec<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetPodResourcesRequest {
        #[prost(string, tag = "1")]
        pub pod_name: String,
        #[prost(string, tag = "2")]
        pub pod_namespace: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GetPodResourcesResponse {
        #[prost(message, optional, tag = "1")]
        pub pod_resources: Option<PodResources>,
    }
}

#[tokio::test]
async fn old_client_without_pod_level_fields_parses_every_answer() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), shared_with_pods(), options()).await;
    let mut new = served.client();
    let want = new
        .list(pr::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(want
        .pod_resources
        .iter()
        .any(|p| !p.cpu_ids.is_empty() && !p.memory.is_empty()));

    let mut grpc = tonic::client::Grpc::new(unix_channel(&served.path));
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
    let codec = tonic_prost::ProstCodec::<
        old::ListPodResourcesRequest,
        old::ListPodResourcesResponse,
    >::default();
    let got = grpc
        .unary(
            tonic::Request::new(old::ListPodResourcesRequest {}),
            path,
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.len(), want.pod_resources.len());
    for (o, n) in got.pod_resources.iter().zip(&want.pod_resources) {
        assert_eq!((&o.name, &o.namespace), (&n.name, &n.namespace));
        let old_c: Vec<(&str, &[i64])> = o
            .containers
            .iter()
            .map(|c| (c.name.as_str(), &c.cpu_ids[..]))
            .collect();
        let new_c: Vec<(&str, &[i64])> = n
            .containers
            .iter()
            .map(|c| (c.name.as_str(), &c.cpu_ids[..]))
            .collect();
        assert_eq!(old_c, new_c);
    }

    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/Get");
    let codec = tonic_prost::ProstCodec::<old::GetPodResourcesRequest, old::GetPodResourcesResponse>::default();
    let req = old::GetPodResourcesRequest {
        pod_name: "name-a".into(),
        pod_namespace: "ns".into(),
    };
    let got = grpc
        .unary(tonic::Request::new(req), path, codec)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod_resources.unwrap().containers.len(), 2);
    served.stop().await;
}

/// Checks one List answer: bubbles pairwise disjoint, exclusive slices pairwise disjoint and
/// inside their own pod's bubble, never inside another pod's.
fn check_consistent(list: &pr::ListPodResourcesResponse) -> Result<(), String> {
    let mut bubbles = CpuSet::new();
    let mut slices = CpuSet::new();
    for p in &list.pod_resources {
        let bubble = ids(&p.cpu_ids);
        if !bubble.is_disjoint(&bubbles) {
            return Err(format!("{}: bubble {bubble} overlaps another pod", p.name));
        }
        for c in &p.containers {
            let slice = ids(&c.cpu_ids);
            if !slice.is_disjoint(&slices) {
                return Err(format!(
                    "{}/{}: slice {slice} granted twice",
                    p.name, c.name
                ));
            }
            if !bubble.is_empty() && !slice.is_subset(&bubble) {
                return Err(format!(
                    "{}/{}: slice {slice} outside bubble {bubble}",
                    p.name, c.name
                ));
            }
            slices = slices.union(&slice);
        }
        bubbles = bubbles.union(&bubble);
    }
    // An exclusive slice of a pod without a bubble must not sit in another pod's bubble.
    for p in list.pod_resources.iter().filter(|p| p.cpu_ids.is_empty()) {
        for c in &p.containers {
            if !ids(&c.cpu_ids).is_disjoint(&bubbles) {
                return Err(format!(
                    "{}/{}: slice inside another pod's bubble",
                    p.name, c.name
                ));
            }
        }
    }
    Ok(())
}

/// Admits and removes pods on another thread through the placer (as the hook does) while List
/// answers keep coming; every answer must be consistent and answers must follow the changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_stays_consistent_during_admit_remove_churn() {
    let dir = tempfile::tempdir().unwrap();
    let placer = support::placer(registry(), dir.path());
    let service = Arc::new(PodResourcesService::new(placer.clone(), &options()));
    let done = Arc::new(AtomicBool::new(false));
    let churn = {
        let (placer, done) = (placer.clone(), done.clone());
        std::thread::spawn(move || {
            let mut live: Vec<String> = Vec::new();
            let mut admitted = 0usize;
            for i in 0..3000u64 {
                let uid = format!("p{i}");
                let spec = match i % 3 {
                    0 => plrm_pod(&uid, 2 + i % 3),
                    1 => pod_of(&uid, None, vec![app("solo", guaranteed(1000, GI))]),
                    _ => pod_of(&uid, None, vec![app("web", burstable(200))]),
                };
                let mut r = placer.registry();
                if run(&mut r, spec) {
                    admitted += 1;
                    live.push(uid);
                }
                if live.len() > 6 || (i % 5 == 0 && !live.is_empty()) {
                    let victim = live.remove((i as usize * 7) % live.len());
                    support::remove(&mut r, &victim);
                }
            }
            done.store(true, Ordering::SeqCst);
            admitted
        })
    };
    let mut lists = 0usize;
    let mut nonempty = 0usize;
    while !done.load(Ordering::SeqCst) {
        let list = service.list_pods().await.unwrap();
        if let Err(e) = check_consistent(&list) {
            panic!("inconsistent List after {lists} lists: {e}\n{list:?}");
        }
        lists += 1;
        nonempty += usize::from(list.pod_resources.iter().any(|p| !p.cpu_ids.is_empty()));
        tokio::task::yield_now().await;
    }
    let admitted = churn.join().unwrap();
    assert!(admitted > 1000, "churn admitted only {admitted}");
    assert!(
        lists > 10 && nonempty > 0,
        "lists {lists}, with bubbles {nonempty}"
    );
    // After the churn the published answer is exactly what a fresh capture gives.
    let fresh = numa_shim::podresources::list_response(
        &placer.with_registry(numa_shim::podresources::Snapshot::capture),
    );
    assert_eq!(service.list_pods().await.unwrap(), fresh);
}

/// The published answer is reused while nothing changes and rebuilt after any change.
#[tokio::test]
async fn published_answer_follows_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let placer = support::placer(registry(), dir.path());
    let service = PodResourcesService::new(placer.clone(), &options());
    assert!(run(&mut placer.registry(), plrm_pod("a", 3)));
    let first = service.current_list();
    let same = |a: &bytes::Bytes, b: &bytes::Bytes| a.as_ptr() == b.as_ptr() && a.len() == b.len();
    assert!(
        same(&first, &service.current_list()),
        "unchanged registry: the published bytes themselves"
    );
    let _ = placer.registry().pods().len(); // a read does not invalidate
    assert!(same(&first, &service.current_list()));
    assert!(run(&mut placer.registry(), plrm_pod("b", 2)));
    let second = service.current_list();
    assert!(!same(&first, &second));
    assert_eq!(decode(&second).pod_resources.len(), 2);
    support::remove(&mut placer.registry(), "a");
    assert_eq!(decode(&service.current_list()).pod_resources.len(), 1);
}

/// A framed `List` answer decoded.
fn decode(framed: &bytes::Bytes) -> pr::ListPodResourcesResponse {
    assert_eq!(framed[0], 0, "uncompressed");
    let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, framed.len() - 5, "length prefix");
    prost::Message::decode(&framed[5..]).unwrap()
}

/// After each change the rebuilt answer equals a full capture, and only the pods whose registry
/// revision moved were copied again.
#[tokio::test]
async fn rebuild_copies_only_changed_pods_and_matches_a_full_capture() {
    use numa_shim::podresources::{list_response, Snapshot};
    let dir = tempfile::tempdir().unwrap();
    let placer = support::placer(registry(), dir.path());
    let service = PodResourcesService::new(placer.clone(), &options());
    let check = |step: &str| {
        let fresh = list_response(&placer.with_registry(Snapshot::capture));
        assert_eq!(decode(&service.current_list()), fresh, "after {step}");
    };
    // Revisions as the cache holds them after the previous step.
    let revisions = |placer: &Arc<numa_shim::lifecycle::Placer>| -> Vec<(String, u64)> {
        placer.with_registry(|r| {
            r.pods()
                .iter()
                .filter(|(_, p)| p.active)
                .map(|(uid, _)| (uid.clone(), r.revision(uid)))
                .collect()
        })
    };
    let copied_since = |before: &[(String, u64)]| -> Vec<String> {
        let known = |uid: &str, rev: u64| before.iter().any(|(u, r)| u == uid && *r == rev);
        placer
            .with_registry(|r| Snapshot::capture_changed(r, &known))
            .into_iter()
            .filter(|p| p.entry.is_some())
            .map(|p| p.uid)
            .collect()
    };

    for (i, uid) in ["a", "b", "c", "d"].into_iter().enumerate() {
        assert!(run(&mut placer.registry(), plrm_pod(uid, 2 + i as u64 % 2)));
    }
    assert!(run(
        &mut placer.registry(),
        pod_of("solo", None, vec![app("web", burstable(200))])
    ));
    check("admitting five pods");

    let before = revisions(&placer);
    assert!(run(
        &mut placer.registry(),
        pod_of("e", None, vec![app("x", guaranteed(1000, GI))])
    ));
    assert_eq!(copied_since(&before), ["e"], "one pod admitted");
    check("admitting one more");

    let before = revisions(&placer);
    support::remove(&mut placer.registry(), "b");
    assert!(
        copied_since(&before).is_empty(),
        "a removed pod is only dropped"
    );
    check("removing one");

    let before = revisions(&placer);
    placer.registry().remove_container("c-excl");
    assert_eq!(copied_since(&before), ["c"], "one container removed");
    check("removing a container");

    let before = revisions(&placer);
    let stopped = {
        let mut r = placer.registry();
        r.stop_sandbox("sb-d");
        r.pods().get("d").is_some_and(|p| !p.active)
    };
    assert!(stopped);
    assert!(
        copied_since(&before).is_empty(),
        "a stopped pod is not listed"
    );
    check("stopping a pod");

    // A restore changes every pod: all are copied again.
    let snapshot = placer.registry().snapshot();
    let before = revisions(&placer);
    placer.registry().restore(snapshot).unwrap();
    let mut all: Vec<String> = before.iter().map(|(u, _)| u.clone()).collect();
    all.sort();
    assert_eq!(copied_since(&before), all, "restore");
    check("restoring the checkpoint");
}

#[test]
fn check_consistent_can_fail() {
    let c = |name: &str, cpus: Vec<i64>| pr::ContainerResources {
        name: name.into(),
        cpu_ids: cpus,
        ..Default::default()
    };
    let p = |name: &str, cpus: Vec<i64>, containers| pr::PodResources {
        name: name.into(),
        cpu_ids: cpus,
        containers,
        ..Default::default()
    };
    let overlap = pr::ListPodResourcesResponse {
        pod_resources: vec![p("a", vec![0, 1], vec![]), p("b", vec![1, 2], vec![])],
    };
    assert!(check_consistent(&overlap).is_err());
    let outside = pr::ListPodResourcesResponse {
        pod_resources: vec![p("a", vec![0, 1], vec![c("x", vec![2])])],
    };
    assert!(check_consistent(&outside).is_err());
    let stolen = pr::ListPodResourcesResponse {
        pod_resources: vec![
            p("a", vec![0, 1], vec![]),
            p("b", vec![], vec![c("x", vec![1])]),
        ],
    };
    assert!(check_consistent(&stolen).is_err());
    let fine = pr::ListPodResourcesResponse {
        pod_resources: vec![
            p("a", vec![0, 1], vec![c("x", vec![1])]),
            p("b", vec![], vec![c("y", vec![3])]),
        ],
    };
    assert!(check_consistent(&fine).is_ok());
}

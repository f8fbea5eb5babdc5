//! The restart matrix on the real containerd: {clean stop, kill -9} × {checkpoint good,
//! lagging, missing, corrupt, refused} × {pool moved or not}. The pod is the demo's mixed pod inferred
//! from CRI alone with the machine's two CPUs as its budget and no reservation (so the shared
//! pool is empty, which the kubelet's own check refuses): `main` holds one exclusive CPU, two
//! sidecars share the other. "Pool moved": the sidecars were created first, on the whole
//! budget, and moved when main took its slice, so their create-time `numa-shim.io/cpus`
//! annotation is stale. After every restart, for three drift periods, no sidecar runs on main's
//! CPU (read from cgroupfs), main never moves, and `/placement` and PodResources show the same
//! pod as before the first restart.

use std::path::Path;
use std::time::{Duration, Instant};

use numa_shim::cpuset::CpuSet;
use numa_shim::proto::podresources::v1 as podres;
use numa_shim::proto::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use numa_shim::state::Checkpoint;

use crate::support::*;

#[derive(Debug, Clone, Copy)]
enum Stop {
    Clean,
    Kill,
}

#[derive(Debug, Clone, Copy)]
enum Kept {
    Good,
    /// Only the decisions are in it, none of what the runtime did with them (no sandbox id, no
    /// container): what a crash leaves if it comes after the runtime answered but before the
    /// state writer recorded the answers, for every call at once.
    Lagging,
    Missing,
    Corrupt,
    /// Readable, but its memory table does not add up on this machine: refused as a whole.
    Refused,
}

const CHECKPOINT: &str = "numa-shim-state.json";

fn damage(state: &Path, kept: Kept) {
    let path = state.join(CHECKPOINT);
    match kept {
        Kept::Good => {}
        Kept::Lagging => {
            let checkpoint = Checkpoint::new(state, CHECKPOINT);
            let mut value: serde_json::Value = checkpoint.read().unwrap().unwrap();
            for pod in value["pods"].as_object_mut().unwrap().values_mut() {
                pod["sandbox_id"] = serde_json::Value::Null;
            }
            value["containers"] = serde_json::json!({});
            checkpoint.write(&value).unwrap();
        }
        Kept::Missing => std::fs::remove_file(&path).unwrap(),
        Kept::Corrupt => {
            let text = std::fs::read(&path).unwrap();
            std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        }
        Kept::Refused => {
            let checkpoint = Checkpoint::new(state, CHECKPOINT);
            let mut value: serde_json::Value = checkpoint.read().unwrap().unwrap();
            let free = &mut value["node"]["memory"]["machine"]["0"]["memory"]["memory"]["free"];
            *free = serde_json::json!(free.as_u64().unwrap() + MI);
            checkpoint.write(&value).unwrap();
        }
    }
}

/// The pod as `/placement` shows it.
async fn placement_of(metrics: &'static str, name: &str) -> serde_json::Value {
    let body = tokio::task::spawn_blocking(move || http_get(metrics, "/placement"))
        .await
        .unwrap();
    let view: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    view["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in /placement: {body}"))
}

/// The pod as PodResources `Get` answers it.
async fn pod_resources_of(socket: &Path, name: &str) -> podres::PodResources {
    let mut client = PodResourcesListerClient::new(numa_shim::transport::unix_channel(socket));
    client
        .get(podres::GetPodResourcesRequest {
            pod_name: name.into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("PodResources Get {name}: {e:?}"))
        .into_inner()
        .pod_resources
        .unwrap()
}

/// For three drift periods: main stays on `slice`, no other container touches it.
async fn never_shared(cri: &Cri, main: &str, others: &[&str], slice: &CpuSet, case: &str) {
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let m = cri.applied(main).await;
        assert_eq!(&m.cpus, slice, "{case}: main moved");
        for id in others {
            let r = cri.applied(id).await;
            assert!(
                r.cpus.is_disjoint(slice) && r.cpus_allowed.is_disjoint(slice),
                "{case}: a sidecar runs on main's exclusive cpu {slice}: {r:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn matrix(moved: bool) {
    let env = Env::get();
    let name = if moved {
        "matrix-moved"
    } else {
        "matrix-still"
    };
    let metrics = free_metrics_address();
    let podres = env.run.join(format!("{name}-podres.sock"));
    let podres_arg = podres.display().to_string();
    let extra = [
        "--pod-knowledge",
        "cri",
        "--metrics-address",
        metrics,
        "--pod-resources-socket",
        podres_arg.as_str(),
        "--kubelet-pod-resources-socket",
        "none",
    ];
    let mut shim = Shim::start(&env, name, POD_SCOPE, &extra).await;
    // The log file outlives a run (IT_RUN is kept until teardown): look at this run's part.
    let log_from = shim.log_text().len();
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new(name, resources(Some(2000), Some(2000), Some(256 * MI)));
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let pod_limits = resources(None, Some(2000), Some(256 * MI));
    let exclusive = resources(Some(1000), Some(1000), Some(128 * MI));
    let mut ids = std::collections::BTreeMap::new();
    let order: &[&str] = if moved {
        &["proxy", "logs", "main"]
    } else {
        &["main", "proxy", "logs"]
    };
    for c in order {
        let r = if *c == "main" {
            exclusive.clone()
        } else {
            pod_limits.clone()
        };
        let id = cri
            .start_container(&env, &pod, &sandbox, c, r)
            .await
            .unwrap();
        ids.insert(*c, id);
    }
    let main = ids["main"].clone();
    let slice = cri.applied(&main).await.cpus;
    assert_eq!(slice.len(), 1);
    let rest = CpuSet::parse("0-1").unwrap().difference(&slice).to_string();
    for c in ["proxy", "logs"] {
        let r = cri.wait_cpus(&ids[c], &rest).await;
        assert_eq!(
            r.cpus.to_string(),
            rest,
            "{c} runs on the pod's shared pool"
        );
    }
    let others = [ids["proxy"].as_str(), ids["logs"].as_str()];
    let before = (
        placement_of(metrics, name).await,
        pod_resources_of(&podres, name).await,
    );
    assert_eq!(
        before.0["containers"].as_array().unwrap().len(),
        3,
        "{}",
        before.0
    );

    for stop in [Stop::Clean, Stop::Kill] {
        for kept in [
            Kept::Good,
            Kept::Lagging,
            Kept::Missing,
            Kept::Corrupt,
            Kept::Refused,
        ] {
            let case = format!("pool moved {moved}, {stop:?}, checkpoint {kept:?}");
            match stop {
                Stop::Clean => shim.terminate(),
                Stop::Kill => shim.kill9(),
            }
            damage(&shim.state_dir, kept);
            shim.start_again().await;
            never_shared(&cri, &main, &others, &slice, &case).await;
            assert_eq!(
                placement_of(metrics, name).await,
                before.0,
                "{case}: /placement; log:\n{}",
                shim.log_text()
            );
            assert_eq!(
                pod_resources_of(&podres, name).await,
                before.1,
                "{case}: PodResources"
            );
            let log = shim.log_text();
            let restored = log[log_from..]
                .matches("rebuilding state from the runtime")
                .count();
            eprintln!("{case}: ok ({restored} rebuilds so far)");
        }
    }
    assert!(
        !shim.log_text()[log_from..].contains("default cpuset cannot be empty"),
        "numa-shim refused its own checkpoint"
    );
}

#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn restart_matrix_with_the_pool_moved() {
    let _serial = SERIAL.lock().await;
    matrix(true).await;
}

#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn restart_matrix_with_the_pool_in_place() {
    let _serial = SERIAL.lock().await;
    matrix(false).await;
}

//! numa-shim's own state on bad days, on the real containerd: a full state directory (a small
//! tmpfs this test mounts under the harness's IT_RUN; the harness's teardown unmounts it too
//! if the test dies) refuses placements that need a new checkpoint file (the first write after
//! a start) before anything reaches containerd, and recovers by itself once there is space
//! again. Writes into the slots of the file already made need no space and go on.

use std::time::{Duration, Instant};

use numa_shim::testing::tmpfs::Tmpfs;

use crate::support::*;

/// Waits until `/readyz` answers `want`; returns the body.
pub async fn wait_readyz(addr: &str, want: u16, shim: &Shim) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = numa_shim::testing::http_get(addr, "/readyz");
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {status} {body:?}, wanted {want}; log:\n{}",
            shim.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn a_full_state_dir_refuses_pods_before_containerd_sees_them_and_recovers() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let tmpfs = Tmpfs::mount(&env.run.join("shim-statefull/state"), "256k");
    let metrics = free_metrics_address();
    let extra = ["--pod-knowledge", "cri", "--metrics-address", metrics];
    let mut shim = Shim::start(&env, "statefull", POD_SCOPE, &extra).await;
    let cri = shim.cri().await;
    let mut cleanup = Cleanup::new(&env);
    wait_readyz(metrics, 200, &shim).await;

    let exclusive = || resources(Some(1000), Some(1000), Some(128 * MI));
    let first = PodDef::new("first-full", exclusive());
    let sb1 = cri.run_pod(&env, &first).await.unwrap();
    cleanup.sandboxes.push(sb1.clone());
    let c1 = cri
        .start_container(&env, &first, &sb1, "c", exclusive())
        .await
        .unwrap();
    let r1 = cri.applied(&c1).await;

    let filler = tmpfs.fill();
    let roomy = PodDef::new("roomy-full", exclusive());
    let sb = cri.run_pod(&env, &roomy).await.unwrap();
    cleanup.sandboxes.push(sb.clone());
    cri.stop_pod(&sb).await.unwrap();
    cri.remove_pod(&sb).await.unwrap();

    shim.restart().await;
    let cri = shim.cri().await;
    let second = PodDef::new("second-full", exclusive());
    let err = cri.run_pod(&env, &second).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("No space left on device")
            && err.message().contains(&tmpfs.path.display().to_string()),
        "{}",
        err.message()
    );
    assert!(
        cri.sandboxes_of(&second.uid).await.is_empty(),
        "containerd never saw the refused pod"
    );
    let why = wait_readyz(metrics, 503, &shim).await;
    assert!(why.contains("No space left on device"), "{why}");

    std::fs::remove_file(&filler).unwrap();
    wait_readyz(metrics, 200, &shim).await;
    let sb2 = cri.run_pod(&env, &second).await.unwrap();
    cleanup.sandboxes.push(sb2.clone());
    let c2 = cri
        .start_container(&env, &second, &sb2, "c", exclusive())
        .await
        .unwrap();
    let r2 = cri.applied(&c2).await;
    assert_eq!(r2.cpus.len(), 1);
    assert!(r2.cpus.is_disjoint(&r1.cpus), "{r1:?} {r2:?}");
    drop(shim);
}

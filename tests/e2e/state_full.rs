//! numa-shim fails closed on state: when the checkpoint cannot be written (a full or a
//! read-only state directory, on a real tmpfs this test mounts and removes), placements are
//! refused with a status that names the path and the reason, nothing reaches the runtime,
//! `/readyz` says why it is not ready, and everything recovers by itself once the disk does.
//! A full disk refuses only writes that need a new checkpoint file (the first of a process, or
//! one that outgrows its slot): a write into the slots of the file already made needs no space.
//! `numa-shim serve` (the binary) runs in front of the in-process fake runtime. Needs root (for
//! `mount`), as the whole test suite does.

use numa_shim::testing::e2e as support;

use std::path::Path;
use std::time::{Duration, Instant};

use numa_shim::proto::cri::v1 as cri;
use numa_shim::testing::process::ShimProcess;
use numa_shim::testing::tmpfs::Tmpfs;
use support::harness::{fixture, kubelet_yaml, Kubelet};
use support::kubelet::{pod_def, PodDef, Res, GI};
use support::runtime::{Fake, Runtime};
use tonic::Code;

/// `numa-shim serve` with its state on `state` and its metrics on a free loopback port.
struct Serve {
    process: ShimProcess,
    metrics: String,
}

impl Serve {
    async fn start(dir: &Path, state: &Path, runtime: &Path) -> Self {
        let mut serve = Self::spawn(dir, state, runtime);
        serve.wait_ready(true).await;
        serve
    }

    /// Starts the process without waiting for it to be ready.
    fn spawn(dir: &Path, state: &Path, runtime: &Path) -> Self {
        let machine = dir.join("machine.json");
        std::fs::write(&machine, fixture("topoDualSocketHT").to_json().unwrap()).unwrap();
        let config = dir.join("kubelet.yaml");
        std::fs::write(&config, kubelet_yaml("single-numa-node", "pod", "")).unwrap();
        let port = numa_shim::testing::free_port();
        let metrics = format!("127.0.0.1:{port}");
        let listen = dir.join("shim.sock");
        let extra = [
            "--pod-knowledge",
            "cri",
            "--pod-resources-socket",
            "none",
            "--metrics-address",
            &metrics,
        ];
        let process = ShimProcess::spawn(
            Path::new(env!("CARGO_BIN_EXE_numa-shim")),
            crate::serve_args(&listen, runtime, &machine, &config, state, &extra),
            &listen,
            &dir.join("serve.log"),
        );
        Self { process, metrics }
    }

    fn listen(&self) -> &Path {
        self.process.socket()
    }

    /// Fails the test if the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.process.exited() {
            panic!("serve exited: {status}\n{}", self.process.log_text());
        }
    }

    /// Waits until `/readyz` answers at all (ready or not) and the CRI socket is there.
    async fn wait_answering(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(self.get("/readyz").0 != 0 && self.listen().exists()) {
            self.assert_running();
            assert!(
                Instant::now() < deadline,
                "no answer; log:\n{}",
                self.process.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `(status, body)` of `GET path`.
    fn get(&self, path: &str) -> (u16, String) {
        numa_shim::testing::http_get(&self.metrics, path)
    }

    /// Waits until `/readyz` answers 200 (`ready`) or 503; returns the body.
    async fn wait_ready(&mut self, ready: bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.assert_running();
            let (status, body) = self.get("/readyz");
            if (ready && status == 200) || (!ready && status == 503 && self.listen().exists()) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz stayed {status} {body:?} (wanted ready={ready}); log:\n{}",
                self.process.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn guaranteed(name: &str) -> PodDef {
    pod_def(name).container("main", Res::guaranteed(2000, GI))
}

/// The refusal names the checkpoint path and the reason, and says nothing was placed.
fn assert_refused(err: &tonic::Status, code: Code, reason: &str, state: &Path) {
    assert_eq!(err.code(), code, "{err:?}");
    let message = err.message();
    assert!(message.contains(reason), "{message}");
    assert!(
        message.contains(&state.display().to_string()),
        "names the path: {message}"
    );
    assert!(message.contains("nothing was placed"), "{message}");
}

fn sandboxes_named(fake: &Fake, name: &str) -> usize {
    fake.state()
        .sandbox_requests
        .iter()
        .filter(|r| {
            r.config
                .as_ref()
                .and_then(|c| c.metadata.as_ref())
                .is_some_and(|m| m.name == name)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_or_read_only_state_dir_refuses_placements_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let tmpfs = Tmpfs::mount(&state, "256k");
    let runtime = Runtime::start(&dir.path().join("runtime.sock"), Fake::default()).await;
    let fake = runtime.fake.clone();
    let serve = Serve::start(dir.path(), &state, &runtime.path).await;
    let kubelet = Kubelet::connect(serve.listen()).await;
    let first = kubelet.start_pod(&guaranteed("first")).await.unwrap();

    // Full: a write into the checkpoint's slots needs no space, so placements go on.
    let filler = tmpfs.fill();
    let roomy = kubelet.start_pod(&guaranteed("roomy")).await.unwrap();
    assert_eq!(sandboxes_named(&fake, "roomy"), 1);
    // After a restart the first write makes a new file: the next admission cannot be recorded.
    drop(serve);
    let mut serve = Serve::spawn(dir.path(), &state, &runtime.path);
    serve.wait_answering().await;
    let kubelet = Kubelet::connect(serve.listen()).await;
    let err = kubelet
        .run_sandbox(&guaranteed("second"))
        .await
        .unwrap_err();
    assert_refused(
        &err,
        Code::ResourceExhausted,
        "No space left on device",
        &state,
    );
    assert_eq!(
        sandboxes_named(&fake, "second"),
        0,
        "nothing reached the runtime"
    );
    let why = serve.wait_ready(false).await;
    assert!(
        why.contains("No space left on device"),
        "/readyz says why: {why:?}"
    );
    let (_, placement) = serve.get("/placement");
    assert!(!placement.contains("second"), "rolled back: {placement}");
    // What the runtime does in reply is still answered as the runtime answered.
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(
        support::harness::channel(serve.listen()).await,
    );
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: first.sandbox.clone(),
        })
        .await
        .expect("a release the runtime did is answered as the runtime answered");

    // Space again: ready without a restart, and the pod is placed on its next attempt.
    std::fs::remove_file(&filler).unwrap();
    serve.wait_ready(true).await;
    kubelet.start_pod(&guaranteed("second")).await.unwrap();

    // Read-only: refused as unavailable, then recovered the same way.
    tmpfs.remount("ro");
    let err = kubelet.run_sandbox(&guaranteed("third")).await.unwrap_err();
    assert_refused(&err, Code::Unavailable, "Read-only file system", &state);
    assert_eq!(sandboxes_named(&fake, "third"), 0);
    let why = serve.wait_ready(false).await;
    assert!(why.contains("Read-only file system"), "{why:?}");
    tmpfs.remount("rw");
    serve.wait_ready(true).await;
    kubelet.start_pod(&guaranteed("third")).await.unwrap();
    let (_, placement) = serve.get("/placement");
    assert!(
        placement.contains("\"roomy\"")
            && placement.contains("\"second\"")
            && placement.contains("\"third\""),
        "{placement}"
    );
    assert!(!roomy.sandbox.is_empty());
    drop(serve);
    runtime.stop().await;
}

/// An inferred pod grows at CreateContainer: that decision is written before the container is
/// created, so a full disk refuses the container (nothing created) when that write must make a
/// new file (the first after a restart), and the kubelet's retry succeeds once the disk has space
/// again. In-process relay and placement, fake runtime.
#[tokio::test]
async fn a_container_whose_decision_cannot_be_recorded_is_not_created() {
    use support::harness::{Setup, Shim};
    let dir = tempfile::tempdir().unwrap();
    let tmpfs = Tmpfs::mount(&dir.path().join("state"), "256k");
    let setup = Setup::new("topoDualSocketHT", "single-numa-node", "pod");
    let shim = Shim::start(dir.path(), &setup).await;
    let kubelet = shim.kubelet().await;
    let def = pod_def("grows")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("helper", Res::default())
        .container("main", Res::guaranteed(2000, GI));
    let sandbox = kubelet.run_sandbox(&def).await.unwrap();
    let helper = kubelet.create(&def, &sandbox, "helper").await.unwrap();

    let filler = tmpfs.fill();
    let shim = Shim::start_with(dir.path(), &setup, shim.stop().await).await;
    let kubelet = shim.kubelet().await;
    let err = kubelet.create(&def, &sandbox, "main").await.unwrap_err();
    assert_refused(
        &err,
        Code::ResourceExhausted,
        "No space left on device",
        &tmpfs.path,
    );
    assert_eq!(
        shim.fake().state().containers.len(),
        1,
        "main was not created"
    );
    let problem = shim.started.placer.state_problem().expect("not ready");
    assert!(problem.contains("No space left on device"), "{problem}");

    std::fs::remove_file(&filler).unwrap();
    let main = kubelet.create(&def, &sandbox, "main").await.unwrap();
    assert_eq!(shim.started.placer.state_problem(), None);
    let main_cpus = shim.fake().resources(&main).cpuset_cpus;
    shim.eventually("the helper leaves main's slice", |f| {
        let h = numa_shim::cpuset::CpuSet::parse(&f.resources(&helper).cpuset_cpus).unwrap();
        h.is_disjoint(&numa_shim::cpuset::CpuSet::parse(&main_cpus).unwrap())
    })
    .await;
}

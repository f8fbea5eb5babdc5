//! Real-runtime test support: numa-shim processes in front of the harness's private runtime
//! (containerd or CRI-O), a kubelet-shaped CRI client, the fake kubelet Pods API
//! (tests/support/pods_api.rs), and what the kernel applied.
//!
//! The harness (integration/test-all.sh, integration/runtime-suite.sh) starts the runtime and
//! exports NUMA_SHIM_IT_* variables; these tests are `#[ignore]`d so a plain `cargo test` without
//! a runtime does not run them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use numa_shim::cgroup::{Host, Reading};
use numa_shim::lifecycle::runtime::pid_of;
use numa_shim::proto::cri::v1 as cri;
use numa_shim::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use numa_shim::proto::podsapi::core_v1;
use numa_shim::testing::process::{serve_args, ShimProcess};
use numa_shim::transport::unix_channel;
use tonic::transport::Channel;

/// One test at a time: they share the machine's two CPUs.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The harness's environment.
#[derive(Debug, Clone)]
pub struct Env {
    /// The runtime's CRI socket (containerd's or CRI-O's; the variable keeps its first name).
    pub containerd: PathBuf,
    /// `containerd` or `crio` (NUMA_SHIM_IT_RUNTIME; the harness's IT_RUNTIME).
    pub runtime: String,
    pub image: String,
    pub run: PathBuf,
    pub cgroup_parent: String,
    pub crictl: PathBuf,
}

impl Env {
    /// The harness's environment, with whatever pods an earlier test left on the runtime removed
    /// (said on stderr): call it before starting the test's numa-shim.
    pub fn get() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is not set: run integration/test-all.sh"))
        };
        let env = Self {
            containerd: var("NUMA_SHIM_IT_CONTAINERD").into(),
            runtime: std::env::var("NUMA_SHIM_IT_RUNTIME").unwrap_or_else(|_| "containerd".into()),
            image: var("NUMA_SHIM_IT_BUSYBOX_IMAGE"),
            run: var("NUMA_SHIM_IT_RUN").into(),
            cgroup_parent: var("NUMA_SHIM_IT_CGROUP_PARENT"),
            crictl: var("NUMA_SHIM_IT_CRICTL").into(),
        };
        let earlier = runtime_sandboxes(&env);
        if !earlier.is_empty() {
            eprintln!("removing the pods an earlier test left on the runtime: {earlier:?}");
        }
        let left = remove_sandboxes(&env, &earlier);
        assert!(
            left.is_empty(),
            "pods an earlier test left on the runtime cannot be removed: {left:?}"
        );
        env
    }
}

/// Resource-manager settings every test starts from (pod scope, static CPU and memory).
pub const POD_SCOPE: &str = "cpuManagerPolicy: static
reservedSystemCPUs: \"\"
topologyManagerPolicy: best-effort
topologyManagerScope: pod
memoryManagerPolicy: Static
reservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]
";

/// A numa-shim process (the one launcher, `testing::process`, with this suite's flags).
pub struct Shim {
    process: ShimProcess,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
}

impl Shim {
    /// Starts `numa-shim serve` named `name` with `settings` (YAML) and extra flags.
    pub async fn start(env: &Env, name: &str, settings: &str, extra: &[&str]) -> Self {
        let dir = env.run.join(format!("shim-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("config.yaml");
        std::fs::write(&config, settings).unwrap();
        let socket = dir.join("cri.sock");
        let state_dir = dir.join("state");
        let (config, state) = (
            config.display().to_string(),
            state_dir.display().to_string(),
        );
        let mut args = serve_args(
            &socket,
            &env.containerd,
            &[
                "--config",
                &config,
                "--state-dir",
                &state,
                "--drift-period",
                "1s",
            ],
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        let bin = Path::new(env!("CARGO_BIN_EXE_numa-shim"));
        let process = ShimProcess::start(bin, args, &socket, &dir.join("numa-shim.log")).await;
        Self {
            process,
            socket,
            state_dir,
        }
    }

    /// Starts numa-shim taking pod specs from a fake kubelet Pods API served for it.
    pub async fn with_pods_api(env: &Env, name: &str, settings: &str) -> (Self, FakePodsApi) {
        Self::with_pods_api_and(env, name, settings, &[]).await
    }

    /// The same, with more `serve` flags.
    pub async fn with_pods_api_and(
        env: &Env,
        name: &str,
        settings: &str,
        extra: &[&str],
    ) -> (Self, FakePodsApi) {
        let api = FakePodsApi::default();
        let socket = env.run.join(format!("pods-api-{name}.sock"));
        api.serve(&socket);
        let socket = socket.display().to_string();
        let mut args = vec![
            "--pod-knowledge",
            "pods-api",
            "--pods-api-socket",
            socket.as_str(),
        ];
        args.extend_from_slice(extra);
        let shim = Self::start(env, name, settings, &args).await;
        (shim, api)
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// SIGTERM, and waits for the process to exit (a clean stop).
    pub fn terminate(&mut self) {
        self.process.terminate();
    }

    /// Starts the process again after [`Shim::terminate`] or [`Shim::kill9`].
    pub async fn start_again(&mut self) {
        self.process.start_again().await;
    }

    /// Starts the same process again (same socket, state dir and settings).
    pub async fn restart(&mut self) {
        self.process.restart().await;
    }

    /// The numa-shim process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn log_text(&self) -> String {
        self.process.log_text()
    }

    pub async fn cri(&self) -> Cri {
        Cri::connect(&self.socket).await
    }
}

/// Kubelet-shaped CRI resources for a container or sandbox: (request milli, limit milli, memory).
pub fn resources(
    cpu_request: Option<u64>,
    cpu_limit: Option<u64>,
    memory: Option<u64>,
) -> cri::LinuxContainerResources {
    let shares = cpu_request
        .or(cpu_limit)
        .map_or(2, |m| (m * 1024 / 1000).max(2)) as i64;
    let quota = cpu_limit.map_or(0, |m| (m * 100).max(1000)) as i64;
    cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: memory.unwrap_or(0) as i64,
        oom_score_adj: -997,
        ..Default::default()
    }
}

/// A pod as the kubelet describes it to CRI.
#[derive(Debug, Clone)]
pub struct PodDef {
    pub name: String,
    pub uid: String,
    pub resources: cri::LinuxContainerResources,
}

impl PodDef {
    pub fn new(name: &str, resources: cri::LinuxContainerResources) -> Self {
        Self {
            name: name.into(),
            uid: format!("uid-{name}-{}", std::process::id()),
            resources,
        }
    }

    pub fn config(&self, env: &Env) -> cri::PodSandboxConfig {
        let log_directory = env.run.join("logs").join(&self.uid);
        std::fs::create_dir_all(&log_directory).unwrap();
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: log_directory.display().to_string(),
            labels: HashMap::from([("io.kubernetes.pod.uid".into(), self.uid.clone())]),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/pod{}", env.cgroup_parent, self.uid),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                resources: Some(self.resources.clone()),
                overhead: Some(cri::LinuxContainerResources::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A CRI client (to numa-shim or straight to containerd).
#[derive(Debug, Clone)]
pub struct Cri {
    client: RuntimeServiceClient<Channel>,
}

impl Cri {
    pub async fn connect(socket: &Path) -> Self {
        Self {
            client: RuntimeServiceClient::new(unix_channel(socket)),
        }
    }

    pub async fn version(&self) -> Result<(), tonic::Status> {
        self.client
            .clone()
            .version(cri::VersionRequest::default())
            .await
            .map(|_| ())
    }

    pub async fn run_pod(&self, env: &Env, pod: &PodDef) -> Result<String, tonic::Status> {
        let request = cri::RunPodSandboxRequest {
            config: Some(pod.config(env)),
            runtime_handler: String::new(),
        };
        Ok(self
            .client
            .clone()
            .run_pod_sandbox(request)
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    /// What most tests start: a Guaranteed pod `name` of one CPU and 128 MiB with one container
    /// `c` of the same, its sandbox recorded in `cleanup`. Returns (sandbox id, container id).
    pub async fn one_cpu_pod(
        &self,
        env: &Env,
        name: &str,
        cleanup: &mut Cleanup,
    ) -> (String, String) {
        let one = || resources(Some(1000), Some(1000), Some(128 * MI));
        let pod = PodDef::new(name, one());
        let sandbox = self
            .run_pod(env, &pod)
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e:?}"));
        cleanup.sandboxes.push(sandbox.clone());
        let container = self
            .start_container(env, &pod, &sandbox, "c", one())
            .await
            .unwrap_or_else(|e| panic!("CreateContainer/StartContainer in {name}: {e:?}"));
        (sandbox, container)
    }

    /// Creates and starts a `sleep` container with kubelet-shaped resources.
    pub async fn start_container(
        &self,
        env: &Env,
        pod: &PodDef,
        sandbox: &str,
        name: &str,
        resources: cri::LinuxContainerResources,
    ) -> Result<String, tonic::Status> {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            // The kubelet names the image as the pod spec wrote it, too; CRI-O refuses a
            // container without it ("user specified image not specified").
            image: Some(cri::ImageSpec {
                image: env.image.clone(),
                user_specified_image: env.image.clone(),
                ..Default::default()
            }),
            command: vec!["sleep".into(), "3600".into()],
            log_path: format!("{name}.log"),
            labels: HashMap::from([
                ("io.kubernetes.pod.uid".into(), pod.uid.clone()),
                ("io.kubernetes.container.name".into(), name.into()),
            ]),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(resources),
                ..Default::default()
            }),
            ..Default::default()
        };
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(config),
            sandbox_config: Some(pod.config(env)),
        };
        let id = self
            .client
            .clone()
            .create_container(request)
            .await?
            .into_inner()
            .container_id;
        self.client
            .clone()
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        Ok(id)
    }

    pub async fn update_cpuset(&self, id: &str, cpus: &str) -> Result<(), tonic::Status> {
        self.update(
            id,
            cri::LinuxContainerResources {
                cpuset_cpus: cpus.into(),
                ..Default::default()
            },
        )
        .await
    }

    /// Sets the container's CFS quota alone (every other field zero: kept).
    pub async fn update_quota(&self, id: &str, quota: i64) -> Result<(), tonic::Status> {
        self.update(
            id,
            cri::LinuxContainerResources {
                cpu_quota: quota,
                ..Default::default()
            },
        )
        .await
    }

    /// An in-place resize as the kubelet's CPU pass sends it: UpdateContainerResources with
    /// the CRI values of a Guaranteed container of `cpu_milli` and `memory` bytes.
    pub async fn resize(&self, id: &str, cpu_milli: u64, memory: u64) -> Result<(), tonic::Status> {
        self.update(
            id,
            resources(Some(cpu_milli), Some(cpu_milli), Some(memory)),
        )
        .await
    }

    /// UpdateContainerResources with `linux`.
    async fn update(
        &self,
        id: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), tonic::Status> {
        let request = cri::UpdateContainerResourcesRequest {
            container_id: id.into(),
            linux: Some(linux),
            ..Default::default()
        };
        self.client
            .clone()
            .update_container_resources(request)
            .await
            .map(|_| ())
    }

    pub async fn stop_container(&self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: 0,
        };
        self.client
            .clone()
            .stop_container(request)
            .await
            .map(|_| ())
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), tonic::Status> {
        let request = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.client
            .clone()
            .remove_container(request)
            .await
            .map(|_| ())
    }

    pub async fn stop_pod(&self, sandbox: &str) -> Result<(), tonic::Status> {
        let request = cri::StopPodSandboxRequest {
            pod_sandbox_id: sandbox.into(),
        };
        self.client
            .clone()
            .stop_pod_sandbox(request)
            .await
            .map(|_| ())
    }

    pub async fn remove_pod(&self, sandbox: &str) -> Result<(), tonic::Status> {
        let request = cri::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox.into(),
        };
        self.client
            .clone()
            .remove_pod_sandbox(request)
            .await
            .map(|_| ())
    }

    pub async fn sandboxes_of(&self, uid: &str) -> Vec<cri::PodSandbox> {
        let all = self
            .client
            .clone()
            .list_pod_sandbox(cri::ListPodSandboxRequest::default())
            .await
            .unwrap();
        all.into_inner()
            .items
            .into_iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid))
            .collect()
    }

    /// What the kernel applied to the container's process.
    pub async fn applied(&self, id: &str) -> Reading {
        let request = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: true,
        };
        let status = self
            .client
            .clone()
            .container_status(request)
            .await
            .unwrap()
            .into_inner();
        let pid = pid_of(&status).expect("running container has a pid");
        Host::default().read_pid(pid).unwrap()
    }

    /// Waits until the kernel shows CFS quota `quota` for the container (the drift check is
    /// periodic).
    pub async fn wait_quota(&self, id: &str, quota: i64) -> Reading {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reading = self.applied(id).await;
            if reading.cfs_quota == quota || Instant::now() > deadline {
                return reading;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the kernel shows `cpus` for the container (pool changes are asynchronous).
    pub async fn wait_cpus(&self, id: &str, cpus: &str) -> Reading {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reading = self.applied(id).await;
            if reading.cpus.to_string() == cpus || Instant::now() > deadline {
                return reading;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Removes the pods a test created, straight at the runtime, even when the test fails.
///
/// Every test's numa-shim rebuilds from the runtime it shares with the tests before it, so a pod
/// one test leaves behind holds its CPUs in every later test: `drop` checks that the test's pods
/// are gone, so that a test whose pods stay fails itself rather than the tests after it (and
/// [`Env::get`] removes whatever is left before the next test starts its numa-shim).
pub struct Cleanup {
    env: Env,
    pub sandboxes: Vec<String>,
}

impl Cleanup {
    pub fn new(env: &Env) -> Self {
        Self {
            env: env.clone(),
            sandboxes: Vec::new(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let left = remove_sandboxes(&self.env, &self.sandboxes);
        if !left.is_empty() && !std::thread::panicking() {
            panic!("the test's pods are still on the runtime after removal: {left:?}");
        }
    }
}

/// `crictl` at the runtime, with a timeout for slow days: crictl's own is 2 s per call, which a
/// loaded machine's StopPodSandbox can take (seen: 2.1 s on containerd 1.6).
fn crictl_direct(env: &Env, args: &[&str]) -> std::process::Output {
    let endpoint = format!("unix://{}", env.containerd.display());
    let mut argv = vec!["--runtime-endpoint", endpoint.as_str(), "--timeout", "60s"];
    argv.extend_from_slice(args);
    Command::new(&env.crictl)
        .args(&argv)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", env.crictl.display()))
}

/// The ids of every sandbox the runtime has, whatever its state.
fn runtime_sandboxes(env: &Env) -> Vec<String> {
    let out = crictl_direct(env, &["pods", "-q"]);
    assert!(
        out.status.success(),
        "crictl pods: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Removes `ids` (stopping them first), three tries each; returns those still there, with
/// crictl's last complaint about each.
fn remove_sandboxes(env: &Env, ids: &[String]) -> Vec<(String, String)> {
    let mut left = Vec::new();
    for id in ids {
        let mut complaint = None;
        for _ in 0..3 {
            let out = crictl_direct(env, &["rmp", "-f", id]);
            if !runtime_sandboxes(env).contains(id) {
                complaint = None;
                break;
            }
            complaint = Some(String::from_utf8_lossy(&out.stderr).trim().to_string());
            std::thread::sleep(Duration::from_secs(1));
        }
        if let Some(complaint) = complaint {
            left.push((id.clone(), complaint));
        }
    }
    left
}

pub use crate::pods_api::PodsApi as FakePodsApi;

/// A core/v1 container for the fake Pods API: (name, restartPolicy, cpu, memory) with
/// requests = limits when given.
pub fn container(
    name: &str,
    restart: Option<&str>,
    cpu_mem: Option<(&str, &str)>,
) -> core_v1::Container {
    core_v1::Container {
        name: Some(name.into()),
        restart_policy: restart.map(str::to_string),
        resources: cpu_mem.map(|(cpu, mem)| guaranteed(cpu, mem)),
    }
}

pub fn guaranteed(cpu: &str, mem: &str) -> core_v1::ResourceRequirements {
    let list: HashMap<String, core_v1::Quantity> = [("cpu", cpu), ("memory", mem)]
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                core_v1::Quantity {
                    string: Some(v.into()),
                },
            )
        })
        .collect();
    core_v1::ResourceRequirements {
        limits: list.clone(),
        requests: list,
    }
}

/// A core/v1 pod with pod-level resources.
pub fn api_pod(
    def: &PodDef,
    budget: (&str, &str),
    init: Vec<core_v1::Container>,
    apps: Vec<core_v1::Container>,
) -> core_v1::Pod {
    core_pod(def, Some(guaranteed(budget.0, budget.1)), init, apps)
}

fn core_pod(
    def: &PodDef,
    resources: Option<core_v1::ResourceRequirements>,
    init_containers: Vec<core_v1::Container>,
    containers: Vec<core_v1::Container>,
) -> core_v1::Pod {
    core_v1::Pod {
        metadata: Some(core_v1::ObjectMeta {
            name: Some(def.name.clone()),
            namespace: Some("default".into()),
            uid: Some(def.uid.clone()),
            creation_timestamp: None,
        }),
        spec: Some(core_v1::PodSpec {
            containers,
            node_name: Some("it".into()),
            init_containers,
            resources,
        }),
        status: None,
    }
}

/// A core/v1 pod without pod-level resources: one container with (cpu request, cpu limit, memory).
pub fn classic_pod(
    def: &PodDef,
    name: &str,
    (request, limit, memory): (&str, &str, &str),
) -> core_v1::Pod {
    let quantity = |v: &str| core_v1::Quantity {
        string: Some(v.into()),
    };
    let resources = core_v1::ResourceRequirements {
        requests: HashMap::from([
            ("cpu".to_string(), quantity(request)),
            ("memory".to_string(), quantity(memory)),
        ]),
        limits: HashMap::from([
            ("cpu".to_string(), quantity(limit)),
            ("memory".to_string(), quantity(memory)),
        ]),
    };
    let container = core_v1::Container {
        name: Some(name.into()),
        restart_policy: None,
        resources: Some(resources),
    };
    core_pod(def, None, vec![], vec![container])
}

pub const MI: u64 = 1 << 20;

/// GET `path` from an HTTP server on `addr` (HTTP/1.0, whole body).
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// A loopback address with a port nothing listens on now, for a numa-shim's metrics (kept for
/// the test, across its restarts). Never a fixed port: other harnesses run these tests at the
/// same time on the same machine.
pub fn free_metrics_address() -> &'static str {
    let port = numa_shim::testing::free_port();
    Box::leak(format!("127.0.0.1:{port}").into_boxed_str())
}

/// The value of one Prometheus sample line `name{labels} value` (labels as written).
pub fn sample(metrics: &str, series: &str) -> f64 {
    numa_shim::testing::metric_sample(metrics, series)
        .unwrap_or_else(|| panic!("no sample {series} in:\n{metrics}"))
}

/// Runs the Python PodResources client (integration/podresources.sh) and parses its JSON.
pub fn podresources_client(socket: &Path, args: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/podresources.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podresources client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

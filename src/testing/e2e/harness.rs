//! numa-shim as a test runs it: the fake runtime, placement (`lifecycle::start` with the real
//! `LifecycleHook`) and the relay on unix sockets in a temporary directory, plus a kubelet-like
//! CRI client; the fake kubelet Pods API is `testing::pods_api`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cpuset::CpuSet;
use crate::k8s::kubelet_config::KubeletConfiguration;
use crate::lifecycle::{self, Options, SpecSource, Started};
use crate::placement::Config;
use crate::proto::cri::v1 as cri;
use crate::relay::RelayBuilder;
use crate::telemetry::Metrics;
use crate::topology::Topology;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Status;

use super::kubelet::{PodDef, GI};
pub use super::pods_api::PodsApi;
use super::runtime::{Fake, Runtime};

/// A kubelet fixture topology from shared/fixtures/topologies with `memory` bytes per NUMA node.
pub fn machine(fixture: &str, memory: u64) -> Topology {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/topologies")
        .join(format!("{fixture}.json"));
    let mut topology = Topology::load(&path).unwrap();
    for node in &mut topology.numa {
        node.memory = memory;
    }
    topology
}

/// The fixture with 16Gi per NUMA node.
pub fn fixture(name: &str) -> Topology {
    machine(name, 16 * GI)
}

/// Resource-manager settings as a KubeletConfiguration: static CPU and memory managers, the
/// pod-level gates on, CPU 0 and 100Mi on node 0 reserved, then `extra` YAML lines.
pub fn kubelet_yaml(policy: &str, scope: &str, extra: &str) -> String {
    let memory = if extra.contains("memoryManagerPolicy") {
        ""
    } else {
        "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n"
    };
    format!(
        "cpuManagerPolicy: static\n{memory}topologyManagerPolicy: {policy}\n\
         topologyManagerScope: {scope}\nreservedSystemCPUs: \"0\"\n\
         featureGates: {{PodLevelResources: true, PodLevelResourceManagers: true}}\n{extra}"
    )
}

pub fn config(yaml: &str, topology: &Topology) -> Config {
    KubeletConfiguration::from_yaml(yaml)
        .unwrap()
        .resolve(topology)
        .unwrap()
        .config
}

/// numa-shim running in front of a fake runtime.
pub struct Shim {
    pub dir: PathBuf,
    pub runtime: Runtime,
    pub started: Started,
    relay: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    pub listen: PathBuf,
}

/// What to start.
#[derive(Clone)]
pub struct Setup {
    pub topology: Topology,
    pub config: Config,
    pub spec_source: SpecSource,
    /// The fake runtime plays the kernel with its cgroup tree here, and numa-shim's drift check
    /// reads it every `drift_period` ([`Setup::drift`]); `None`: no drift check beyond start-up.
    pub cgroups: Option<PathBuf>,
    pub drift_period: Duration,
    /// Where decisions read the kubelet's devices (`None`: without devices).
    pub devices: Option<Arc<dyn lifecycle::DeviceSource>>,
}

impl Setup {
    pub fn new(fixture_name: &str, policy: &str, scope: &str) -> Self {
        let topology = fixture(fixture_name);
        let config = config(&kubelet_yaml(policy, scope, ""), &topology);
        Self {
            topology,
            config,
            spec_source: SpecSource::CriOnly,
            cgroups: None,
            // No periodic pass: every cpuset change must come from a pool-change wake-up.
            drift_period: Duration::from_secs(3600),
            devices: None,
        }
    }

    /// Like `new` with `extra` KubeletConfiguration lines (which may set memoryManagerPolicy).
    pub fn with(fixture_name: &str, policy: &str, scope: &str, extra: &str) -> Self {
        let topology = fixture(fixture_name);
        let config = config(&kubelet_yaml(policy, scope, extra), &topology);
        Self {
            topology,
            config,
            spec_source: SpecSource::CriOnly,
            cgroups: None,
            // No periodic pass: every cpuset change must come from a pool-change wake-up.
            drift_period: Duration::from_secs(3600),
            devices: None,
        }
    }

    /// The fake runtime keeps a fake kernel's cgroup tree in `root` and numa-shim checks it for
    /// drift every `period`.
    pub fn drift(mut self, root: &Path, period: Duration) -> Self {
        self.cgroups = Some(root.to_path_buf());
        self.drift_period = period;
        self
    }

    /// Decisions read the kubelet's devices from `source` (e.g. `testing::devices::FakeDevices`).
    pub fn devices(mut self, source: Arc<dyn lifecycle::DeviceSource>) -> Self {
        self.devices = Some(source);
        self
    }

    pub fn pods_api(mut self, socket: &Path) -> Self {
        self.spec_source = SpecSource::PodsApi(socket.to_path_buf());
        self
    }
}

impl Shim {
    /// Starts a fresh fake runtime and numa-shim with its state in `dir`.
    pub async fn start(dir: &Path, setup: &Setup) -> Self {
        let fake = setup
            .cgroups
            .as_deref()
            .map_or_else(Fake::default, Fake::with_cgroups);
        let runtime = Runtime::start(&dir.join("runtime.sock"), fake).await;
        Self::start_with(dir, setup, runtime).await
    }

    /// Starts numa-shim in front of an already running fake runtime.
    pub async fn start_with(dir: &Path, setup: &Setup, runtime: Runtime) -> Self {
        if let Ok(filter) = std::env::var("E2E_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let options = Options {
            topology: setup.topology.clone(),
            config: setup.config.clone(),
            state_dir: dir.join("state"),
            spec_source: setup.spec_source.clone(),
            reports: None,
            pool: lifecycle::pool::PoolSettings {
                drift_period: setup.drift_period,
                retry_backoff: Duration::from_millis(10),
                host: match &setup.cgroups {
                    Some(root) => crate::cgroup::Host::new(root.join("cg"), root.join("proc")),
                    None => crate::cgroup::Host::default(),
                },
            },
            runtime_wait: Some(Duration::from_secs(5)),
            devices: setup.devices.clone(),
            claims: None,
        };
        let started = lifecycle::start(options, runtime.path.clone(), Arc::new(Metrics::new()))
            .await
            .unwrap();
        let listen = dir.join("shim.sock");
        let relay = RelayBuilder::new(&listen, &runtime.path)
            .hook(crate::relay::LifecycleHook::new(started.placer.clone()))
            .bind()
            .await
            .unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(relay.serve_with_shutdown(async {
            let _ = stopped.await;
        }));
        Self {
            dir: dir.to_path_buf(),
            runtime,
            started,
            relay: Some((stop, task)),
            listen,
        }
    }

    pub fn fake(&self) -> &Fake {
        &self.runtime.fake
    }

    pub async fn kubelet(&self) -> Kubelet {
        Kubelet::connect(&self.listen).await
    }

    /// Stops the relay and placement; the fake runtime keeps running and is handed back.
    pub async fn stop(mut self) -> Runtime {
        if let Some((stop, task)) = self.relay.take() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
        self.started.shutdown().await;
        self.runtime
    }

    /// Kills numa-shim as a SIGKILL would: the relay and the background tasks end where they
    /// are, nothing more is written (calls in flight are cut off at the runtime); the fake
    /// runtime keeps running and is handed back.
    pub fn kill(mut self) -> Runtime {
        if let Some((_, task)) = self.relay.take() {
            task.abort();
        }
        self.started.stop();
        self.runtime
    }

    /// The node shared pool as numa-shim sees it now.
    pub fn shared(&self) -> CpuSet {
        self.started.placer.registry().node().shared_cpus()
    }

    /// Waits until `check` holds (the pool updater works in the background).
    /// Panics after 15 s with numa-shim's records and the runtime's cpusets.
    pub async fn eventually(&self, what: &str, check: impl Fn(&Fake) -> bool) {
        for _ in 0..750 {
            if check(self.fake()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let records = format!("{:#?}", self.started.placer.registry().containers());
        let pending = format!("{:?}", self.started.placer.registry().pending_updates());
        let runtime: Vec<(String, String)> = self
            .fake()
            .state()
            .containers
            .iter()
            .map(|(id, h)| (id.clone(), h.resources.cpuset_cpus.clone()))
            .collect();
        panic!(
            "timed out waiting for: {what}\nshared {}\npending {pending}\nruntime {runtime:?}\nrecords {records}",
            self.shared()
        );
    }
}

/// A tonic channel over the unix socket at `path` (the library's, connected on first use).
pub async fn channel(path: &Path) -> Channel {
    crate::transport::unix_channel(path)
}

/// A pod the kubelet started: its sandbox id and container ids by name.
#[derive(Debug, Clone)]
pub struct RunningPod {
    pub sandbox: String,
    pub containers: BTreeMap<String, String>,
}

impl RunningPod {
    pub fn id(&self, name: &str) -> &str {
        &self.containers[name]
    }
}

/// The kubelet side of CRI.
#[derive(Clone)]
pub struct Kubelet {
    client: cri::runtime_service_client::RuntimeServiceClient<Channel>,
}

impl Kubelet {
    pub async fn connect(socket: &Path) -> Self {
        Self {
            client: cri::runtime_service_client::RuntimeServiceClient::new(channel(socket).await),
        }
    }

    pub async fn run_sandbox(&self, pod: &PodDef) -> Result<String, Status> {
        let response = self
            .client
            .clone()
            .run_pod_sandbox(pod.run_request())
            .await?;
        Ok(response.into_inner().pod_sandbox_id)
    }

    /// CreateContainer then StartContainer.
    pub async fn create(&self, pod: &PodDef, sandbox: &str, name: &str) -> Result<String, Status> {
        let mut client = self.client.clone();
        let id = client
            .create_container(pod.create_request(sandbox, name))
            .await?
            .into_inner()
            .container_id;
        client
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await?;
        Ok(id)
    }

    /// The sandbox, then every container in kubelet order.
    pub async fn start_pod(&self, pod: &PodDef) -> Result<RunningPod, Status> {
        let sandbox = self.run_sandbox(pod).await?;
        let mut containers = BTreeMap::new();
        for c in pod.all() {
            let id = self.create(pod, &sandbox, &c.name).await?;
            containers.insert(c.name.clone(), id);
        }
        Ok(RunningPod {
            sandbox,
            containers,
        })
    }

    /// StopPodSandbox alone (the kubelet stops a pod well before it removes it).
    pub async fn stop_sandbox(&self, sandbox: &str) {
        self.client
            .clone()
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: sandbox.to_string(),
            })
            .await
            .unwrap();
    }

    /// StopContainer for each container, StopPodSandbox, RemoveContainer, RemovePodSandbox.
    pub async fn delete_pod(&self, pod: &RunningPod) {
        let mut client = self.client.clone();
        for id in pod.containers.values() {
            client
                .stop_container(cri::StopContainerRequest {
                    container_id: id.clone(),
                    timeout: 0,
                })
                .await
                .unwrap();
        }
        client
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.sandbox.clone(),
            })
            .await
            .unwrap();
        for id in pod.containers.values() {
            client
                .remove_container(cri::RemoveContainerRequest {
                    container_id: id.clone(),
                })
                .await
                .unwrap();
        }
        client
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.sandbox.clone(),
            })
            .await
            .unwrap();
    }

    pub async fn update(
        &self,
        request: cri::UpdateContainerResourcesRequest,
    ) -> Result<(), Status> {
        self.client
            .clone()
            .update_container_resources(request)
            .await
            .map(|_| ())
    }

    /// An in-place resize of container `id` as the kubelet's CPU pass sends it: the CRI values
    /// of `res` (shares, quota, period, memory limit).
    pub async fn resize(
        &self,
        id: &str,
        res: &crate::testing::e2e::kubelet::Res,
    ) -> Result<(), Status> {
        self.update(cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(res.linux()),
            ..Default::default()
        })
        .await
    }

    /// [`Kubelet::resize`] with the caller's deadline `timeout` (`grpc-timeout`).
    pub async fn resize_within(
        &self,
        id: &str,
        res: &crate::testing::e2e::kubelet::Res,
        timeout: Duration,
    ) -> Result<(), Status> {
        let mut request = tonic::Request::new(cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(res.linux()),
            ..Default::default()
        });
        request.set_timeout(timeout);
        self.client
            .clone()
            .update_container_resources(request)
            .await
            .map(|_| ())
    }

    /// UpdatePodSandboxResources with the pod cgroup values of budget `res`.
    pub async fn resize_sandbox(
        &self,
        sandbox: &str,
        res: &crate::testing::e2e::kubelet::Res,
    ) -> Result<(), Status> {
        self.update_sandbox(sandbox, res.linux()).await
    }

    async fn update_sandbox(
        &self,
        sandbox: &str,
        linux: cri::LinuxContainerResources,
    ) -> Result<(), Status> {
        self.client
            .clone()
            .update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
                pod_sandbox_id: sandbox.to_string(),
                resources: Some(linux),
                ..Default::default()
            })
            .await
            .map(|_| ())
    }

    /// [`Self::resize_sandbox_in_passes`] on a cgroup v2 node, memory included: the kubelet
    /// merges each pass's new value over the pod cgroup as it read it, and cgroup v2 gives the
    /// CPU request's shares back through `cpu.weight` rounded down (2048 as 2046:
    /// `infer::shares_through_cgroup_v2`). The memory limit's pass comes first (on growth),
    /// then the CPU limit and request passes in the order of `doPodResizeAction`, each only
    /// when its value differs from the one read (so a memory resize also gets a request pass
    /// that restates the exact shares).
    pub async fn resize_sandbox_in_passes_cgroup_v2(
        &self,
        sandbox: &str,
        from: &crate::testing::e2e::kubelet::Res,
        to: &crate::testing::e2e::kubelet::Res,
    ) -> Result<(), Status> {
        let mut now = from.linux();
        now.cpu_shares = crate::knowledge::infer::shares_through_cgroup_v2(now.cpu_shares);
        let target = to.linux();
        if target.memory_limit_in_bytes != now.memory_limit_in_bytes {
            now.memory_limit_in_bytes = target.memory_limit_in_bytes;
            self.update_sandbox(sandbox, now.clone()).await?;
        }
        let grow = target.cpu_quota > now.cpu_quota;
        for limit_pass in if grow { [true, false] } else { [false, true] } {
            if limit_pass && target.cpu_quota != now.cpu_quota {
                now.cpu_quota = target.cpu_quota;
            } else if !limit_pass && target.cpu_shares != now.cpu_shares {
                now.cpu_shares = target.cpu_shares;
            } else {
                continue;
            }
            self.update_sandbox(sandbox, now.clone()).await?;
        }
        Ok(())
    }

    /// A pod-level CPU resize from budget `from` to `to` as the kubelet v1.37 actuates it
    /// (`doPodResizeAction`'s `setPodCgroupConfig`): one UpdatePodSandboxResources per pod
    /// cgroup value, the limit (quota) before the request (shares) on growth, the request
    /// before the limit on shrink; each call carries the values set so far.
    pub async fn resize_sandbox_in_passes(
        &self,
        sandbox: &str,
        from: &crate::testing::e2e::kubelet::Res,
        to: &crate::testing::e2e::kubelet::Res,
    ) -> Result<(), Status> {
        let mut now = *from;
        let grow = to.cpu_lim.unwrap_or(0) > from.cpu_lim.unwrap_or(0);
        for limit_pass in if grow { [true, false] } else { [false, true] } {
            if limit_pass {
                now.cpu_lim = to.cpu_lim;
            } else {
                now.cpu_req = to.cpu_req;
            }
            self.resize_sandbox(sandbox, &now).await?;
        }
        Ok(())
    }
}

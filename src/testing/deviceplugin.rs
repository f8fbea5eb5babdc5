//! Test support for the device plugin front: a fake device plugin (the real v1beta1 protocol on
//! a unix socket: devices with their NUMA nodes, the documented preference — must-include, then
//! the lowest ids — and the Allocate calls it got, recorded) and a fake kubelet Registration
//! service that records what registers with it. tests/podresources/device_front.rs drives numa-shim's
//! front between the two; tests/realkubelet uses the sample Go plugin and a real kubelet.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::served::Served;
use crate::proto::deviceplugin::v1beta1 as dp;
use crate::transport::unix_channel;

/// A device of the fake plugin: id and NUMA node (`None`: no topology).
pub fn device(id: &str, node: Option<i64>) -> dp::Device {
    dp::Device {
        id: id.to_string(),
        health: "Healthy".to_string(),
        topology: node.map(|n| dp::TopologyInfo {
            nodes: vec![dp::NumaNode { id: n }],
        }),
    }
}

/// A fake device plugin; clones share what it recorded.
#[derive(Clone)]
pub struct FakePlugin {
    devices: watch::Sender<Vec<dp::Device>>,
    /// Device ids of every Allocate container request, in order.
    pub allocated: Arc<Mutex<Vec<Vec<String>>>>,
    /// How many GetPreferredAllocation calls reached the plugin itself.
    pub preferred_calls: Arc<Mutex<usize>>,
    /// Bumped by [`FakePlugin::stop`]: open ListAndWatch streams end, as when a plugin dies.
    epoch: watch::Sender<u64>,
}

impl FakePlugin {
    pub fn new(devices: Vec<dp::Device>) -> Self {
        Self {
            devices: watch::channel(devices).0,
            allocated: Arc::default(),
            preferred_calls: Arc::default(),
            epoch: watch::channel(0).0,
        }
    }

    /// The plugin dies: its ListAndWatch streams end and its server stops.
    pub async fn stop(&self, served: Served) {
        self.end_streams();
        served.stop().await;
    }

    /// Ends the open ListAndWatch streams.
    pub fn end_streams(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Sends a new device list on every open ListAndWatch stream.
    pub fn set_devices(&self, devices: Vec<dp::Device>) {
        self.devices.send_replace(devices);
    }

    /// Serves the plugin on `socket`.
    pub fn serve(&self, socket: &Path) -> Served {
        let plugin = self.clone();
        Served::spawn(socket, move |listener, stopped| async move {
            let _ = tonic::transport::Server::builder()
                .add_service(dp::device_plugin_server::DevicePluginServer::new(plugin))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        })
    }

    /// Registers `endpoint` (a file name in the directory of `kubelet_sock`) for `resource`.
    pub async fn register(
        kubelet_sock: &Path,
        endpoint: &str,
        resource: &str,
    ) -> Result<(), Status> {
        let mut client =
            dp::registration_client::RegistrationClient::new(unix_channel(kubelet_sock));
        client
            .register(dp::RegisterRequest {
                version: "v1beta1".into(),
                endpoint: endpoint.into(),
                resource_name: resource.into(),
                options: Some(dp::DevicePluginOptions {
                    pre_start_required: false,
                    get_preferred_allocation_available: true,
                }),
            })
            .await
            .map(drop)
    }
}

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for FakePlugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<BoxStream<dp::ListAndWatchResponse>>, Status> {
        let mut rx = self.devices.subscribe();
        let mut epoch = self.epoch.subscribe();
        let (tx, out) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let devices = rx.borrow_and_update().clone();
                if tx
                    .send(Ok(dp::ListAndWatchResponse { devices }))
                    .await
                    .is_err()
                {
                    break;
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { break },
                    () = tx.closed() => break,
                    _ = epoch.changed() => break,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        *self.preferred_calls.lock().unwrap() += 1;
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| {
                let available = c.available_device_i_ds.iter().cloned().collect();
                let must = c.must_include_device_i_ds.iter().cloned().collect();
                let ids = crate::placement::device::alloc::preferred(
                    &available,
                    &must,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                );
                dp::ContainerPreferredAllocationResponse {
                    device_i_ds: ids.into_iter().collect(),
                }
            })
            .collect();
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let mut responses = Vec::new();
        for c in request.into_inner().container_requests {
            self.allocated.lock().unwrap().push(c.devices_ids.clone());
            responses.push(dp::ContainerAllocateResponse {
                envs: [("FAKE_DEVICES".to_string(), c.devices_ids.join(","))].into(),
                ..Default::default()
            });
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

/// The kubelet's Registration service, recording every RegisterRequest.
#[derive(Clone, Default)]
pub struct FakeKubeletRegistration {
    pub requests: Arc<Mutex<Vec<dp::RegisterRequest>>>,
}

impl FakeKubeletRegistration {
    /// Serves on `<dir>/kubelet.sock`.
    pub fn serve(&self, dir: &Path) -> Served {
        let me = self.clone();
        Served::spawn(
            &dir.join("kubelet.sock"),
            move |listener, stopped| async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(dp::registration_server::RegistrationServer::new(me))
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                        let _ = stopped.await;
                    })
                    .await;
            },
        )
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<dp::RegisterRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits up to `within` for `n` registrations; the requests then.
    pub async fn wait(&self, n: usize, within: std::time::Duration) -> Vec<dp::RegisterRequest> {
        let deadline = tokio::time::Instant::now() + within;
        while self.seen().len() < n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.seen()
    }
}

#[tonic::async_trait]
impl dp::registration_server::Registration for FakeKubeletRegistration {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        self.requests.lock().unwrap().push(request.into_inner());
        Ok(Response::new(dp::Empty {}))
    }
}

/// A client of numa-shim's endpoint for `resource` in the kubelet's directory, as the kubelet
/// connects to it.
pub fn kubelet_client(
    kubelet_dir: &Path,
    endpoint: &str,
) -> dp::device_plugin_client::DevicePluginClient<tonic::transport::Channel> {
    let path: PathBuf = kubelet_dir.join(endpoint);
    dp::device_plugin_client::DevicePluginClient::new(unix_channel(&path))
}

/// A placer on a 2-NUMA machine of one CPU per node (static CPU policy, memory policy None,
/// `single-numa-node` in container scope, nothing reserved) whose pod knowledge is one watched
/// cache holding `pods` (as the Pods API would), checkpointing into `dir`.
pub fn placer_knowing(
    dir: &Path,
    pods: Vec<(crate::placement::PodSpec, crate::knowledge::PodMeta)>,
) -> (
    Arc<crate::lifecycle::Placer>,
    Arc<crate::knowledge::PodCache>,
) {
    placer_knowing_with(dir, pods, |_| {})
}

/// [`placer_knowing`] with its settings changed by `change` first.
pub fn placer_knowing_with(
    dir: &Path,
    pods: Vec<(crate::placement::PodSpec, crate::knowledge::PodMeta)>,
    change: impl FnOnce(&mut crate::placement::config::Config),
) -> (
    Arc<crate::lifecycle::Placer>,
    Arc<crate::knowledge::PodCache>,
) {
    use crate::placement::config::{
        Config, CpuPolicy, ReservedCpus, TopologyPolicy, TopologyScope,
    };
    let topo = crate::topology::SyntheticSpec::new(2, 1, 1, 1, 1)
        .build()
        .unwrap();
    let config = Config {
        cpu_policy: CpuPolicy::Static,
        reserved_cpus: ReservedCpus::Explicit(crate::cpuset::CpuSet::new()),
        accept_no_reserved_cpus: true,
        topology_policy: TopologyPolicy::SingleNumaNode,
        topology_scope: TopologyScope::Container,
        ..Config::default()
    };
    let mut config = config;
    change(&mut config);
    let registry =
        crate::lifecycle::Registry::new(crate::placement::node::Node::new(topo, config).unwrap());
    let cache = Arc::new(crate::knowledge::PodCache::new(None));
    cache.set_link(crate::knowledge::Link::Live);
    for (spec, meta) in pods {
        cache.insert_with(spec, meta);
    }
    let knowledge = crate::knowledge::Knowledge::Watched(vec![crate::knowledge::Watched {
        origin: crate::knowledge::SpecOrigin::PodsApi,
        cache: cache.clone(),
    }]);
    let store = crate::lifecycle::Store::new(crate::state::Checkpoint::new(dir, "state.json"));
    let placer = Arc::new(crate::lifecycle::Placer::new(
        registry,
        store,
        knowledge,
        Arc::new(crate::telemetry::Metrics::new()),
    ));
    (placer, cache)
}

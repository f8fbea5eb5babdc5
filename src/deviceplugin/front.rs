//! The front's state and its gRPC services: the Registration service device plugins call on
//! `<dir>/kubelet.sock`, the follower of each plugin's `ListAndWatch`, and per resource the
//! DevicePlugin service numa-shim serves to the kubelet (devices without topology; preferred
//! allocation from numa-shim's decision; Allocate, PreStartContainer and the options forwarded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::choice::Wanted;
use super::decide::{log_answer, Chooser};
use crate::lifecycle::devices::FrontedTopology;
use crate::placement::device::Device;
use crate::proto::deviceplugin::v1beta1 as dp;
use crate::transport::unix_channel;
use dp::device_plugin_client::DevicePluginClient;

/// The only device plugin API version (the kubelet's `SupportedVersions`).
pub const VERSION: &str = "v1beta1";
/// A device's health as the API spells it.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";

/// One fronted resource: the plugin serving it now and its devices as the plugin sent them.
#[derive(Debug)]
pub struct Resource {
    pub name: String,
    /// The plugin's devices with health and true topology, as last sent.
    devices: watch::Sender<Vec<dp::Device>>,
    plugin: Mutex<Option<Plugin>>,
    /// Bumped at each registration: a stream that ends only counts for its own registration.
    generation: AtomicU64,
    pre_start_required: AtomicBool,
    /// Whether numa-shim's endpoint for this resource is being served to the kubelet.
    pub(super) served: AtomicBool,
}

/// A registered plugin.
#[derive(Debug, Clone)]
struct Plugin {
    client: DevicePluginClient<Channel>,
    endpoint: PathBuf,
}

impl Resource {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            devices: watch::channel(Vec::new()).0,
            plugin: Mutex::new(None),
            generation: AtomicU64::new(0),
            pre_start_required: AtomicBool::new(false),
            served: AtomicBool::new(false),
        }
    }

    /// Whether the plugin asks for PreStartContainer calls.
    pub fn pre_start_required(&self) -> bool {
        self.pre_start_required.load(Ordering::Acquire)
    }

    /// The healthy devices with their true NUMA nodes, as the decision core sees them.
    pub fn healthy_devices(&self) -> Vec<Device> {
        self.devices
            .borrow()
            .iter()
            .filter(|d| d.health == HEALTHY)
            .map(to_core)
            .collect()
    }

    /// A receiver of the devices as the plugin sends them.
    pub fn subscribe(&self) -> watch::Receiver<Vec<dp::Device>> {
        self.devices.subscribe()
    }

    fn client(&self) -> Result<DevicePluginClient<Channel>, Status> {
        self.plugin
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|p| p.client.clone())
            .ok_or_else(|| {
                Status::unavailable(format!(
                    "no device plugin of {} is registered with numa-shim's device plugin front now",
                    self.name
                ))
            })
    }
}

/// A plugin device as the decision core's [`Device`] (NUMA ids that are not `u32` dropped).
pub fn to_core(d: &dp::Device) -> Device {
    let mut numa_nodes: Vec<u32> = d
        .topology
        .iter()
        .flat_map(|t| &t.nodes)
        .filter_map(|n| u32::try_from(n.id).ok())
        .collect();
    numa_nodes.sort_unstable();
    numa_nodes.dedup();
    Device {
        id: d.id.clone(),
        numa_nodes,
    }
}

/// The devices as the kubelet gets them: the same ids and health, no topology.
pub fn without_topology(devices: &[dp::Device]) -> Vec<dp::Device> {
    devices
        .iter()
        .map(|d| dp::Device {
            id: d.id.clone(),
            health: d.health.clone(),
            topology: None,
        })
        .collect()
}

/// Everything the front shares.
#[derive(Debug)]
pub struct Shared {
    /// The directory plugins register in (`kubelet.sock` there, their sockets beside it).
    pub dir: PathBuf,
    pub resources: Mutex<BTreeMap<String, Arc<Resource>>>,
    pub chooser: Chooser,
    pub topology: Arc<FrontedTopology>,
    /// Called when a resource is registered for the first time (starts serving it to the
    /// kubelet).
    pub on_new: Mutex<Option<mpsc::UnboundedSender<Arc<Resource>>>>,
}

impl Shared {
    pub fn new(dir: PathBuf, chooser: Chooser, topology: Arc<FrontedTopology>) -> Self {
        Self {
            dir,
            resources: Mutex::new(BTreeMap::new()),
            chooser,
            topology,
            on_new: Mutex::new(None),
        }
    }

    /// The resource's state, made on first use.
    fn resource(&self, name: &str) -> (Arc<Resource>, bool) {
        let mut resources = self.resources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = resources.get(name) {
            return (r.clone(), false);
        }
        let r = Arc::new(Resource::new(name));
        resources.insert(name.to_string(), r.clone());
        (r, true)
    }

    /// A fronted resource by name.
    pub fn get(&self, name: &str) -> Option<Arc<Resource>> {
        self.resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Checks a plugin's `Register` and follows the plugin in the background.
    pub fn register(self: &Arc<Self>, req: &dp::RegisterRequest) -> Result<(), Status> {
        if req.version != VERSION {
            return Err(Status::invalid_argument(format!(
                "device plugin API version {:?} is not supported by numa-shim's front (only {VERSION})",
                req.version
            )));
        }
        let resource = req.resource_name.as_str();
        let valid_name = resource.split_once('/').is_some_and(|(domain, name)| {
            !domain.is_empty() && !name.is_empty() && !name.contains('/')
        });
        if !valid_name || resource.starts_with("kubernetes.io/") {
            return Err(Status::invalid_argument(format!(
                "resource name {resource:?} is not an extended resource name (domain/name)"
            )));
        }
        let endpoint = req.endpoint.as_str();
        if endpoint.is_empty() || endpoint.contains('/') || endpoint == "kubelet.sock" {
            return Err(Status::invalid_argument(format!(
                "endpoint {endpoint:?} must be a socket file name in {}",
                self.dir.display()
            )));
        }
        let path = self.dir.join(endpoint);
        let (state, fresh) = self.resource(resource);
        let generation = state.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let pre_start = req.options.as_ref().is_some_and(|o| o.pre_start_required);
        state.pre_start_required.store(pre_start, Ordering::Release);
        let client = DevicePluginClient::new(unix_channel(&path))
            .max_decoding_message_size(crate::transport::limits::MAX_MESSAGE);
        *state.plugin.lock().unwrap_or_else(|e| e.into_inner()) = Some(Plugin {
            client: client.clone(),
            endpoint: path.clone(),
        });
        info!(resource, endpoint = %path.display(), pre_start_required = pre_start, again = !fresh, "device plugin registered with numa-shim's front");
        if fresh {
            if let Some(tx) = self
                .on_new
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                let _ = tx.send(state.clone());
            }
        }
        let shared = self.clone();
        tokio::spawn(async move { shared.follow(state, client, path, generation).await });
        Ok(())
    }

    /// Follows the plugin's `ListAndWatch` until it ends; then, if no newer registration
    /// replaced it, its devices are reported Unhealthy to the kubelet until it registers again.
    async fn follow(
        self: Arc<Self>,
        state: Arc<Resource>,
        mut client: DevicePluginClient<Channel>,
        path: PathBuf,
        generation: u64,
    ) {
        let resource = state.name.clone();
        let ended = match client.list_and_watch(dp::Empty {}).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                loop {
                    match stream.message().await {
                        Ok(Some(msg)) => {
                            if state.generation.load(Ordering::Acquire) != generation {
                                break "replaced by a newer registration".to_string();
                            }
                            self.seen(&state, msg.devices);
                        }
                        Ok(None) => break "its ListAndWatch stream ended".to_string(),
                        Err(status) => {
                            break format!(
                                "its ListAndWatch stream failed ({:?}: {})",
                                status.code(),
                                status.message()
                            )
                        }
                    }
                }
            }
            Err(status) => format!(
                "ListAndWatch could not be opened ({:?}: {})",
                status.code(),
                status.message()
            ),
        };
        if state.generation.load(Ordering::Acquire) != generation {
            info!(resource, endpoint = %path.display(), "device plugin registered again; following the new registration");
            return;
        }
        {
            let mut plugin = state.plugin.lock().unwrap_or_else(|e| e.into_inner());
            if plugin.as_ref().is_some_and(|p| p.endpoint == path) {
                *plugin = None;
            }
        }
        let unhealthy: Vec<dp::Device> = state
            .devices
            .borrow()
            .iter()
            .map(|d| dp::Device {
                health: UNHEALTHY.to_string(),
                ..d.clone()
            })
            .collect();
        let count = unhealthy.len();
        state.devices.send_replace(unhealthy);
        warn!(resource, endpoint = %path.display(), devices = count, reason = %ended, "device plugin gone from numa-shim's front: its devices are reported Unhealthy to the kubelet until it registers again");
    }

    /// A `ListAndWatch` message: kept with its topology, the topology published for
    /// PodResources readers, and passed on (without topology) to the kubelet's stream.
    fn seen(&self, state: &Resource, devices: Vec<dp::Device>) {
        let topology: BTreeMap<String, Vec<u32>> = devices
            .iter()
            .map(|d| {
                let core = to_core(d);
                (core.id, core.numa_nodes)
            })
            .collect();
        let healthy = devices.iter().filter(|d| d.health == HEALTHY).count();
        info!(resource = %state.name, devices = devices.len(), healthy, "device plugin devices (true topology kept by numa-shim, hidden from the kubelet)");
        self.topology.set(&state.name, topology);
        state.devices.send_replace(devices);
    }
}

/// The Registration service device plugins call.
#[derive(Debug, Clone)]
pub struct FrontRegistration(pub Arc<Shared>);

#[tonic::async_trait]
impl dp::registration_server::Registration for FrontRegistration {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        let req = request.into_inner();
        if let Err(status) = self.0.register(&req) {
            warn!(resource = %req.resource_name, endpoint = %req.endpoint, reason = status.message(), "device plugin registration refused by numa-shim's front");
            return Err(status);
        }
        Ok(Response::new(dp::Empty {}))
    }
}

/// The DevicePlugin service numa-shim serves the kubelet for one fronted resource.
#[derive(Debug, Clone)]
pub struct Facing {
    pub shared: Arc<Shared>,
    pub resource: Arc<Resource>,
}

type DeviceStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Facing {
    async fn get_device_plugin_options(
        &self,
        request: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        let mut options = match self.resource.client() {
            Ok(mut client) => client
                .get_device_plugin_options(request.into_inner())
                .await?
                .into_inner(),
            Err(_) => dp::DevicePluginOptions {
                pre_start_required: self.resource.pre_start_required(),
                get_preferred_allocation_available: true,
            },
        };
        // The front's whole point: the kubelet must ask numa-shim which devices to take.
        options.get_preferred_allocation_available = true;
        Ok(Response::new(options))
    }

    async fn list_and_watch(
        &self,
        _request: Request<dp::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let mut devices = self.resource.subscribe();
        let (tx, rx) = mpsc::channel(4);
        let resource = self.resource.name.clone();
        tokio::spawn(async move {
            loop {
                let now = without_topology(&devices.borrow_and_update());
                if tx
                    .send(Ok(dp::ListAndWatchResponse { devices: now }))
                    .await
                    .is_err()
                {
                    break;
                }
                tokio::select! {
                    changed = devices.changed() => if changed.is_err() { break },
                    () = tx.closed() => break,
                }
            }
            info!(
                resource,
                "the kubelet's ListAndWatch of a fronted resource ended"
            );
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let req = request.into_inner();
        let devices = self.resource.healthy_devices();
        let mut responses = Vec::with_capacity(req.container_requests.len());
        for c in &req.container_requests {
            let size = usize::try_from(c.allocation_size).map_err(|_| {
                Status::invalid_argument(format!(
                    "allocation_size {} of {} is negative",
                    c.allocation_size, self.resource.name
                ))
            })?;
            let wanted = Wanted {
                resource: self.resource.name.clone(),
                available: c.available_device_i_ds.iter().cloned().collect(),
                must: c.must_include_device_i_ds.iter().cloned().collect(),
                size,
            };
            let (ids, answered) = self.shared.chooser.choose(&devices, &wanted).await;
            log_answer(&self.resource.name, &wanted, &ids, &answered);
            responses.push(dp::ContainerPreferredAllocationResponse {
                device_i_ds: ids.into_iter().collect(),
            });
        }
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses: responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let mut client = self.resource.client()?;
        client.allocate(request.into_inner()).await
    }

    async fn pre_start_container(
        &self,
        request: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        let mut client = self.resource.client()?;
        client.pre_start_container(request.into_inner()).await
    }
}

/// The socket file name numa-shim serves a resource on (`example.com/gpu` →
/// `numa-shim-example.com_gpu.sock`).
pub fn socket_name(resource: &str) -> String {
    let safe: String = resource
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("numa-shim-{safe}.sock")
}

/// Removes every socket in `dir` (the kubelet does the same with its directory at start, so
/// that plugins see their registration socket recreated and register again). Returns how many.
pub fn remove_sockets(dir: &Path) -> usize {
    use std::os::unix::fs::FileTypeExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_socket())
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

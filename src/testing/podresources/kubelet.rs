//! Test support: a fake kubelet PodResources server (the real v1 protocol on a unix socket)
//! answering what the test puts in it, failing or hanging on request; and a log capture to see
//! the warnings numa-shim writes when the kubelet does not answer. Used by
//! tests/podresources (kubelet, device_facts).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::proto::podresources::v1 as pr;
use pr::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

/// How the fake answers every call.
#[derive(Debug, Clone, Default)]
pub enum Behaviour {
    /// With its `list` and `allocatable`; `Get` from `list`.
    #[default]
    Answer,
    /// With this status.
    Fail(Status),
    /// Never (the call waits for ever).
    Hang,
}

/// The kubelet's answers. `Get` finds the pod in `list` (the kubelet's own error, code Unknown,
/// when it is not there).
#[derive(Debug, Default)]
pub struct FakeKubelet {
    pub calls: AtomicUsize,
    pub list: Mutex<pr::ListPodResourcesResponse>,
    pub allocatable: Mutex<pr::AllocatableResourcesResponse>,
    pub behaviour: Mutex<Behaviour>,
}

/// A running fake; the server stops when this is dropped.
pub struct Running {
    pub fake: Arc<FakeKubelet>,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::ops::Deref for Running {
    type Target = FakeKubelet;
    fn deref(&self) -> &FakeKubelet {
        &self.fake
    }
}

impl FakeKubelet {
    /// Serves `self` on `path`.
    pub fn serve(self, path: &Path) -> Running {
        let fake = Arc::new(self);
        let listener = UnixListener::bind(path).unwrap();
        let svc = PodResourcesListerServer::from_arc(fake.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(UnixListenerStream::new(listener))
                .await;
        });
        Running { fake, task }
    }

    pub fn with(
        list: pr::ListPodResourcesResponse,
        allocatable: pr::AllocatableResourcesResponse,
    ) -> Self {
        Self {
            list: Mutex::new(list),
            allocatable: Mutex::new(allocatable),
            ..Self::default()
        }
    }

    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    async fn gate(&self) -> Result<(), Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let behaviour = self.behaviour.lock().unwrap().clone();
        match behaviour {
            Behaviour::Answer => Ok(()),
            Behaviour::Fail(status) => Err(status),
            Behaviour::Hang => std::future::pending().await,
        }
    }
}

#[tonic::async_trait]
impl PodResourcesLister for FakeKubelet {
    async fn list(
        &self,
        _: Request<pr::ListPodResourcesRequest>,
    ) -> Result<Response<pr::ListPodResourcesResponse>, Status> {
        self.gate().await?;
        Ok(Response::new(self.list.lock().unwrap().clone()))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<pr::AllocatableResourcesRequest>,
    ) -> Result<Response<pr::AllocatableResourcesResponse>, Status> {
        self.gate().await?;
        Ok(Response::new(self.allocatable.lock().unwrap().clone()))
    }

    async fn get(
        &self,
        request: Request<pr::GetPodResourcesRequest>,
    ) -> Result<Response<pr::GetPodResourcesResponse>, Status> {
        self.gate().await?;
        let r = request.into_inner();
        let found = self
            .list
            .lock()
            .unwrap()
            .pod_resources
            .iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .cloned();
        match found {
            Some(pod) => Ok(Response::new(pr::GetPodResourcesResponse {
                pod_resources: Some(pod),
            })),
            // The kubelet's own error (a plain Go error: code Unknown).
            None => Err(Status::unknown(format!(
                "pod {} in namespace {} not found",
                r.pod_name, r.pod_namespace
            ))),
        }
    }
}

/// `resource` devices `ids`, on NUMA `nodes` (none: no topology).
pub fn devices(resource: &str, ids: &[&str], nodes: &[i64]) -> pr::ContainerDevices {
    pr::ContainerDevices {
        resource_name: resource.into(),
        device_ids: ids.iter().map(|s| s.to_string()).collect(),
        topology: (!nodes.is_empty()).then(|| pr::TopologyInfo {
            nodes: nodes.iter().map(|&id| pr::NumaNode { id }).collect(),
        }),
    }
}

/// What numa-shim logged since a [`LogCapture`] started. The process's global subscriber
/// writes to one buffer (thread-scoped subscribers lose events: tracing caches per call site
/// whether anyone listens); a capture reads what came after its start, and captures run one
/// at a time.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>, usize);

/// Keeps a [`LogCapture`] the only one in the process.
pub struct CaptureGuard {
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_CAPTURE: Mutex<()> = Mutex::new(());
static BUFFER: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();

impl LogCapture {
    /// Captures the logs from now until the guard goes.
    pub fn start() -> (Self, CaptureGuard) {
        let alone = ONE_CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
        let buffer = BUFFER.get_or_init(|| {
            let buffer = Arc::new(Mutex::new(Vec::new()));
            let subscriber = tracing_subscriber::fmt()
                .with_writer(LogCapture(buffer.clone(), 0))
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            buffer
        });
        let start = buffer.lock().unwrap_or_else(|e| e.into_inner()).len();
        (
            LogCapture(buffer.clone(), start),
            CaptureGuard { _alone: alone },
        )
    }

    pub fn text(&self) -> String {
        let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&all[self.1.min(all.len())..]).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = Self;
    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

//! The tonic `v1.PodResourcesLister` service: rate limit, snapshot under the lock, build the
//! answer without it, merge the kubelet's devices and dynamic resources.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::convert::{allocatable_response, list_response, pod_resources};
use super::kubelet::{merge_allocatable, merge_list, merge_pod, KubeletSource};
use super::limit::RateLimiter;
use super::snapshot::{RegistrySource, Snapshot};

use super::{Options, PodResourcesError, RATE_LIMIT_MESSAGE};
use crate::proto::podresources::v1 as pr;
use pr::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};

/// Largest message sent or accepted (the kubelet's `podresources.DefaultMaxMsgSize`, 16 MiB).
pub const MAX_MESSAGE: usize = 16 << 20;

/// The service over a registry source.
#[derive(Debug)]
pub struct PodResourcesService<S> {
    source: S,
    limiter: RateLimiter,
    kubelet: Option<KubeletSource>,
    /// The last `List` answer and the registry epoch it was built at.
    published: Mutex<Option<(u64, Arc<pr::ListPodResourcesResponse>)>>,
}

impl<S: RegistrySource> PodResourcesService<S> {
    pub fn new(source: S, options: &Options) -> Self {
        Self {
            source,
            limiter: RateLimiter::new(options.qps, options.burst),
            kubelet: options
                .kubelet_socket
                .as_ref()
                .map(|p| KubeletSource::new(p, options.kubelet_timeout)),
            published: Mutex::new(None),
        }
    }

    /// numa-shim's part of the `List` answer: the published one while the registry epoch is
    /// unchanged, else captured (under the registry lock) and built (without it) afresh.
    pub fn current_list(&self) -> Arc<pr::ListPodResourcesResponse> {
        let epoch = self.source.epoch();
        {
            let published = self.published.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(now), Some((at, response))) = (epoch, published.as_ref()) {
                if *at == now {
                    return response.clone();
                }
            }
        }
        let (epoch, snapshot) = self.source.capture();
        let response = Arc::new(list_response(&snapshot));
        if let Some(epoch) = epoch {
            let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
            // Keep the newest: a slower builder of an older epoch must not win.
            if published.as_ref().is_none_or(|(at, _)| *at < epoch) {
                *published = Some((epoch, response.clone()));
            }
        }
        response
    }

    /// The `List` answer (no rate limit): what `List` sends.
    pub async fn list_pods(&self) -> pr::ListPodResourcesResponse {
        let mut response = Arc::unwrap_or_clone(self.current_list());
        if let Some(kubelet) = &self.kubelet {
            if let Some(theirs) = kubelet.list().await {
                merge_list(&mut response, &theirs);
            }
        }
        response
    }

    fn admit(&self, method: &'static str) -> Result<(), Status> {
        if self.limiter.allow() {
            Ok(())
        } else {
            debug!(method, "pod-resources call rejected by rate limit");
            Err(Status::resource_exhausted(RATE_LIMIT_MESSAGE))
        }
    }
}

#[tonic::async_trait]
impl<S: RegistrySource> PodResourcesLister for PodResourcesService<S> {
    async fn list(
        &self,
        _request: Request<pr::ListPodResourcesRequest>,
    ) -> Result<Response<pr::ListPodResourcesResponse>, Status> {
        self.admit("List")?;
        Ok(Response::new(self.list_pods().await))
    }

    async fn get_allocatable_resources(
        &self,
        _request: Request<pr::AllocatableResourcesRequest>,
    ) -> Result<Response<pr::AllocatableResourcesResponse>, Status> {
        self.admit("GetAllocatableResources")?;
        let (cpus, blocks) = self
            .source
            .with_registry(|r| (r.node().allocatable_cpus(), r.node().allocatable_memory()));
        let mut response = allocatable_response(&cpus, &blocks);
        if let Some(kubelet) = &self.kubelet {
            if let Some(theirs) = kubelet.allocatable().await {
                merge_allocatable(&mut response, &theirs);
            }
        }
        Ok(Response::new(response))
    }

    async fn get(
        &self,
        request: Request<pr::GetPodResourcesRequest>,
    ) -> Result<Response<pr::GetPodResourcesResponse>, Status> {
        self.admit("Get")?;
        let req = request.into_inner();
        let entry = self
            .source
            .with_registry(|r| Snapshot::capture_pod(r, &req.pod_namespace, &req.pod_name))
            .ok_or_else(|| Status::not_found(not_found(&req.pod_name, &req.pod_namespace)))?;
        let mut pod = pod_resources(&entry);
        if let Some(kubelet) = &self.kubelet {
            if let Some(theirs) = kubelet.get(&req.pod_namespace, &req.pod_name).await {
                merge_pod(&mut pod, &theirs);
            }
        }
        Ok(Response::new(pr::GetPodResourcesResponse {
            pod_resources: Some(pod),
        }))
    }
}

/// The kubelet's message for `Get` of an unknown pod.
pub fn not_found(name: &str, namespace: &str) -> String {
    format!("pod {name} in namespace {namespace} not found")
}

/// Serves `service` on `listener` until `shutdown` completes.
pub async fn serve<S: RegistrySource>(
    listener: UnixListener,
    service: PodResourcesService<S>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PodResourcesError> {
    let svc = PodResourcesListerServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

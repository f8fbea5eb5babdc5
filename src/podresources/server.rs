//! The tonic `v1.PodResourcesLister` service: rate limit, snapshot under the lock, build the
//! answer without it, merge the kubelet's devices and dynamic resources. `List` is routed
//! before tonic's generated server so that the published bytes go out as they are.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderValue;
use http_body::Frame;
use http_body_util::StreamBody;
use tonic::server::NamedService;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::convert::{allocatable_response, pod_resources};
use super::kubelet::{list_has_extras, merge_allocatable, merge_list, merge_pod, KubeletSource};
use super::limit::RateLimiter;
use super::published::{self, Published};
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
    /// numa-shim's part of the `List` answer, encoded. Held while it is rebuilt, so that
    /// concurrent `List`s after a change share one rebuild.
    published: Mutex<Published>,
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
            published: Mutex::new(Published::default()),
        }
    }

    /// numa-shim's part of the `List` answer as a framed gRPC message: the published bytes
    /// while the registry epoch is unchanged, else rebuilt (only pods that changed are copied
    /// under the registry lock and encoded again).
    pub fn current_list(&self) -> Bytes {
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        published.current(&self.source)
    }

    /// The `List` answer (no rate limit), decoded: what `List` sends.
    pub async fn list_pods(&self) -> Result<pr::ListPodResourcesResponse, Status> {
        let framed = self.list_framed().await?;
        published::decode(&framed).map_err(|e| Status::internal(format!("numa-shim: {e}")))
    }

    /// The `List` answer (no rate limit) as a framed gRPC message: the published bytes, or,
    /// when the kubelet answered, those merged with its devices and dynamic resources.
    async fn list_framed(&self) -> Result<Bytes, Status> {
        let ours = self.current_list();
        let Some(kubelet) = &self.kubelet else {
            return Ok(ours);
        };
        // Without devices or dynamic resources the merge changes nothing: the published bytes
        // go out as they are.
        let Some(theirs) = kubelet.list().await.filter(list_has_extras) else {
            return Ok(ours);
        };
        let mut response =
            published::decode(&ours).map_err(|e| Status::internal(format!("numa-shim: {e}")))?;
        merge_list(&mut response, &theirs);
        Ok(published::frame(&response))
    }

    /// `List` as an HTTP response carrying the framed answer, bypassing tonic's encoder.
    async fn list_http(&self) -> http::Response<tonic::body::Body> {
        let framed = match self.admit("List") {
            Ok(()) => self.list_framed().await,
            Err(status) => Err(status),
        };
        match framed.and_then(|f| within_limit(f, MAX_MESSAGE)) {
            Ok(framed) => ok_response(framed),
            Err(status) => status.into_http(),
        }
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
        Ok(Response::new(self.list_pods().await?))
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

/// A framed answer larger than the 16 MiB limit is refused with OUT_OF_RANGE, the code tonic
/// gives a message it cannot encode (RESOURCE_EXHAUSTED would read as the rate limit, which a
/// client retries).
fn within_limit(framed: Bytes, limit: usize) -> Result<Bytes, Status> {
    let size = framed.len().saturating_sub(crate::relay::grpc::PREFIX);
    if size > limit {
        return Err(Status::out_of_range(format!(
            "numa-shim: List answer is {size} bytes, over the {limit}-byte message limit"
        )));
    }
    Ok(framed)
}

/// A unary gRPC answer: the framed message, then `grpc-status: 0` in the trailers.
fn ok_response(framed: Bytes) -> http::Response<tonic::body::Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, Infallible>(Frame::data(framed)),
        Ok(Frame::trailers(trailers)),
    ];
    let body = tonic::body::Body::new(StreamBody::new(tokio_stream::iter(frames)));
    let mut response = http::Response::new(body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The gRPC path of `List`.
const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// tonic's generated server with `List` answered from the published bytes first.
struct Routed<S> {
    service: Arc<PodResourcesService<S>>,
    generated: PodResourcesListerServer<PodResourcesService<S>>,
}

impl<S> Clone for Routed<S> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            generated: self.generated.clone(),
        }
    }
}

impl<S> NamedService for Routed<S> {
    const NAME: &'static str = "v1.PodResourcesLister";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S: RegistrySource> tower::Service<http::Request<tonic::body::Body>> for Routed<S> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path() == LIST_PATH {
            let service = self.service.clone();
            return Box::pin(async move { Ok(service.list_http().await) });
        }
        Box::pin(self.generated.call(req))
    }
}

/// Serves `service` on `listener` until `shutdown` completes.
pub async fn serve<S: RegistrySource>(
    listener: UnixListener,
    service: PodResourcesService<S>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), PodResourcesError> {
    let service = Arc::new(service);
    let generated = PodResourcesListerServer::from_arc(service.clone())
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let svc = Routed { service, generated };
    Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_over_the_limit_are_out_of_range() {
        let framed = Bytes::from(vec![0u8; 5 + 11]);
        assert_eq!(within_limit(framed.clone(), 11).unwrap(), framed);
        let err = within_limit(framed, 10).unwrap_err();
        assert_eq!(err.code(), tonic::Code::OutOfRange);
        assert!(err.message().contains("11 bytes"), "{}", err.message());
    }
}

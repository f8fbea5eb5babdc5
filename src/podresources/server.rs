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
use tokio_stream::StreamExt as _;
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
pub use crate::transport::limits::MAX_MESSAGE;

/// Why the server answers a call with an error instead of resources. The one place these
/// become gRPC statuses is [`AnswerError::status`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum AnswerError {
    /// Over the kubelet's rate limit (its message: clients know it and back off).
    #[error("{RATE_LIMIT_MESSAGE}")]
    RateLimited { method: &'static str },
    /// `Get` of a pod numa-shim does not know (the kubelet's message).
    #[error("pod {name} in namespace {namespace} not found")]
    NotFound { name: String, namespace: String },
    /// A `List` answer larger than the message limit.
    #[error("numa-shim: List answer is {size} bytes, over the {limit}-byte message limit")]
    TooLarge { size: usize, limit: usize },
    /// The published `List` bytes did not decode (they are numa-shim's own encoding).
    #[error("numa-shim: {0}")]
    Published(#[from] prost::DecodeError),
}

impl AnswerError {
    /// The status the client gets: RESOURCE_EXHAUSTED for the rate limit (the kubelet's code),
    /// NOT_FOUND, OUT_OF_RANGE for an answer too large to send (the code tonic gives a message
    /// it cannot encode; RESOURCE_EXHAUSTED would read as the rate limit, which a client
    /// retries), INTERNAL for numa-shim's own bytes.
    pub fn status(&self) -> Status {
        let code = match self {
            Self::RateLimited { .. } => tonic::Code::ResourceExhausted,
            Self::NotFound { .. } => tonic::Code::NotFound,
            Self::TooLarge { .. } => tonic::Code::OutOfRange,
            Self::Published(_) => tonic::Code::Internal,
        };
        Status::new(code, self.to_string())
    }
}

impl From<AnswerError> for Status {
    fn from(err: AnswerError) -> Self {
        err.status()
    }
}

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

    /// Devices numa-shim's device plugin front hides from the kubelet are shown with their true
    /// NUMA nodes (docs/devices.md, "The device plugin front").
    pub fn with_fronted(
        mut self,
        fronted: std::sync::Arc<crate::lifecycle::devices::FrontedTopology>,
    ) -> Self {
        self.kubelet = self.kubelet.map(|k| k.with_fronted(fronted));
        self
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
        Ok(published::decode(&framed).map_err(AnswerError::from)?)
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
        let mut response = published::decode(&ours).map_err(AnswerError::from)?;
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
            Err(AnswerError::RateLimited { method }.into())
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
            .ok_or_else(|| AnswerError::NotFound {
                name: req.pod_name.clone(),
                namespace: req.pod_namespace.clone(),
            })?;
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
    AnswerError::NotFound {
        name: name.to_string(),
        namespace: namespace.to_string(),
    }
    .to_string()
}

/// A framed answer larger than the 16 MiB limit is refused ([`AnswerError::TooLarge`]).
fn within_limit(framed: Bytes, limit: usize) -> Result<Bytes, Status> {
    let size = framed
        .len()
        .saturating_sub(crate::transport::framing::PREFIX);
    if size > limit {
        return Err(AnswerError::TooLarge { size, limit }.into());
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
    // The same `:authority` filter as the CRI socket: grpc C-core and grpc-java clients send
    // the socket path, which h2 (under tonic) would refuse.
    let incoming = UnixListenerStream::new(listener)
        .map(|accepted| accepted.map(crate::relay::AuthorityFilter::new));
    Server::builder()
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, shutdown)
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

    /// Every error the server answers with, and the code and words the client gets.
    #[test]
    fn every_answer_error_maps_to_one_status() {
        use prost::Message;
        let decode =
            crate::proto::podresources::v1::ListPodResourcesResponse::decode(&[0x0a, 0x05][..])
                .unwrap_err();
        let cases = [
            (
                AnswerError::RateLimited { method: "List" },
                tonic::Code::ResourceExhausted,
                RATE_LIMIT_MESSAGE.to_string(),
            ),
            (
                AnswerError::NotFound {
                    name: "web".into(),
                    namespace: "default".into(),
                },
                tonic::Code::NotFound,
                "pod web in namespace default not found".to_string(),
            ),
            (
                AnswerError::TooLarge {
                    size: 11,
                    limit: 10,
                },
                tonic::Code::OutOfRange,
                "numa-shim: List answer is 11 bytes, over the 10-byte message limit".to_string(),
            ),
            (
                AnswerError::Published(decode.clone()),
                tonic::Code::Internal,
                format!("numa-shim: {decode}"),
            ),
        ];
        for (err, code, message) in cases {
            let status = err.status();
            assert_eq!((status.code(), status.message()), (code, message.as_str()));
        }
    }
}

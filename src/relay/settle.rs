//! After a decoded call was cut off (the caller's deadline passed or it hung up), what did the
//! runtime do? numa-shim cancelled its call to the runtime, but the runtime may have created
//! the sandbox or container anyway. This module asks the runtime by the request's metadata —
//! its own ListPodSandbox / ListContainers calls, encoded here, never a re-encoding of the
//! caller's request — and turns the answer into the outcome the hook learns.
//!
//! The rule (ARCHITECTURE.md, "Deadlines and cancellation"): a reservation is released when
//! the runtime, asked twice with [`Settle::delay`] between, lists no such object; an object it
//! lists is committed as if the call had succeeded; while the runtime does not answer, the
//! question is asked again, but never past [`Settle::limit`] after the cut-off: then the
//! reservation is released unconfirmed (a runtime that stays silent that long holds no CPU
//! of numa-shim's; every lookup still open is reset). Stop*, Remove* and
//! UpdateContainerResources are not asked about: a cut-off Stop/Remove keeps what it would have
//! released until the caller retries it (the kubelet always does), which can never double-grant.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request};
use http_body_util::BodyExt;
use prost::Message;
use tonic::Status;
use tracing::{debug, info, warn};

use super::error::RelayError;
use super::grpc;
use super::hook::{CriRequest, CriResponse, Outcome};
use super::upstream::Upstream;
use crate::proto::cri::v1 as cri;

/// How a cut-off call is settled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settle {
    /// Time between the two lookups that must both find nothing before a release: how long a
    /// runtime may take to finish a call after it was cancelled.
    pub(crate) delay: Duration,
    /// Deadline of each lookup call.
    pub(crate) timeout: Duration,
    /// Longest wait between lookups while the runtime does not answer.
    pub(crate) max_backoff: Duration,
    /// Longest time after the cut-off a reservation is kept while the runtime has not said
    /// what it did: the bound on CPUs held for a call whose caller gave up.
    pub(crate) limit: Duration,
}

/// Default [`Settle::limit`].
pub const DEFAULT_SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// What settling a cut-off call did with its reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Not a call that creates anything: the cut-off status as it is.
    NotAsked,
    /// The runtime lists the object: committed.
    Kept,
    /// The runtime listed nothing, twice: released.
    Released,
    /// The runtime did not say within the limit: released.
    Unconfirmed,
}

impl Settled {
    /// The `result` label of `numa_shim_relay_settled_total`, if counted.
    pub(crate) fn label(self) -> Option<&'static str> {
        match self {
            Self::NotAsked => None,
            Self::Kept => Some("kept"),
            Self::Released => Some("released"),
            Self::Unconfirmed => Some("released_unconfirmed"),
        }
    }
}

/// Default [`Settle::delay`].
pub const DEFAULT_SETTLE_DELAY: Duration = Duration::from_secs(2);

impl Default for Settle {
    fn default() -> Self {
        Self {
            delay: DEFAULT_SETTLE_DELAY,
            timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(30),
            limit: DEFAULT_SETTLE_LIMIT,
        }
    }
}

/// What the runtime shows of a cut-off request.
#[derive(Debug, Clone, PartialEq)]
enum Found {
    /// It exists: the answer the call would have had.
    Yes(CriResponse),
    /// The runtime lists nothing of it.
    No,
}

impl Settle {
    /// The outcome the hook learns for `request`, cut off with `status`: waits until the
    /// runtime has answered whether it created the object, at most [`Settle::limit`].
    pub(crate) async fn outcome(
        &self,
        upstream: &Upstream,
        request: &CriRequest,
        status: Status,
    ) -> (Outcome, Settled) {
        let cut_off = Outcome {
            status,
            response: None,
        };
        if !matches!(
            request,
            CriRequest::RunPodSandbox(_) | CriRequest::CreateContainer(_)
        ) {
            return (cut_off, Settled::NotAsked);
        }
        // Leaving the timeout drops the lookup in flight, which resets its stream.
        match tokio::time::timeout(self.limit, self.found(upstream, request)).await {
            Ok(Found::Yes(response)) => (found(response), Settled::Kept),
            Ok(Found::No) => {
                info!("runtime has nothing of the cut-off call: releasing");
                (cut_off, Settled::Released)
            }
            Err(_) => {
                warn!(
                    limit_ms = self.limit.as_millis(),
                    "runtime did not say what it did with the cut-off call within the settle limit: releasing"
                );
                (cut_off, Settled::Unconfirmed)
            }
        }
    }

    /// Whether the runtime holds the object: asked at once and again [`Settle::delay`] later.
    async fn found(&self, upstream: &Upstream, request: &CriRequest) -> Found {
        if let Found::Yes(response) = self.ask_until_answered(upstream, request).await {
            return Found::Yes(response);
        }
        tokio::time::sleep(self.delay).await;
        self.ask_until_answered(upstream, request).await
    }

    /// Asks until the runtime answers, backing off while it does not.
    async fn ask_until_answered(&self, upstream: &Upstream, request: &CriRequest) -> Found {
        let mut wait = Duration::from_millis(200);
        loop {
            match tokio::time::timeout(self.timeout, lookup(upstream, request)).await {
                Ok(Ok(found)) => return found,
                Ok(Err(err)) => {
                    warn!(error = %err, "cannot ask the runtime about a cut-off call; keeping its reservation")
                }
                Err(_) => {
                    warn!(
                        timeout_ms = self.timeout.as_millis(),
                        "runtime did not answer about a cut-off call; keeping its reservation"
                    )
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.max_backoff);
        }
    }
}

fn found(response: CriResponse) -> Outcome {
    info!(
        ?response,
        "runtime created the object of the cut-off call: keeping it"
    );
    Outcome {
        status: Status::ok(""),
        response: Some(response),
    }
}

/// One lookup of the object `request` would have created.
async fn lookup(upstream: &Upstream, request: &CriRequest) -> Result<Found, RelayError> {
    match request {
        CriRequest::RunPodSandbox(req) => {
            let want = req.config.as_ref().and_then(|c| c.metadata.clone());
            let list: cri::ListPodSandboxResponse = call(
                upstream,
                "ListPodSandbox",
                &cri::ListPodSandboxRequest::default(),
            )
            .await?;
            let hit = list.items.into_iter().find(|s| s.metadata == want);
            debug!(found = hit.is_some(), "looked for the sandbox");
            Ok(hit.map_or(Found::No, |s| {
                Found::Yes(CriResponse::RunPodSandbox(cri::RunPodSandboxResponse {
                    pod_sandbox_id: s.id,
                }))
            }))
        }
        CriRequest::CreateContainer(req) => {
            let want = req.config.as_ref().and_then(|c| c.metadata.clone());
            let filter = cri::ContainerFilter {
                pod_sandbox_id: req.pod_sandbox_id.clone(),
                ..Default::default()
            };
            let list: cri::ListContainersResponse = call(
                upstream,
                "ListContainers",
                &cri::ListContainersRequest {
                    filter: Some(filter),
                },
            )
            .await?;
            let hit = list
                .containers
                .into_iter()
                .find(|c| c.pod_sandbox_id == req.pod_sandbox_id && c.metadata == want);
            debug!(found = hit.is_some(), "looked for the container");
            Ok(hit.map_or(Found::No, |c| {
                Found::Yes(CriResponse::CreateContainer(cri::CreateContainerResponse {
                    container_id: c.id,
                }))
            }))
        }
        _ => Ok(Found::No),
    }
}

/// numa-shim's own unary RuntimeService call.
async fn call<Req: Message, Resp: Message + Default>(
    upstream: &Upstream,
    method: &str,
    request: &Req,
) -> Result<Resp, RelayError> {
    let path = format!("/runtime.v1.RuntimeService/{method}");
    let malformed = |reason: String| RelayError::Malformed {
        method: path.clone(),
        reason,
    };
    let body = grpc::full_body(grpc::frame(&request.encode_to_vec()), None);
    let mut req = Request::post(format!("http://localhost{path}"))
        .body(body)
        .map_err(|e| malformed(e.to_string()))?;
    let headers = req.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    let response = upstream.send(&path, req).await?;
    let (parts, body) = response.into_parts();
    let collected = body
        .collect()
        .await
        .map_err(|source| RelayError::RuntimeResponse {
            method: path.clone(),
            source,
        })?;
    let status = grpc::response_status(&parts.headers, collected.trailers());
    if status.code() != tonic::Code::Ok {
        return Err(RelayError::Lookup {
            method: path,
            code: status.code(),
            message: status.message().to_string(),
        });
    }
    let data: Bytes = collected.to_bytes();
    let message = grpc::unframe(&data).map_err(|e| malformed(format!("{e:?}")))?;
    Resp::decode(message).map_err(|e| malformed(e.to_string()))
}

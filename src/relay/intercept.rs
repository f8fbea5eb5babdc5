//! Calls the relay decodes: collect the one request message, decode it once, ask the hook,
//! append the patch on the wire, forward, and hand the runtime's outcome to the hook with what
//! it decided. One way: never re-encodes a request from its decoded form, never decodes the
//! patched bytes again, and never alters the runtime's response bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::oneshot;
use tracing::{debug, warn, Instrument};

use super::error::RelayError;
use super::grpc::{self, RelayBody, Unframe};
use super::hook::{CriRequest, CriResponse, Decision, Hook, Method, Outcome};
use super::{patch, Shared};

/// Handles one call of a decoded `method`; every failure becomes a gRPC status response. Also
/// returns the time spent waiting for the runtime (zero when it was not asked).
///
/// The runtime call runs in a task of its own so that the hook always learns an outcome. If the
/// caller's `grpc-timeout` passes first, the caller gets DEADLINE_EXCEEDED at once; if the
/// caller hangs up (this future is dropped), the task sees it. Either way the runtime call is
/// cancelled (its stream reset) and the outcome is settled by asking the runtime
/// ([`super::settle`]).
pub(crate) async fn handle<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<Incoming>,
) -> (Response<RelayBody>, Duration) {
    let started = Instant::now();
    let deadline = req
        .headers()
        .get("grpc-timeout")
        .and_then(grpc::parse_timeout)
        .map(|limit| started + limit);
    match prepare(&shared, method, req, started, deadline).await {
        Ok(Prepared::Forward(req, decoded, decided)) => {
            let (reply, answer) = oneshot::channel();
            // Dropped with this future: the caller hung up.
            let (_caller, hangup) = oneshot::channel::<()>();
            let cut = Cut { deadline, hangup };
            tokio::spawn(
                forward(shared, method, req, decoded, decided, cut, reply)
                    .instrument(tracing::Span::current()),
            );
            answer.await.unwrap_or_else(|_| {
                let err = RelayError::Task {
                    method: method.name().to_string(),
                    reason: "the relaying task ended without an answer".to_string(),
                };
                warn!(error = %err, "relay task failed");
                (grpc::status_response(&err.to_status()), Duration::ZERO)
            })
        }
        Ok(Prepared::Answer(status)) => (grpc::status_response(&status), Duration::ZERO),
        Err(err) => {
            warn!(error = %err, "request refused");
            (grpc::status_response(&err.to_status()), Duration::ZERO)
        }
    }
}

/// What to do after the request is read and the hook has spoken. Short-lived, so the size
/// difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Prepared<D> {
    /// Forward this request (patched on the wire); the caller's request as decoded and what
    /// the hook decided go to `after`.
    Forward(Request<RelayBody>, CriRequest, Option<D>),
    /// Answer the caller directly.
    Answer(tonic::Status),
}

/// What can cut a forwarded call off before the runtime answers.
struct Cut {
    /// The caller's deadline (`grpc-timeout` from when the call arrived).
    deadline: Option<Instant>,
    /// Resolves when the caller has gone (its sender is dropped with the call's future).
    hangup: oneshot::Receiver<()>,
}

/// How the wait for the runtime ended.
enum Ended {
    Answered(Result<(Response<RelayBody>, Outcome), RelayError>),
    Deadline,
    HungUp,
}

async fn prepare<H: Hook>(
    shared: &Shared<H>,
    method: Method,
    req: Request<Incoming>,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<Prepared<H::Decided>, RelayError> {
    let path = req.uri().path().to_string();
    let (mut parts, body) = req.into_parts();
    let body = collect(&path, body, shared.max_message).await?;
    let message = unframe(&path, &parts.headers, &body)?;
    let decoded = decode(&path, method, &message)?;
    let (body, decided) = if method.is_intercepted() {
        let before = shared.hook.before(&decoded);
        let decision = match deadline {
            // Leaving the timeout drops the decision: the hook holds nothing of it.
            Some(deadline) => tokio::time::timeout_at(deadline.into(), before)
                .await
                .map_err(|_| {
                    if let Some(metrics) = &shared.metrics {
                        metrics.decision_failed(method.name(), "deadline");
                    }
                    RelayError::Deadline {
                        method: path.clone(),
                        elapsed_ms: started.elapsed().as_millis(),
                    }
                })?,
            None => before.await,
        };
        match decision {
            Decision::Continue => (body, None),
            Decision::Reject(status) => {
                debug!(code = ?status.code(), "hook rejected call");
                return Ok(Prepared::Answer(status));
            }
            Decision::Forward { patch, decided } => (
                apply(method, &patch, &message).unwrap_or(body),
                Some(decided),
            ),
        }
    } else {
        (body, None)
    };
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Ok(Prepared::Forward(
        Request::from_parts(parts, grpc::full_body(body, None)),
        decoded,
        decided,
    ))
}

/// The one uncompressed message of a unary request body.
fn unframe(path: &str, headers: &http::HeaderMap, body: &Bytes) -> Result<Bytes, RelayError> {
    grpc::unframe(body).map_err(|e| match e {
        Unframe::Compressed => RelayError::Compressed {
            method: path.to_string(),
            encoding: headers
                .get("grpc-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("unknown")
                .to_string(),
        },
        Unframe::Malformed(reason) => RelayError::Malformed {
            method: path.to_string(),
            reason,
        },
    })
}

fn decode(path: &str, method: Method, message: &[u8]) -> Result<CriRequest, RelayError> {
    CriRequest::decode(method, message).map_err(|e| RelayError::Malformed {
        method: path.to_string(),
        reason: e.to_string(),
    })
}

/// The framed body with `patch` appended to `message` (protobuf merge: the runtime reads the
/// patched fields, everything else as sent); `None` if the patch sets nothing, so the original
/// bytes go out.
fn apply(method: Method, patch: &super::hook::Patch, message: &[u8]) -> Option<Bytes> {
    let extra = patch::encode(method, patch);
    if extra.is_empty() {
        return None;
    }
    let mut patched = BytesMut::from(message);
    patched.extend_from_slice(&extra);
    debug!(patch = ?patch, "request patched");
    Some(grpc::frame(&patched))
}

/// Reads a whole request body, refusing more than `limit` bytes.
async fn collect(path: &str, mut body: Incoming, limit: usize) -> Result<Bytes, RelayError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|source| RelayError::RequestBody {
            method: path.to_string(),
            source,
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(RelayError::TooLarge {
                    method: path.to_string(),
                    size: buf.len() + data.len(),
                    limit,
                });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Forwards, reads the whole (unary) response, tells the hook, and replies with the response as
/// is and the time the runtime took. A call cut off by the caller's deadline or hang-up is
/// cancelled at the runtime; the caller is answered first, the hook once the runtime has said
/// what it holds of the call.
async fn forward<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<RelayBody>,
    request: CriRequest,
    decided: Option<H::Decided>,
    cut: Cut,
    reply: oneshot::Sender<(Response<RelayBody>, Duration)>,
) {
    let path = req.uri().path().to_string();
    let sent = Instant::now();
    let expired = async {
        match cut.deadline {
            Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
            None => std::future::pending().await,
        }
    };
    // Leaving the select drops the exchange, which resets the runtime's stream (CANCEL).
    let ended = tokio::select! {
        result = exchange(&shared, &path, method, req) => Ended::Answered(result),
        () = expired => Ended::Deadline,
        _ = cut.hangup => Ended::HungUp,
    };
    let runtime = sent.elapsed();
    let status = match ended {
        Ended::Answered(result) => {
            shared.runtime_answered(&result);
            let (response, outcome) = match result {
                Ok(ok) => ok,
                Err(err) => {
                    let status = err.to_status();
                    warn!(error = %err, "runtime call failed");
                    let outcome = Outcome {
                        status: status.clone(),
                        response: None,
                    };
                    (grpc::status_response(&status), outcome)
                }
            };
            debug!(code = ?outcome.status.code(), "runtime answered");
            shared.hook.after(&request, decided, &outcome).await;
            let _ = reply.send((response, runtime));
            return;
        }
        Ended::Deadline => {
            let err = RelayError::RuntimeDeadline {
                method: path,
                elapsed_ms: runtime.as_millis(),
            };
            warn!(error = %err, "runtime call cancelled at the caller's deadline");
            let status = err.to_status();
            let _ = reply.send((grpc::status_response(&status), runtime));
            status
        }
        Ended::HungUp => {
            warn!(method = %path, "caller hung up; runtime call cancelled");
            tonic::Status::cancelled(format!("numa-shim: the caller cancelled {path}"))
        }
    };
    let name = method.name();
    let reason = if status.code() == tonic::Code::Cancelled {
        "hangup"
    } else {
        "deadline"
    };
    if let Some(metrics) = &shared.metrics {
        metrics.relay_cancelled(name, reason);
    }
    let (outcome, settled) = shared
        .settle
        .outcome(&shared.upstream, &request, status)
        .await;
    if let (Some(metrics), Some(label)) = (&shared.metrics, settled.label()) {
        metrics.relay_settled(name, label);
    }
    debug!(code = ?outcome.status.code(), ?settled, "cut-off call settled");
    shared.hook.after(&request, decided, &outcome).await;
}

async fn exchange<H: Hook>(
    shared: &Shared<H>,
    path: &str,
    method: Method,
    req: Request<RelayBody>,
) -> Result<(Response<RelayBody>, Outcome), RelayError> {
    let response = shared.upstream.send(path, req).await?;
    let (parts, mut body) = response.into_parts();
    // Kept frame by frame, so the answer leaves in the shape it came (trailers-only or not).
    let mut replay = grpc::Replay::default();
    while let Some(frame) = body.frame().await {
        replay.push(frame.map_err(|source| RelayError::RuntimeResponse {
            method: path.to_string(),
            source,
        })?);
    }
    let status = grpc::response_status(&parts.headers, replay.trailers());
    let response = if status.code() == tonic::Code::Ok {
        let decoded = grpc::unframe(&replay.data())
            .ok()
            .and_then(|m| CriResponse::decode(method, &m).ok());
        if decoded.is_none() {
            warn!("runtime response did not decode; passing it on unchanged");
        }
        decoded
    } else {
        None
    };
    Ok((
        Response::from_parts(parts, grpc::boxed(replay)),
        Outcome { status, response },
    ))
}

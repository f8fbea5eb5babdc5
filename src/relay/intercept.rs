//! Calls the relay decodes: collect the one request message, decode it, ask the hook, patch
//! wire-preservingly, forward, and report the runtime's outcome to the hook. Never re-encodes
//! a request from its decoded form and never alters the runtime's response bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::{debug, warn, Instrument};

use super::error::RelayError;
use super::grpc::{self, RelayBody, Unframe};
use super::hook::{CriRequest, CriResponse, Decision, Hook, Method, Outcome};
use super::{patch, Shared};

/// Handles one call of a decoded `method`; every failure becomes a gRPC status response. Also
/// returns the time spent waiting for the runtime (zero when it was not asked).
pub(crate) async fn handle<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<Incoming>,
) -> (Response<RelayBody>, Duration) {
    match prepare(&shared, method, req).await {
        Ok(Prepared::Forward(req, forwarded)) => {
            // Spawned so that the hook always learns the outcome, even if the caller hangs up.
            let task = tokio::spawn(
                forward(shared, method, req, forwarded).instrument(tracing::Span::current()),
            );
            task.await.unwrap_or_else(|err| {
                warn!(error = %err, "relay task failed");
                let status = tonic::Status::internal("numa-shim: relay task failed");
                (grpc::status_response(&status), Duration::ZERO)
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
enum Prepared {
    /// Forward this request; the decoded form is what the runtime will see.
    Forward(Request<RelayBody>, CriRequest),
    /// Answer the caller directly.
    Answer(tonic::Status),
}

async fn prepare<H: Hook>(
    shared: &Shared<H>,
    method: Method,
    req: Request<Incoming>,
) -> Result<Prepared, RelayError> {
    let started = Instant::now();
    let path = req.uri().path().to_string();
    let (mut parts, body) = req.into_parts();
    let body = collect(&path, body, shared.max_message).await?;
    let message = unframe(&path, &parts.headers, &body)?;
    let decoded = decode(&path, method, &message)?;
    let (body, decoded) = if method.is_intercepted() {
        let deadline = parts
            .headers
            .get("grpc-timeout")
            .and_then(grpc::parse_timeout);
        let before = shared.hook.before(&decoded);
        let decision = match deadline {
            Some(limit) => {
                tokio::time::timeout(limit, before)
                    .await
                    .map_err(|_| RelayError::Deadline {
                        method: path.clone(),
                        elapsed_ms: started.elapsed().as_millis(),
                    })?
            }
            None => before.await,
        };
        match decision {
            Decision::Continue => (body, decoded),
            Decision::Reject(status) => {
                debug!(code = ?status.code(), "hook rejected call");
                return Ok(Prepared::Answer(status));
            }
            Decision::Patch(p) => apply(&path, method, &p, &message)?.unwrap_or((body, decoded)),
        }
    } else {
        (body, decoded)
    };
    parts.headers.remove(http::header::CONTENT_LENGTH);
    Ok(Prepared::Forward(
        Request::from_parts(parts, grpc::full_body(body, None)),
        decoded,
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

/// The framed body and decoded request with `patch` appended to `message`; `None` if the patch
/// sets nothing, so the original bytes go out.
fn apply(
    path: &str,
    method: Method,
    patch: &super::hook::Patch,
    message: &[u8],
) -> Result<Option<(Bytes, CriRequest)>, RelayError> {
    let extra = patch::encode(method, patch);
    if extra.is_empty() {
        return Ok(None);
    }
    let mut patched = BytesMut::from(message);
    patched.extend_from_slice(&extra);
    let decoded = decode(path, method, &patched)?;
    debug!(patch = ?patch, "request patched");
    Ok(Some((grpc::frame(&patched), decoded)))
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

/// Forwards, reads the whole (unary) response, tells the hook, and returns the response as is
/// with the time the runtime took.
async fn forward<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<RelayBody>,
    forwarded: CriRequest,
) -> (Response<RelayBody>, Duration) {
    let path = req.uri().path().to_string();
    let sent = Instant::now();
    let result = exchange(&shared, &path, method, req).await;
    let runtime = sent.elapsed();
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
    shared.hook.after(&forwarded, &outcome).await;
    (response, runtime)
}

async fn exchange<H: Hook>(
    shared: &Shared<H>,
    path: &str,
    method: Method,
    req: Request<RelayBody>,
) -> Result<(Response<RelayBody>, Outcome), RelayError> {
    let response = shared.upstream.send(path, req).await?;
    let (parts, body) = response.into_parts();
    let collected = body
        .collect()
        .await
        .map_err(|source| RelayError::RuntimeResponse {
            method: path.to_string(),
            source,
        })?;
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    let status = grpc::response_status(&parts.headers, trailers.as_ref());
    let response = if status.code() == tonic::Code::Ok {
        let decoded = grpc::unframe(&data)
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
        Response::from_parts(parts, grpc::full_body(data, trailers)),
        Outcome { status, response },
    ))
}

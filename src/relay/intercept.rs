//! Calls the relay decodes: collect the one request message, decode it, ask the hook, patch
//! wire-preservingly, forward, and report the runtime's outcome to the hook. Never re-encodes
//! a request from its decoded form and never alters the runtime's response bytes.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::{debug, warn, Instrument};

use super::error::RelayError;
use super::grpc::{self, RelayBody, Unframe};
use super::hook::{CriRequest, CriResponse, Decision, Hook, Method, Outcome};
use super::{patch, Shared};

/// Handles one call of a decoded `method`; every failure becomes a gRPC status response.
pub(crate) async fn handle<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<Incoming>,
) -> Response<RelayBody> {
    match prepare(&shared, method, req).await {
        Ok(Prepared::Forward(req, forwarded)) => {
            // Spawned so that the hook always learns the outcome, even if the caller hangs up.
            let task = tokio::spawn(
                forward(shared, method, req, forwarded).instrument(tracing::Span::current()),
            );
            task.await.unwrap_or_else(|err| {
                warn!(error = %err, "relay task failed");
                grpc::status_response(&tonic::Status::internal("numa-shim: relay task failed"))
            })
        }
        Ok(Prepared::Answer(status)) => grpc::status_response(&status),
        Err(err) => {
            warn!(error = %err, "request refused");
            grpc::status_response(&err.to_status())
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
    let deadline = req
        .headers()
        .get("grpc-timeout")
        .and_then(grpc::parse_timeout);
    let (mut parts, body) = req.into_parts();
    let body = collect(&path, body, shared.max_message).await?;
    let message = grpc::unframe(&body).map_err(|e| match e {
        Unframe::Compressed => RelayError::Compressed {
            method: path.clone(),
            encoding: parts
                .headers
                .get("grpc-encoding")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("unknown")
                .to_string(),
        },
        Unframe::Malformed(reason) => RelayError::Malformed {
            method: path.clone(),
            reason,
        },
    })?;
    let malformed = |e: prost::DecodeError| RelayError::Malformed {
        method: path.clone(),
        reason: e.to_string(),
    };
    let decoded = CriRequest::decode(method, &message).map_err(malformed)?;
    let (body, decoded) = if method.is_intercepted() {
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
            Decision::Patch(p) => {
                let extra = patch::encode(method, &p);
                if extra.is_empty() {
                    (body, decoded)
                } else {
                    let mut patched = BytesMut::from(&message[..]);
                    patched.extend_from_slice(&extra);
                    let decoded = CriRequest::decode(method, &patched).map_err(malformed)?;
                    debug!(patch = ?p, "request patched");
                    (grpc::frame(&patched), decoded)
                }
            }
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

/// Forwards, reads the whole (unary) response, tells the hook, and returns the response as is.
async fn forward<H: Hook>(
    shared: Arc<Shared<H>>,
    method: Method,
    req: Request<RelayBody>,
    forwarded: CriRequest,
) -> Response<RelayBody> {
    let path = req.uri().path().to_string();
    let (response, outcome) = match exchange(&shared, &path, method, req).await {
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
    response
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

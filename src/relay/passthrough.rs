//! Calls the relay does not decode: forwarded untouched, the response streamed back frame by
//! frame. The caller's `grpc-timeout` is enforced here too, as a grpc-go server would: a runtime
//! that ignores it (or never answers) does not keep the call, or its stream on the runtime
//! connection, past the caller's deadline.
//!
//! numa-shim's timer runs [`GRACE`] past the deadline, so that a runtime that honours
//! `grpc-timeout` itself still answers in its own words (the answer of a method numa-shim does
//! not rewrite passes unchanged); a caller with a timer of its own (grpc-go, tonic) resets its
//! stream at the deadline, which cancels the runtime call at once.
//!
//! - No response headers by then: the caller gets a trailers-only DEADLINE_EXCEEDED
//!   and the runtime call is dropped (h2 resets its stream, CANCEL).
//! - Headers came but the body (a streaming answer) is still running at the deadline: the
//!   caller's stream is reset with CANCEL and so is the runtime's.
//! - The caller goes away first: hyper drops the call, which resets the runtime's stream.
//!
//! Each of these is counted in `numa_shim_relay_cancelled_total`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::Sleep;
use tracing::{debug, warn};

use super::error::RelayError;
use super::grpc::{self, BoxError, RelayBody};
use super::Shared;
use crate::telemetry::Metrics;

/// How long after the caller's deadline numa-shim cuts a call the runtime has not ended.
pub(crate) const GRACE: Duration = Duration::from_millis(100);

/// Forwards a call untouched; the response streams back frame by frame. Also returns the time
/// until the runtime's response headers arrived.
pub(crate) async fn forward<H>(
    shared: &Shared<H>,
    path: &str,
    req: Request<Incoming>,
) -> (Response<RelayBody>, Duration) {
    let sent = Instant::now();
    let deadline = req
        .headers()
        .get("grpc-timeout")
        .and_then(grpc::parse_timeout)
        .map(|limit| sent + limit + GRACE);
    let method = method_of(path);
    // Counts a hang-up if this future is dropped before the runtime's headers came.
    let mut hangup = HangUp {
        metrics: shared.metrics.clone(),
        method,
    };
    let send = shared.upstream.send(path, req.map(grpc::boxed));
    let result = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline.into(), send).await {
            Ok(result) => result,
            Err(_) => {
                hangup.metrics = None;
                let err = RelayError::RuntimeDeadline {
                    method: path.to_string(),
                    elapsed_ms: sent.elapsed().as_millis(),
                };
                warn!(error = %err, "runtime call cancelled at the caller's deadline");
                if let Some(metrics) = &shared.metrics {
                    metrics.relay_cancelled(method, "deadline");
                }
                return (grpc::status_response(&err.to_status()), sent.elapsed());
            }
        },
        None => send.await,
    };
    hangup.metrics = None;
    let runtime = sent.elapsed();
    shared.runtime_answered(&result);
    let response = match result {
        Ok(response) => match deadline {
            Some(deadline) => response.map(|body| {
                grpc::boxed(Bounded {
                    body,
                    expiry: Box::pin(tokio::time::sleep_until(deadline.into())),
                    metrics: shared.metrics.clone(),
                    method: method.to_string(),
                })
            }),
            None => response.map(grpc::boxed),
        },
        Err(err) => {
            warn!(error = %err, "runtime call failed");
            grpc::status_response(&err.to_status())
        }
    };
    (response, runtime)
}

/// The method name of a path (`/runtime.v1.RuntimeService/Version` → `Version`), as the relay's
/// other metrics label it.
fn method_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or_default()
}

/// Counts a call dropped (its caller gone) while `metrics` is still set.
struct HangUp<'a> {
    metrics: Option<Arc<Metrics>>,
    method: &'a str,
}

impl Drop for HangUp<'_> {
    fn drop(&mut self) {
        if let Some(metrics) = &self.metrics {
            debug!(
                method = self.method,
                "caller hung up; runtime call cancelled"
            );
            metrics.relay_cancelled(self.method, "hangup");
        }
    }
}

/// A runtime response body that ends in a CANCEL reset when the caller's deadline passes.
struct Bounded<B> {
    body: B,
    expiry: Pin<Box<Sleep>>,
    metrics: Option<Arc<Metrics>>,
    method: String,
}

impl<B> Body for Bounded<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.expiry.as_mut().poll(cx).is_ready() {
            warn!(
                method = %self.method,
                "caller's deadline passed while the runtime's answer streamed; resetting both"
            );
            if let Some(metrics) = self.metrics.take() {
                metrics.relay_cancelled(&self.method, "deadline");
            }
            return Poll::Ready(Some(Err(h2::Error::from(h2::Reason::CANCEL).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

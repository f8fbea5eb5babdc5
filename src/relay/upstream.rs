//! The one multiplexed HTTP/2 connection to the container runtime, re-established on demand.
//! Sends requests as they are; never looks inside bodies.

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use http::{Request, Response};
use http_body::Body;
use tokio::net::UnixStream;
use tokio::sync::Mutex;
use tracing::{debug, info, warn};

use super::error::RelayError;
use super::grpc::RelayBody;
use crate::transport::limits;

mod coalesce;
mod stream;

use stream::RequestPump;
pub(crate) use stream::RuntimeBody;

/// How long connecting to the runtime socket plus the HTTP/2 handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest response header block accepted (grpc-go's default).
pub(crate) const MAX_HEADER_LIST: u32 = 16 << 20;

/// The runtime endpoint and its current connection.
///
/// A call only reads `current` to clone the live sender (a `std` lock held for the clone, never
/// across an `.await`); `dialling` makes the calls that find no live sender dial one at a time.
#[derive(Debug)]
pub(crate) struct Upstream {
    path: PathBuf,
    current: RwLock<Slot>,
    dialling: Mutex<()>,
}

/// The current connection, numbered so a stale failure cannot drop a newer connection.
#[derive(Debug, Default)]
struct Slot {
    generation: u64,
    sender: Option<SendRequest<Bytes>>,
}

impl Upstream {
    /// An upstream for the runtime socket at `path`; nothing is dialled until the first call.
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            current: RwLock::new(Slot::default()),
            dialling: Mutex::new(()),
        }
    }

    /// The runtime socket path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `req` and returns the runtime's response head with its streaming body. If the
    /// cached connection turns out to be closed before the request left, reconnects once.
    ///
    /// The request goes to h2 directly (not through hyper's client, whose dispatch task and
    /// body pipe cost a task hop each and split HEADERS and DATA into two writes).
    pub(crate) async fn send(
        &self,
        method: &str,
        req: Request<RelayBody>,
    ) -> Result<Response<RuntimeBody>, RelayError> {
        let (parts, body) = req.into_parts();
        let (generation, sender) = self.sender().await?;
        // `ready` fails when the connection has ended (h2 marks its streams when the connection
        // task stops): the one place a dead connection is noticed.
        let mut send = match sender.ready().await {
            Ok(send) => send,
            Err(err) => {
                debug!(generation, error = %err, "runtime connection closed before send, redialling");
                self.forget(generation);
                let (_, sender) = self.sender().await?;
                sender
                    .ready()
                    .await
                    .map_err(|source| self.call_error(method, source))?
            }
        };
        let mut head = Request::from_parts(parts, ());
        // What hyper's client did: a body of known size gets a `content-length` if it has none.
        if let Some(len) = body.size_hint().exact() {
            head.headers_mut()
                .entry(http::header::CONTENT_LENGTH)
                .or_insert_with(|| http::HeaderValue::from(len));
        }
        let eos = body.is_end_stream();
        let (response, tx) = send
            .send_request(head, eos)
            .map_err(|source| self.call_error(method, source))?;
        if !eos {
            RequestPump::new(body, tx).start().await;
        }
        let response = response
            .await
            .map_err(|source| self.call_error(method, source))?;
        let (parts, recv) = response.into_parts();
        let body = RuntimeBody::new(recv, &parts.headers);
        Ok(Response::from_parts(parts, body))
    }

    fn call_error(&self, method: &str, source: h2::Error) -> RelayError {
        RelayError::RuntimeCall {
            method: method.to_string(),
            path: self.path.clone(),
            source,
        }
    }

    /// The live sender, dialling a new connection when there is none or it closed.
    async fn sender(&self) -> Result<(u64, SendRequest<Bytes>), RelayError> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let _dialling = self.dialling.lock().await;
        // Another call may have dialled while this one waited.
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let generation = {
            let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
            slot.generation += 1;
            slot.sender = None;
            slot.generation
        };
        let sender = self.dial(generation).await?;
        let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if slot.generation == generation {
            slot.sender = Some(sender.clone());
        }
        Ok((generation, sender))
    }

    /// The cached sender and its generation, if there is one.
    fn live(&self) -> Option<(u64, SendRequest<Bytes>)> {
        let slot = self.current.read().unwrap_or_else(PoisonError::into_inner);
        let sender = slot.sender.as_ref()?;
        Some((slot.generation, sender.clone()))
    }

    /// Drops the sender of `generation` (known dead) so the next call redials.
    fn forget(&self, generation: u64) {
        let mut slot = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if slot.generation == generation {
            slot.sender = None;
        }
    }

    /// Connects and shakes hands with hyper's former client settings (push off, 1 MiB send
    /// buffer, 1024 locally reset streams remembered) and numa-shim's windows and limits.
    async fn dial(&self, generation: u64) -> Result<SendRequest<Bytes>, RelayError> {
        let unavailable = |source| RelayError::RuntimeUnavailable {
            path: self.path.clone(),
            source,
        };
        let handshake = async {
            let stream = UnixStream::connect(&self.path).await.map_err(unavailable)?;
            #[cfg(test)]
            let stream = tests::Counting::new(stream, &self.path);
            h2::client::Builder::new()
                .initial_window_size(limits::STREAM_WINDOW)
                .initial_connection_window_size(limits::CONNECTION_WINDOW)
                .max_frame_size(limits::MAX_FRAME)
                .max_header_list_size(MAX_HEADER_LIST)
                .max_send_buffer_size(1 << 20)
                .max_concurrent_reset_streams(1024)
                .max_local_error_reset_streams(Some(1024))
                .enable_push(false)
                .handshake::<_, Bytes>(coalesce::Coalesce::new(stream))
                .await
                .map_err(|source| RelayError::RuntimeHandshake {
                    path: self.path.clone(),
                    source,
                })
        };
        let (send, connection) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
            .await
            .map_err(|_| unavailable(std::io::ErrorKind::TimedOut.into()))??;
        let path = self.path.clone();
        tokio::spawn(async move {
            match connection.await {
                Ok(()) => info!(runtime = %path.display(), generation, "runtime connection closed"),
                Err(err) => {
                    warn!(runtime = %path.display(), generation, error = %err, "runtime connection failed")
                }
            }
        });
        info!(runtime = %self.path.display(), generation, "connected to runtime");
        Ok(send)
    }
}

#[cfg(test)]
mod tests;

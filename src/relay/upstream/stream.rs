//! One call's two halves on the runtime connection: the request body pumped into h2's send
//! stream, and the runtime's answer as an [`http_body::Body`].
//!
//! The first chunk of a request goes to h2 without waiting for send capacity, so that h2 writes
//! it together with the HEADERS frame when it opens the stream (one `writev` instead of two;
//! hyper's client waits for capacity, which a stream only gets once it is open). Every later
//! chunk waits for capacity first, as hyper does, so at most one chunk is ever queued beyond
//! the runtime's window.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tracing::{debug, trace};

use super::super::grpc::RelayBody;

/// Forwards a request body into its h2 stream. Polled once inline by the caller (a unary call's
/// single DATA frame is usually there already); spawned for whatever is left.
pub(crate) struct RequestPump {
    body: RelayBody,
    tx: SendStream<Bytes>,
    first: bool,
}

impl RequestPump {
    pub(crate) fn new(body: RelayBody, tx: SendStream<Bytes>) -> Self {
        Self {
            body,
            tx,
            first: true,
        }
    }

    /// Forwards what the body has now in the caller's task; spawns the pump for the rest.
    pub(crate) async fn start(mut self) {
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut self).poll(cx).is_pending())).await;
        if pending {
            tokio::spawn(self);
        }
    }

    /// Waits for send capacity as hyper's body pipe did; `false` when the stream can take no
    /// more (finished, or reset by the runtime).
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        self.tx.reserve_capacity(1);
        if self.tx.capacity() > 0 {
            if let Poll::Ready(reset) = self.tx.poll_reset(cx) {
                debug!(reason = ?reset.ok(), "runtime reset the stream while sending the request");
                return Poll::Ready(false);
            }
            return Poll::Ready(true);
        }
        loop {
            match ready!(self.tx.poll_capacity(cx)) {
                Some(Ok(0)) => {}
                Some(Ok(_)) => return Poll::Ready(true),
                Some(Err(err)) => {
                    debug!(error = %err, "runtime stream ended while sending the request");
                    return Poll::Ready(false);
                }
                None => return Poll::Ready(false),
            }
        }
    }
}

impl Future for RequestPump {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = self.get_mut();
        loop {
            if !me.first && !ready!(me.poll_room(cx)) {
                return Poll::Ready(());
            }
            let frame = ready!(Pin::new(&mut me.body).poll_frame(cx));
            me.first = false;
            let sent = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let eos = me.body.is_end_stream();
                        match me.tx.send_data(data, eos) {
                            Ok(()) if !eos => continue,
                            other => other,
                        }
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => {
                            me.tx.reserve_capacity(0);
                            me.tx.send_trailers(trailers)
                        }
                        Err(_) => {
                            trace!("discarding an unknown request frame");
                            continue;
                        }
                    },
                },
                Some(Err(err)) => {
                    let reason = reason_in(&*err).unwrap_or(Reason::INTERNAL_ERROR);
                    debug!(error = %err, ?reason, "request body failed; resetting the runtime stream");
                    me.tx.send_reset(reason);
                    Ok(())
                }
                // The body ended without END_STREAM on its last frame: an empty DATA frame ends it.
                None => me.tx.send_data(Bytes::new(), true),
            };
            if let Err(err) = sent {
                debug!(error = %err, "sending the request to the runtime failed");
            }
            return Poll::Ready(());
        }
    }
}

/// The h2 reason somewhere in an error's chain (a client's RST_STREAM seen by hyper).
fn reason_in(err: &(dyn std::error::Error + 'static)) -> Option<Reason> {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.reason();
        }
        cause = e.source();
    }
    None
}

/// The runtime's response body: DATA frames (their flow-control capacity given back as they are
/// read), then trailers. Behaves as hyper's client body did: a RST_STREAM with NO_ERROR ends
/// the body instead of failing it (RFC 9113 §8.1: an early response), and the size hint is what
/// is left of the response's `content-length` (zero when the HEADERS frame ended the stream), so
/// hyper's server adds no header the runtime did not send.
#[derive(Debug)]
pub(crate) struct RuntimeBody {
    recv: RecvStream,
    data_done: bool,
    remaining: Option<u64>,
}

impl RuntimeBody {
    pub(crate) fn new(recv: RecvStream, headers: &HeaderMap) -> Self {
        let remaining = content_length(headers).or(recv.is_end_stream().then_some(0));
        Self {
            recv,
            data_done: false,
            remaining,
        }
    }
}

/// `content-length` when every value of it is the same number (hyper's rule).
fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut length = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        for part in value.to_str().ok()?.split(',') {
            let n: u64 = part.trim().parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    length
}

impl Body for RuntimeBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let me = self.get_mut();
        if !me.data_done {
            match ready!(me.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = me.recv.flow_control().release_capacity(data.len());
                    if let Some(left) = &mut me.remaining {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(err)) if err.reason() == Some(Reason::NO_ERROR) => {
                    return Poll::Ready(None)
                }
                Some(Err(err)) => return Poll::Ready(Some(Err(err))),
                None => me.data_done = true,
            }
        }
        match ready!(me.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(err) if err.reason() == Some(Reason::NO_ERROR) => Poll::Ready(None),
            Err(err) => Poll::Ready(Some(Err(err))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

//! Writes to the runtime socket wait one scheduler turn, so that the requests of every call that
//! is ready in this turn leave in one `writev`.
//!
//! Each client connection's call task queues its request on the one runtime connection and
//! wakes its task; tokio runs a woken task next (its LIFO slot), so without this the runtime
//! connection wrote once per call even with 16 clients calling at once. The first write of a
//! burst yields instead (the task wakes itself and goes to the back of the run queue); the
//! burst ends when h2 flushes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[derive(Debug)]
pub(crate) struct Coalesce<T> {
    io: T,
    /// The current burst has yielded once and writes now go through.
    due: bool,
}

impl<T> Coalesce<T> {
    pub(crate) fn new(io: T) -> Self {
        Self { io, due: false }
    }

    /// Whether this write goes through now; the first of a burst yields once.
    fn due(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.due {
            self.due = true;
            cx.waker().wake_by_ref();
            return false;
        }
        true
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if !me.due(cx) {
            return Poll::Pending;
        }
        Pin::new(&mut me.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if !me.due(cx) {
            return Poll::Pending;
        }
        Pin::new(&mut me.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(Pin::new(&mut me.io).poll_flush(cx))?;
        me.due = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

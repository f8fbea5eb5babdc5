//! A connection filter in front of h2 (both numa-shim servers: the CRI socket and the
//! PodResources socket) that makes the `:authority` of gRPC C-core and grpc-java clients
//! acceptable before h2 parses it.
//!
//! Those clients send the unix socket path (`/run/numa-shim/cri.sock`) as `:authority`; h2
//! refuses it on purpose (hyperium/hyper#3750, h2#487) and resets every stream, while grpc-go
//! servers (containerd, CRI-O) answer. The filter reads the client's bytes, follows the HTTP/2
//! frames and hands everything to h2 unchanged except header blocks whose `:authority` h2 would
//! refuse; those are re-encoded with that one field replaced ([`hpack`]: same-length value, so
//! the HPACK dynamic tables of client and server stay in step). A connection whose first header
//! block needed nothing drops to plain passthrough (Go clients, the kubelet's included, pay one
//! HPACK decode per connection and then nothing). It never writes anything itself, never looks
//! at the server's bytes, and never fails a connection: input it cannot follow is passed on
//! untouched from there on, for h2 to judge.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tracing::{debug, info};

mod hpack;

use hpack::{Block, Rewriter};

const PREFACE_LEN: usize = 24;
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Largest frame the filter emits: the smallest SETTINGS_MAX_FRAME_SIZE a server may have.
const MAX_EMITTED_FRAME: usize = 16 << 10;
/// Largest header block followed; beyond it the connection passes untouched (h2's own header
/// list limit, 16 MiB in numa-shim, applies either way).
const MAX_BLOCK: usize = 16 << 20;
/// Bytes read from the client at a time while its frames are followed.
const READ_CHUNK: usize = 8 << 10;

/// An IO stream whose incoming HTTP/2 bytes have `:authority` made acceptable to h2.
#[derive(Debug)]
pub struct AuthorityFilter<T> {
    io: T,
    stage: Stage,
    /// Bytes read from the client, not yet looked at.
    input: BytesMut,
    /// Bytes ready for h2, in order.
    output: VecDeque<Bytes>,
    /// The header block being collected (HEADERS without END_HEADERS, then CONTINUATIONs).
    pending: Option<Pending>,
    rewriter: Rewriter,
    /// Whether a block of this connection was rewritten.
    rewrote: bool,
    eof: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// This many bytes of the client preface still to pass.
    Preface(usize),
    /// At a frame boundary.
    FrameHeader,
    /// Inside a frame that passes as it is: this many payload bytes to go.
    Payload(usize),
    /// Passing everything untouched for the rest of the connection.
    Passthrough,
}

#[derive(Debug)]
struct Pending {
    stream: u32,
    /// HEADERS flags (END_STREAM, PRIORITY) to keep.
    flags: u8,
    priority: Option<[u8; 5]>,
    block: Vec<u8>,
    /// The frames as they came, sent on when nothing changes.
    raw: Vec<Bytes>,
}

impl<T> AuthorityFilter<T> {
    /// Filters the client bytes read from `io`.
    pub fn new(io: T) -> Self {
        Self {
            io,
            stage: Stage::Preface(PREFACE_LEN),
            input: BytesMut::new(),
            output: VecDeque::new(),
            pending: None,
            rewriter: Rewriter::default(),
            rewrote: false,
            eof: false,
        }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// Whether the filter has stopped looking at this connection's bytes.
    pub fn is_passthrough(&self) -> bool {
        self.stage == Stage::Passthrough
    }

    /// Moves what can be decided from `input` to `output`.
    fn process(&mut self) {
        loop {
            match self.stage {
                Stage::Passthrough => {
                    if !self.input.is_empty() {
                        self.output.push_back(self.input.split().freeze());
                    }
                    return;
                }
                Stage::Preface(rest) | Stage::Payload(rest) => {
                    let n = rest.min(self.input.len());
                    if n == 0 && rest > 0 {
                        return;
                    }
                    if n > 0 {
                        self.output.push_back(self.input.split_to(n).freeze());
                    }
                    self.stage = if rest > n {
                        match self.stage {
                            Stage::Preface(_) => Stage::Preface(rest - n),
                            _ => Stage::Payload(rest - n),
                        }
                    } else {
                        Stage::FrameHeader
                    };
                }
                Stage::FrameHeader => {
                    if self.input.len() < FRAME_HEADER {
                        return;
                    }
                    let len = (usize::from(self.input[0]) << 16)
                        | (usize::from(self.input[1]) << 8)
                        | usize::from(self.input[2]);
                    let kind = self.input[3];
                    if kind != HEADERS && kind != CONTINUATION {
                        let head = self.input.split_to(FRAME_HEADER).freeze();
                        self.output.push_back(head);
                        self.stage = Stage::Payload(len);
                        continue;
                    }
                    if len > MAX_BLOCK {
                        self.give_up("header frame larger than followed");
                        continue;
                    }
                    if self.input.len() < FRAME_HEADER + len {
                        self.input.reserve(FRAME_HEADER + len - self.input.len());
                        return;
                    }
                    let frame = self.input.split_to(FRAME_HEADER + len).freeze();
                    self.header_frame(frame);
                }
            }
        }
    }

    /// Takes one HEADERS or CONTINUATION frame (whole, header included).
    fn header_frame(&mut self, frame: Bytes) {
        let kind = frame[3];
        let flags = frame[4];
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = frame.slice(FRAME_HEADER..);
        let mut pending = match (kind, self.pending.take()) {
            (HEADERS, None) => {
                let Some((priority, fragment)) = split_headers(flags, &payload) else {
                    self.output.push_back(frame);
                    return self.give_up("malformed HEADERS frame");
                };
                Pending {
                    stream,
                    flags: flags & (END_STREAM | PRIORITY),
                    priority,
                    block: fragment.to_vec(),
                    raw: vec![frame],
                }
            }
            (CONTINUATION, Some(mut pending)) if pending.stream == stream => {
                pending.block.extend_from_slice(&payload);
                pending.raw.push(frame);
                pending
            }
            (_, pending) => {
                // Not a header sequence h2 accepts: pass it on and let h2 say so.
                self.output.extend(pending.into_iter().flat_map(|p| p.raw));
                self.output.push_back(frame);
                return self.give_up("unexpected header frame");
            }
        };
        if pending.block.len() > MAX_BLOCK {
            self.output.extend(pending.raw);
            return self.give_up("header block larger than followed");
        }
        if flags & END_HEADERS == 0 {
            self.pending = Some(pending);
            return;
        }
        match self.rewriter.rewrite(&pending.block) {
            Ok(Block::Unchanged) => {
                self.output.extend(pending.raw);
                if !self.rewrote {
                    debug!("client :authority accepted as it is; passing the connection through");
                    self.stage = Stage::Passthrough;
                }
            }
            Ok(Block::Rewritten(block)) => {
                if !self.rewrote {
                    info!(
                        stream,
                        "client sends a :authority h2 refuses (a socket path: grpc C-core or grpc-java); rewriting it on this connection"
                    );
                }
                self.rewrote = true;
                pending.block = block;
                self.output.push_back(encode_frames(&pending));
            }
            Err(err) => {
                self.output.extend(pending.raw);
                self.give_up(&err.to_string());
            }
        }
    }

    fn give_up(&mut self, why: &str) {
        debug!(
            reason = why,
            "no longer following the client's header blocks"
        );
        if let Some(pending) = self.pending.take() {
            self.output.extend(pending.raw);
        }
        self.stage = Stage::Passthrough;
    }
}

/// The priority fields and header block fragment of a HEADERS payload.
fn split_headers(flags: u8, payload: &Bytes) -> Option<(Option<[u8; 5]>, Bytes)> {
    let mut start = 0;
    let mut end = payload.len();
    if flags & PADDED != 0 {
        let pad = usize::from(*payload.first()?);
        start = 1;
        end = end.checked_sub(pad)?;
    }
    let priority = if flags & PRIORITY != 0 {
        let fields: [u8; 5] = payload.get(start..start + 5)?.try_into().ok()?;
        start += 5;
        Some(fields)
    } else {
        None
    };
    (start <= end).then(|| (priority, payload.slice(start..end)))
}

/// HEADERS (+ CONTINUATION) frames carrying `pending.block`, no padding, each ≤ 16 KiB.
fn encode_frames(pending: &Pending) -> Bytes {
    let mut out = BytesMut::with_capacity(pending.block.len() + 64);
    let first_room = MAX_EMITTED_FRAME - if pending.priority.is_some() { 5 } else { 0 };
    let (first, mut rest) = pending.block.split_at(first_room.min(pending.block.len()));
    let mut flags = pending.flags;
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    let priority_len = pending.priority.map_or(0, |p| p.len());
    put_frame_header(
        &mut out,
        first.len() + priority_len,
        HEADERS,
        flags,
        pending.stream,
    );
    if let Some(priority) = pending.priority {
        out.put_slice(&priority);
    }
    out.put_slice(first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(MAX_EMITTED_FRAME.min(rest.len()));
        let flags = if tail.is_empty() { END_HEADERS } else { 0 };
        put_frame_header(&mut out, chunk.len(), CONTINUATION, flags, pending.stream);
        out.put_slice(chunk);
        rest = tail;
    }
    out.freeze()
}

fn put_frame_header(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    // `len` is at most MAX_EMITTED_FRAME, well inside 24 bits.
    out.put_uint(len as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

impl<T: AsyncRead + Unpin> AsyncRead for AuthorityFilter<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(front) = this.output.front_mut() {
                let n = front.len().min(buf.remaining());
                buf.put_slice(&front.split_to(n));
                if front.is_empty() {
                    this.output.pop_front();
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.stage == Stage::Passthrough && this.input.is_empty() {
                if this.input.capacity() > 0 {
                    // Nothing more is looked at: the buffers and the table go.
                    this.input = BytesMut::new();
                    this.rewriter = Rewriter::default();
                }
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            // Inside a frame that passes as it is (DATA, mostly): read straight into h2's
            // buffer, at most to the end of the frame.
            if let Stage::Payload(rest) = this.stage {
                if rest > 0 && this.input.is_empty() && buf.remaining() > 0 {
                    let dst = buf.initialize_unfilled_to(rest.min(buf.remaining()));
                    let mut read = ReadBuf::new(dst);
                    ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
                    let n = read.filled().len();
                    if n == 0 {
                        this.eof = true;
                        continue;
                    }
                    buf.advance(n);
                    this.stage = if rest > n {
                        Stage::Payload(rest - n)
                    } else {
                        Stage::FrameHeader
                    };
                    return Poll::Ready(Ok(()));
                }
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            let n = read.filled().len();
            if n == 0 {
                // The client is done: whatever was held back goes to h2 as it is.
                this.eof = true;
                this.give_up("end of stream");
                if !this.input.is_empty() {
                    this.output.push_back(this.input.split().freeze());
                }
                continue;
            }
            this.input.extend_from_slice(&chunk[..n]);
            this.process();
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AuthorityFilter<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// tonic's servers ask their IO who connected; the filter answers for the stream it wraps.
impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFilter<T>
{
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests;

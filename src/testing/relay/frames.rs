//! Test support: a raw HTTP/2 client that writes frames itself and reads back every frame the
//! server sends, so tests see the frame shape (HEADERS with or without END_STREAM, empty DATA,
//! trailers, RST_STREAM) and not only what a gRPC library decodes from it. Header blocks are
//! encoded and decoded with loona-hpack (a dependency of the
//! relay's `:authority` filter too).

use std::path::Path;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One frame as it came off the wire; header blocks decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Bytes,
    /// For HEADERS (with its CONTINUATIONs folded in): the decoded header list.
    pub headers: Vec<(String, String)>,
}

/// What a stream's frames look like, for comparing two servers' answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// HEADERS; `end` = END_STREAM set on it. Headers sorted, `date` dropped.
    Headers {
        end: bool,
        headers: Vec<(String, String)>,
    },
    /// DATA with its payload; `end` = END_STREAM set on it.
    Data { end: bool, payload: Bytes },
    /// RST_STREAM with its error code.
    Reset(u32),
}

impl Frame {
    pub fn end_stream(&self) -> bool {
        self.flags & END_STREAM != 0
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A raw HTTP/2 connection to a unix socket.
pub struct Conn {
    io: UnixStream,
    encoder: loona_hpack::Encoder<'static>,
    decoder: loona_hpack::Decoder<'static>,
    buf: BytesMut,
    next_stream: u32,
}

impl Conn {
    /// Connects, sends the preface and empty SETTINGS.
    pub async fn connect(socket: &Path) -> Self {
        let mut io = UnixStream::connect(socket).await.unwrap();
        io.write_all(PREFACE).await.unwrap();
        let mut conn = Self {
            io,
            encoder: loona_hpack::Encoder::new(),
            decoder: loona_hpack::Decoder::new(),
            buf: BytesMut::new(),
            next_stream: 1,
        };
        conn.write_frame(SETTINGS, 0, 0, &[]).await;
        conn
    }

    pub async fn write_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut out = BytesMut::with_capacity(9 + payload.len());
        out.put_uint(payload.len() as u64, 3);
        out.put_u8(kind);
        out.put_u8(flags);
        out.put_u32(stream);
        out.put_slice(payload);
        self.io.write_all(&out).await.unwrap();
    }

    /// Writes raw bytes (for hand-made header blocks or frames).
    pub async fn write_raw(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.unwrap();
    }

    /// HPACK-encodes `headers` with this connection's encoder (incremental indexing).
    pub fn encode(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        self.encoder
            .encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// Opens a stream with a gRPC POST to `path` plus `extra` headers; returns its id.
    pub async fn start(&mut self, path: &str, authority: &str, extra: &[(&str, &str)]) -> u32 {
        let mut headers = vec![
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        headers.extend_from_slice(extra);
        let block = self.encode(&headers);
        let stream = self.next_stream;
        self.next_stream += 2;
        self.write_frame(HEADERS, END_HEADERS, stream, &block).await;
        stream
    }

    /// Sends one gRPC message as the stream's last DATA frame.
    pub async fn send_message(&mut self, stream: u32, message: &[u8]) {
        let mut body = vec![0u8];
        body.extend_from_slice(&(message.len() as u32).to_be_bytes());
        body.extend_from_slice(message);
        self.write_frame(DATA, END_STREAM, stream, &body).await;
    }

    /// A whole unary call: returns every frame the server sent on that stream.
    pub async fn unary(
        &mut self,
        path: &str,
        extra: &[(&str, &str)],
        message: &[u8],
    ) -> Vec<Frame> {
        let stream = self.start(path, "localhost", extra).await;
        self.send_message(stream, message).await;
        self.read_stream(stream, Duration::from_secs(10)).await
    }

    /// Reads frames until `stream` ends (END_STREAM or RST_STREAM) and returns that stream's
    /// frames; answers SETTINGS and PING on the way.
    pub async fn read_stream(&mut self, stream: u32, limit: Duration) -> Vec<Frame> {
        let mut frames = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.read_frame())
                .await
                .unwrap_or_else(|_| panic!("stream {stream} did not end; so far {frames:?}"))
                .unwrap_or_else(|| panic!("connection closed; so far {frames:?}"));
            if frame.stream != stream {
                continue;
            }
            let done = frame.kind == RST_STREAM || frame.end_stream();
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// The next frame on any stream (CONTINUATIONs folded into their HEADERS); `None` when the
    /// server closed the connection. Connection-level frames are handled and returned too.
    pub async fn read_frame(&mut self) -> Option<Frame> {
        let mut frame = self.read_one().await?;
        if frame.kind == HEADERS {
            let mut block = BytesMut::from(&header_block(&frame)[..]);
            let mut flags = frame.flags;
            while flags & END_HEADERS == 0 {
                let next = self.read_one().await?;
                assert_eq!(next.kind, CONTINUATION);
                block.extend_from_slice(&next.payload);
                flags |= next.flags & END_HEADERS;
            }
            frame.headers = self
                .decoder
                .decode(&block)
                .unwrap()
                .into_iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(&n).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect();
        }
        if frame.kind == SETTINGS && frame.flags & ACK == 0 {
            self.write_frame(SETTINGS, ACK, 0, &[]).await;
        }
        if frame.kind == PING && frame.flags & ACK == 0 {
            let payload = frame.payload.clone();
            self.write_frame(PING, ACK, 0, &payload).await;
        }
        Some(frame)
    }

    async fn read_one(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let mut head = self.buf.split_to(9);
                    head.advance(3);
                    let kind = head.get_u8();
                    let flags = head.get_u8();
                    let stream = head.get_u32() & 0x7fff_ffff;
                    let payload = self.buf.split_to(len).freeze();
                    return Some(Frame {
                        kind,
                        flags,
                        stream,
                        payload,
                        headers: Vec::new(),
                    });
                }
            }
            let mut chunk = [0u8; 16 << 10];
            let n = self.io.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The header block fragment of a HEADERS frame (padding and priority removed).
fn header_block(frame: &Frame) -> Bytes {
    let mut payload = frame.payload.clone();
    let mut pad = 0;
    if frame.flags & 0x8 != 0 {
        pad = usize::from(payload.get_u8());
    }
    if frame.flags & 0x20 != 0 {
        payload.advance(5);
    }
    payload.slice(..payload.len() - pad)
}

/// The shape of a stream's frames, comparable across servers. Consecutive DATA frames are
/// merged (how a body is split into frames is the transport's business); an empty DATA frame
/// is kept.
pub fn shape(frames: &[Frame]) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for f in frames {
        if f.kind == DATA {
            if let Some(Shape::Data { end, payload }) = out.last_mut() {
                if !*end && !f.payload.is_empty() {
                    *payload = [payload.clone(), f.payload.clone()].concat().into();
                    *end = f.end_stream();
                    continue;
                }
            }
        }
        out.extend(one_shape(f));
    }
    out
}

fn one_shape(f: &Frame) -> Option<Shape> {
    {
        match f.kind {
            HEADERS => {
                let mut headers: Vec<_> = f
                    .headers
                    .iter()
                    .filter(|(n, _)| n != "date")
                    .cloned()
                    .collect();
                headers.sort();
                Some(Shape::Headers {
                    end: f.end_stream(),
                    headers,
                })
            }
            DATA => Some(Shape::Data {
                end: f.end_stream(),
                payload: f.payload.clone(),
            }),
            RST_STREAM => Some(Shape::Reset(u32::from_be_bytes([
                f.payload[0],
                f.payload[1],
                f.payload[2],
                f.payload[3],
            ]))),
            _ => None,
        }
    }
}

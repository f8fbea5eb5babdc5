use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, LazyLock, Mutex as StdMutex};
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::*;
use crate::relay::grpc;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const VERSION: &str = "/runtime.v1.RuntimeService/Version";

/// Writes that reached each runtime socket (by its path), counted below `Coalesce`.
static WRITES: LazyLock<StdMutex<HashMap<PathBuf, Arc<AtomicUsize>>>> =
    LazyLock::new(Default::default);

fn writes_to(path: &Path) -> Arc<AtomicUsize> {
    WRITES
        .lock()
        .unwrap()
        .entry(path.to_path_buf())
        .or_default()
        .clone()
}

/// The runtime socket as `dial` opens it in tests: counts the writes that reach it.
pub(super) struct Counting {
    io: UnixStream,
    writes: Arc<AtomicUsize>,
}

impl Counting {
    pub(super) fn new(io: UnixStream, path: &Path) -> Self {
        Self {
            io,
            writes: writes_to(path),
        }
    }
}

impl AsyncRead for Counting {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counting {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        me.writes.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut me.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let me = self.get_mut();
        me.writes.fetch_add(1, Ordering::SeqCst);
        Pin::new(&mut me.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A raw HTTP/2 peer on a unix socket: answers nothing but SETTINGS, and hands every `read` it
/// makes (the preface cut off) to the test as it happens.
struct RawPeer {
    reads: mpsc::Receiver<Vec<u8>>,
    seen: Vec<Vec<u8>>,
    /// Why the peer's thread stopped reading, once it has.
    ended: Arc<StdMutex<Option<String>>>,
}

impl RawPeer {
    fn start(path: &std::path::Path) -> Self {
        let listener = UnixListener::bind(path).unwrap();
        let (tx, reads) = mpsc::channel();
        let ended = Arc::new(StdMutex::new(None));
        let why = ended.clone();
        std::thread::spawn(move || {
            let reason = Self::serve(&listener, &tx);
            *why.lock().unwrap() = Some(reason);
        });
        Self {
            reads,
            seen: Vec::new(),
            ended,
        }
    }

    /// Accepts one connection and forwards its reads until it ends; returns why it ended.
    fn serve(listener: &UnixListener, tx: &mpsc::Sender<Vec<u8>>) -> String {
        let mut conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(err) => return format!("accept failed: {err}"),
        };
        // An empty SETTINGS frame, then the ACK of the client's.
        if let Err(err) = conn.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0]) {
            return format!("writing SETTINGS failed: {err}");
        }
        let mut buf = vec![0; 1 << 16];
        let mut first = true;
        loop {
            let n = match conn.read(&mut buf) {
                Ok(0) => return "the client closed the connection".into(),
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return format!("read failed: {err}"),
                Ok(n) => n,
            };
            let start = if first { PREFACE.len() } else { 0 };
            first = false;
            if n < start || !buf.starts_with(&PREFACE[..start]) {
                return format!("first read is not the preface: {:?}", &buf[..n]);
            }
            if tx.send(buf[start..n].to_vec()).is_err() {
                return "the test stopped listening".into();
            }
        }
    }

    /// Waits (polling, so the runtime under test keeps running) until `done` holds of the reads.
    async fn until(&mut self, done: impl Fn(&[Vec<u8>]) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done(&self.seen) {
            match self.reads.try_recv() {
                Ok(read) => self.seen.push(read),
                Err(mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "peer read {:?}",
                        self.seen
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(mpsc::TryRecvError::Disconnected) => panic!(
                    "peer ended ({}) after reading {:?}",
                    self.ended.lock().unwrap().as_deref().unwrap_or("?"),
                    self.seen
                ),
            }
        }
    }
}

/// The frames of one read: (type, stream, payload length). Frames of these tests never straddle
/// reads (each is far smaller than the peer's buffer and written whole).
fn frames(read: &[u8]) -> Vec<(u8, u32, usize)> {
    let mut out = Vec::new();
    let mut rest = read;
    while rest.len() >= 9 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff;
        out.push((rest[3], stream, len));
        rest = &rest[(9 + len).min(rest.len())..];
    }
    out
}

/// Request streams whose first non-empty DATA frame the peer has read.
fn with_data(reads: &[Vec<u8>]) -> usize {
    let mut streams: Vec<u32> = reads
        .iter()
        .flat_map(|r| frames(r))
        .filter(|f| f.0 == 0 && f.2 > 0)
        .map(|f| f.1)
        .collect();
    streams.dedup();
    streams.len()
}

fn call(upstream: &Arc<Upstream>) -> tokio::task::JoinHandle<()> {
    let up = upstream.clone();
    tokio::spawn(async move {
        let req = Request::post(format!("http://localhost{VERSION}"))
            .header("content-type", "application/grpc")
            .body(grpc::full_body(grpc::frame(b"\x0a\x010"), None))
            .unwrap();
        // The peer never answers; the test aborts the call.
        let _ = up.send(VERSION, req).await;
    })
}

/// A unary call's HEADERS and its DATA leave in one write: hyper's client waited for send
/// capacity (which a stream gets only once h2 opens it), so DATA followed in a second write.
/// A peer that reads as soon as bytes arrive sees them apart when they are written apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_request_leaves_with_its_data_in_one_write() {
    const CALLS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runtime.sock");
    let mut peer = RawPeer::start(&path);
    let upstream = Arc::new(Upstream::new(path));
    let mut calls = Vec::new();
    for i in 1..=CALLS {
        // One call at a time: the next starts once the peer has this one's DATA.
        calls.push(call(&upstream));
        peer.until(|reads| with_data(reads) >= i).await;
    }
    let apart: Vec<(u32, bool)> = peer
        .seen
        .iter()
        .flat_map(|read| {
            let fs = frames(read);
            fs.iter()
                .filter(|f| f.0 == 0 && f.2 > 0)
                .map(|d| (d.1, fs.iter().any(|h| h.0 == 1 && h.1 == d.1)))
                .collect::<Vec<_>>()
        })
        .filter(|(_, together)| !together)
        .collect();
    assert!(
        apart.is_empty(),
        "streams whose DATA came in a later write than their HEADERS: {apart:?}"
    );
    calls.iter().for_each(|c| c.abort());
}

/// Calls that are ready in the same scheduler turn leave in one write on the runtime socket
/// (`Coalesce`). Without it tokio runs the connection task right after each call task that
/// wakes it, and every request is a write of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn calls_ready_together_leave_in_one_write() {
    const BURST: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runtime.sock");
    let mut peer = RawPeer::start(&path);
    let writes = writes_to(&path);
    let upstream = Arc::new(Upstream::new(path));
    // Connected, and the peer has read everything of the first call.
    let first = call(&upstream);
    peer.until(|reads| with_data(reads) == 1).await;
    let before = writes.load(Ordering::SeqCst);
    // As a burst of client requests arrives: the client connections' tasks are queued on the
    // worker together, and each spawns its call task, which tokio runs next.
    let up = upstream.clone();
    let clients = tokio::spawn(async move {
        (0..BURST)
            .map(|_| {
                let up = up.clone();
                // The call never ends (the peer does not answer): the test aborts it.
                tokio::spawn(async move { call(&up).abort_handle() })
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut calls = Vec::new();
    for client in clients {
        calls.push(client.await.unwrap());
    }
    peer.until(|reads| with_data(reads) == 1 + BURST).await;
    let burst = writes.load(Ordering::SeqCst) - before;
    // Without `Coalesce` each call is a write of its own (BURST). With it the burst is one or
    // two writes, and a few more when the peer thread's reads make the socket writable again in
    // the middle of the burst and the connection task runs early (seen once in 150 runs with
    // six CPU hogs beside the test: 3 writes).
    assert!(
        burst <= BURST / 2,
        "{BURST} calls ready together took {burst} writes to the runtime socket"
    );
    first.abort();
    calls.iter().for_each(|c| c.abort());
}

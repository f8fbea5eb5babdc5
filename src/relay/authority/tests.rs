use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use super::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Hands its bytes out `step` at a time, as a socket might.
struct Trickle {
    bytes: Vec<u8>,
    at: usize,
    step: usize,
}

impl AsyncRead for Trickle {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = this
            .step
            .min(this.bytes.len() - this.at)
            .min(buf.remaining());
        buf.put_slice(&this.bytes[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    put_frame_header(&mut out, payload.len(), kind, flags, stream);
    out.put_slice(payload);
    out.to_vec()
}

/// The filtered bytes, and whether the filter rewrote anything.
async fn filtered(bytes: Vec<u8>, step: usize) -> (Vec<u8>, bool) {
    let mut filter = AuthorityFilter::new(Trickle { bytes, at: 0, step });
    let mut out = Vec::new();
    filter.read_to_end(&mut out).await.unwrap();
    (out, filter.rewrote)
}

/// Splits a client byte stream into frames after the preface: (kind, flags, stream, payload).
fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    assert_eq!(&bytes[..PREFACE.len()], PREFACE);
    let mut rest = &bytes[PREFACE.len()..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len = (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        out.push((rest[3], rest[4], stream, rest[9..9 + len].to_vec()));
        rest = &rest[9 + len..];
    }
    out
}

fn request(encoder: &mut loona_hpack::Encoder<'_>, authority: &str) -> Vec<u8> {
    let headers: [(&[u8], &[u8]); 5] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/runtime.v1.RuntimeService/Version"),
        (b":authority", authority.as_bytes()),
        (b"content-type", b"application/grpc"),
    ];
    encoder.encode(headers)
}

fn stream_of(authority: &str, requests: u32) -> Vec<u8> {
    let mut encoder = loona_hpack::Encoder::new();
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(0x4, 0, 0, &[]));
    for i in 0..requests {
        let stream = 1 + 2 * i;
        bytes.extend(frame(
            HEADERS,
            END_HEADERS,
            stream,
            &request(&mut encoder, authority),
        ));
        bytes.extend(frame(0x0, END_STREAM, stream, &[0, 0, 0, 0, 2, 0x0a, 0x00]));
    }
    bytes
}

#[tokio::test]
async fn a_valid_authority_passes_byte_for_byte_and_the_rest_is_not_looked_at() {
    let bytes = stream_of("localhost", 3);
    for step in [1, 7, 4096] {
        let mut filter = AuthorityFilter::new(Trickle {
            bytes: bytes.clone(),
            at: 0,
            step,
        });
        // Passthrough right after the first header block, long before the end.
        let mut head = vec![0u8; PREFACE.len() + 9 + 9];
        filter.read_exact(&mut head).await.unwrap();
        let mut out = head;
        while !filter.is_passthrough() {
            let mut byte = [0u8];
            filter.read_exact(&mut byte).await.unwrap();
            out.push(byte[0]);
        }
        assert!(out.len() < bytes.len() / 2, "step {step}: {}", out.len());
        filter.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, bytes, "step {step}");
        assert!(!filter.rewrote);
    }
}

#[tokio::test]
async fn a_socket_path_authority_is_rewritten_in_every_request_and_nothing_else_changes() {
    let bytes = stream_of("/run/numa-shim/cri.sock", 3);
    for step in [1, 5, 9, 4096] {
        let (out, rewrote) = filtered(bytes.clone(), step).await;
        assert!(rewrote);
        let (sent, got) = (frames(&bytes), frames(&out));
        assert_eq!(got.len(), sent.len());
        let mut server = loona_hpack::Decoder::new();
        let mut client = loona_hpack::Decoder::new();
        for (s, g) in sent.iter().zip(&got) {
            assert_eq!(
                (s.0, s.1, s.2),
                (g.0, g.1, g.2),
                "frame kind, flags, stream"
            );
            if s.0 != HEADERS {
                assert_eq!(s.3, g.3);
                continue;
            }
            let meant = client.decode(&s.3).unwrap();
            let seen = server.decode(&g.3).unwrap();
            for ((mn, mv), (sn, sv)) in meant.iter().zip(&seen) {
                assert_eq!(mn, sn);
                if mn == b":authority" {
                    assert_eq!(sv, b"_run_numa-shim_cri.sock");
                } else {
                    assert_eq!(mv, sv);
                }
            }
        }
    }
}

#[tokio::test]
async fn continuation_padding_and_priority_are_handled() {
    let mut encoder = loona_hpack::Encoder::new();
    let block = request(&mut encoder, "/tmp/x.sock");
    let (a, b) = block.split_at(block.len() / 2);
    // HEADERS: padded (3 bytes), with priority, without END_HEADERS; then CONTINUATION.
    let mut payload = vec![3];
    payload.extend([0, 0, 0, 0, 15]);
    payload.extend(a);
    payload.extend([0, 0, 0]);
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 1, &payload));
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, b));
    let (out, _) = filtered(bytes, 3).await;
    let got = frames(&out);
    assert_eq!(got.len(), 1, "{got:?}");
    let (kind, flags, stream, payload) = &got[0];
    assert_eq!(
        (*kind, *flags, *stream),
        (HEADERS, PRIORITY | END_STREAM | END_HEADERS, 1)
    );
    assert_eq!(&payload[..5], &[0, 0, 0, 0, 15]);
    let seen = loona_hpack::Decoder::new().decode(&payload[5..]).unwrap();
    assert_eq!(seen[3], (b":authority".to_vec(), b"_tmp_x.sock".to_vec()));
}

#[tokio::test]
async fn a_big_rewritten_block_is_split_into_frames_of_16_kib() {
    let mut encoder = loona_hpack::Encoder::new();
    let mut headers: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":authority".to_vec(), b"/tmp/x.sock".to_vec()),
    ];
    headers.push((b"x-big".to_vec(), vec![b'v'; 40 << 10]));
    let block = encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(HEADERS, END_HEADERS, 1, &block));
    let (out, _) = filtered(bytes, 4096).await;
    let got = frames(&out);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|f| f.3.len() <= MAX_EMITTED_FRAME));
    assert_eq!(got[0].1 & END_HEADERS, 0);
    assert_eq!((got[2].0, got[2].1), (CONTINUATION, END_HEADERS));
    let joined: Vec<u8> = got.iter().flat_map(|f| f.3.clone()).collect();
    let seen = loona_hpack::Decoder::new().decode(&joined).unwrap();
    assert_eq!(seen[1].1, b"_tmp_x.sock");
    assert_eq!(seen[2].1.len(), 40 << 10);
}

#[tokio::test]
async fn what_cannot_be_followed_passes_untouched() {
    let mut bytes = PREFACE.to_vec();
    bytes.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
    bytes.extend(frame(HEADERS, END_HEADERS, 3, &[0x41, 0x7f]));
    let (out, rewrote) = filtered(bytes.clone(), 2).await;
    assert_eq!(out, bytes);
    assert!(!rewrote);
    // A connection that ends mid-frame hands h2 what it got.
    let mut cut = stream_of("/tmp/x.sock", 1);
    cut.truncate(PREFACE.len() + 9 + 9 + 4);
    let (out, _) = filtered(cut.clone(), 3).await;
    assert_eq!(out, cut);
}

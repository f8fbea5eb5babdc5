//! gRPC-over-HTTP/2 details the relay needs (message framing is `transport::framing`): statuses as responses and trailers, `grpc-timeout`, and the body type. Never decodes
//! protobuf itself.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Empty, StreamBody};
use tonic::Status;

pub(crate) use crate::transport::framing::{frame, unframe, Unframe};

/// Boxed error carried by relay bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The one body type used on both sides of the relay.
pub(crate) type RelayBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// Boxes any body into a [`RelayBody`].
pub(crate) fn boxed<B>(body: B) -> RelayBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body holding `data` as one DATA frame, then `trailers` if any.
pub(crate) fn full_body(data: Bytes, trailers: Option<HeaderMap>) -> RelayBody {
    // Nothing to send: a body that says so, so that the response (or request) HEADERS frame
    // ends the stream. A trailers-only gRPC response must arrive that way; grpc-go clients
    // ignore a status in headers followed by an empty DATA frame ("server closed the stream
    // without sending trailers").
    if data.is_empty() && trailers.is_none() {
        return boxed(Empty::<Bytes>::new());
    }
    let mut frames = Vec::with_capacity(2);
    if !data.is_empty() {
        frames.push(Ok::<_, BoxError>(Frame::data(data)));
    }
    if let Some(trailers) = trailers {
        frames.push(Ok(Frame::trailers(trailers)));
    }
    StreamBody::new(tokio_stream::iter(frames)).boxed_unsync()
}

/// A body that plays back frames read from another body, in order, and reports its end exactly
/// when the original did: an answer that ended with its HEADERS frame (gRPC trailers-only) goes
/// out as one HEADERS frame with END_STREAM, an answer with trailers ends with them.
///
/// It gives no exact size hint on purpose: hyper would add a `content-length` the runtime did
/// not send.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    frames: VecDeque<Frame<Bytes>>,
}

impl Replay {
    /// Appends a frame as it was read.
    pub(crate) fn push(&mut self, frame: Frame<Bytes>) {
        self.frames.push_back(frame);
    }

    /// The trailers, if the original body ended with them.
    pub(crate) fn trailers(&self) -> Option<&HeaderMap> {
        self.frames.back().and_then(Frame::trailers_ref)
    }

    /// The DATA payloads joined (one message for a unary answer); no copy for a single frame.
    pub(crate) fn data(&self) -> Bytes {
        let mut chunks = self.frames.iter().filter_map(Frame::data_ref);
        match (chunks.next(), chunks.next()) {
            (None, _) => Bytes::new(),
            (Some(only), None) => only.clone(),
            (Some(_), Some(_)) => {
                let mut joined = BytesMut::new();
                for chunk in self.frames.iter().filter_map(Frame::data_ref) {
                    joined.extend_from_slice(chunk);
                }
                joined.freeze()
            }
        }
    }
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.get_mut().frames.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }
}

/// A trailers-only gRPC response carrying `status` (code, message, details, metadata).
pub(crate) fn status_response(status: &Status) -> Response<RelayBody> {
    let mut response = Response::new(boxed(Empty::<Bytes>::new()));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    if status.add_header(headers).is_err() {
        headers.insert("grpc-status", HeaderValue::from_static("13"));
    }
    response
}

/// The gRPC status of a finished response: trailers first, else the headers (trailers-only).
pub(crate) fn response_status(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Status {
    trailers
        .and_then(status_from)
        .or_else(|| status_from(headers))
        .unwrap_or_else(|| Status::unknown("numa-shim: runtime response carried no grpc-status"))
}

/// `Status::from_header_map`, which panics on undecodable `grpc-status-details-bin`; such
/// details are dropped instead so that the code and message still count.
fn status_from(headers: &HeaderMap) -> Option<Status> {
    let parse = || Status::from_header_map(headers);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|_| {
        let mut headers = headers.clone();
        headers.remove("grpc-status-details-bin");
        Status::from_header_map(&headers)
    })
}

/// Parses a `grpc-timeout` header value (`1-8 digits` + unit `H M S m u n`).
pub(crate) fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_then_unframe_round_trips() {
        let framed = frame(b"hello");
        assert_eq!(&framed[..5], &[0, 0, 0, 0, 5]);
        assert_eq!(unframe(&framed).unwrap(), Bytes::from_static(b"hello"));
        assert_eq!(unframe(&frame(b"")).unwrap(), Bytes::new());
    }

    #[test]
    fn unframe_rejects_bad_bodies() {
        assert!(matches!(
            unframe(&Bytes::from_static(&[0, 0])),
            Err(Unframe::Malformed(_))
        ));
        assert_eq!(
            unframe(&Bytes::from_static(&[1, 0, 0, 0, 0])),
            Err(Unframe::Compressed)
        );
        assert!(matches!(
            unframe(&Bytes::from_static(&[7, 0, 0, 0, 0])),
            Err(Unframe::Malformed(m)) if m.contains("flag 7")
        ));
        let two = [frame(b"a"), frame(b"b")].concat();
        assert!(matches!(
            unframe(&Bytes::from(two)),
            Err(Unframe::Malformed(m)) if m.contains("announces 1 bytes but the body holds 7")
        ));
    }

    #[test]
    fn timeouts_parse_per_grpc_spec() {
        let t = |s: &'static str| parse_timeout(&HeaderValue::from_static(s));
        assert_eq!(t("2S"), Some(Duration::from_secs(2)));
        assert_eq!(t("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(t("3M"), Some(Duration::from_secs(180)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("10u"), Some(Duration::from_micros(10)));
        assert_eq!(t("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "S", "5", "5x", "123456789S", "-1S"] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }

    #[test]
    fn status_comes_from_trailers_then_headers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("5"));
        trailers.insert("grpc-message", HeaderValue::from_static("no%20such"));
        let status = response_status(&HeaderMap::new(), Some(&trailers));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "no such");
        let headers = status_response(&Status::unimplemented("x"))
            .headers()
            .clone();
        assert_eq!(
            response_status(&headers, None).code(),
            tonic::Code::Unimplemented
        );
        assert_eq!(
            response_status(&HeaderMap::new(), None).code(),
            tonic::Code::Unknown
        );
    }

    #[test]
    fn replay_ends_when_the_original_did() {
        use http_body::Body as _;
        let empty = Replay::default();
        assert!(
            empty.is_end_stream(),
            "trailers-only: nothing after the headers"
        );
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let mut replay = Replay::default();
        replay.push(Frame::data(Bytes::from_static(b"ab")));
        replay.push(Frame::data(Bytes::from_static(b"cd")));
        replay.push(Frame::trailers(trailers.clone()));
        assert!(!replay.is_end_stream());
        assert_eq!(replay.data(), Bytes::from_static(b"abcd"));
        assert_eq!(replay.trailers(), Some(&trailers));
        assert_eq!(replay.size_hint().exact(), None);
    }

    #[test]
    fn undecodable_details_do_not_lose_the_code() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("5"));
        trailers.insert("grpc-message", HeaderValue::from_static("gone"));
        trailers.insert(
            "grpc-status-details-bin",
            HeaderValue::from_static("!!not base64!!"),
        );
        let status = response_status(&HeaderMap::new(), Some(&trailers));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "gone");
        assert!(status.details().is_empty());
    }
}

//! gRPC message framing: the 5-byte prefix (compressed flag, big-endian length) around one
//! protobuf message. Used by the relay (intercepted calls) and the PodResources server (its
//! published answers). Never decodes protobuf.

use bytes::{BufMut, Bytes, BytesMut};

/// Length of the gRPC message prefix: compressed flag (1 byte) + big-endian length (4 bytes).
pub const PREFIX: usize = 5;

/// Frames `message` as one uncompressed gRPC message.
pub fn frame(message: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(PREFIX + message.len());
    put_prefix(&mut buf, message.len());
    buf.put_slice(message);
    buf.freeze()
}

/// Writes the prefix of an uncompressed gRPC message of `len` bytes.
pub fn put_prefix(buf: &mut BytesMut, len: usize) {
    buf.put_u8(0);
    // Messages above 4 GiB cannot be framed by gRPC at all; callers bound the size.
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
}

/// Why a body is not exactly one uncompressed gRPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unframe {
    /// The message is compressed (flag 1).
    Compressed,
    /// Anything else, with a reason.
    Malformed(String),
}

/// Splits a unary body into its one message, checking prefix, flag and length.
pub fn unframe(body: &Bytes) -> Result<Bytes, Unframe> {
    if body.len() < PREFIX {
        return Err(Unframe::Malformed(format!(
            "body of {} bytes is shorter than the 5-byte grpc message prefix",
            body.len()
        )));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    match body[0] {
        0 => {}
        1 => return Err(Unframe::Compressed),
        flag => {
            return Err(Unframe::Malformed(format!(
                "unknown grpc message flag {flag}"
            )))
        }
    }
    let rest = body.len() - PREFIX;
    if rest != len {
        return Err(Unframe::Malformed(format!(
            "grpc message prefix announces {len} bytes but the body holds {rest}"
        )));
    }
    Ok(body.slice(PREFIX..))
}

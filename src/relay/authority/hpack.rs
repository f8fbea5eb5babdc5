//! Just enough HPACK (RFC 7541) to follow a client's header blocks and rewrite one field: walks
//! each representation, keeps the dynamic table in step with the client's encoder, and replaces
//! an `:authority` that `http::uri::Authority` (hence h2) refuses by a same-length valid one.
//!
//! Everything else is copied byte for byte. The replacement keeps the table the server builds
//! exactly as large as the client's, entry for entry: a literal `:authority` that the client
//! adds to its table goes on as a literal that adds the fixed value, of the same length, so
//! every later index the client sends points at the same entry on the server, whose value is
//! the valid one (and an indexed reference to it needs no change). Huffman strings are decoded
//! with loona-hpack's decoder; nothing here panics on any input (fuzzed in the tests).

use std::collections::VecDeque;

use loona_hpack::huffman::HuffmanDecoder;

/// The server's SETTINGS_HEADER_TABLE_SIZE (h2's default, which numa-shim does not change).
pub(crate) const TABLE_SIZE: usize = 4096;

/// Names of the static table, RFC 7541 Appendix A (index 1 first). Values matter only for
/// index 1 (`:authority`, empty), the one field this module looks at.
const STATIC_NAMES: [&str; 61] = [
    ":authority",
    ":method",
    ":method",
    ":path",
    ":path",
    ":scheme",
    ":scheme",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];

/// A header block that cannot be followed. The connection is then passed on untouched (h2
/// reports the compression error itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HpackError {
    #[error("header block ends inside a field at byte {0}")]
    Truncated(usize),
    #[error("integer at byte {0} overflows")]
    Overflow(usize),
    #[error("index {0} is neither in the static nor in the dynamic table")]
    Index(usize),
    #[error("huffman string at byte {0} does not decode")]
    Huffman(usize),
}

/// What became of one header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Block {
    /// Nothing to change: send the original bytes.
    Unchanged,
    /// The block with `:authority` replaced.
    Rewritten(Vec<u8>),
}

/// One connection's decoding state: the dynamic table as the server holds it (values as they
/// were sent on, sizes as the client counts them).
pub(crate) struct Rewriter {
    entries: VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max: usize,
    huffman: Option<HuffmanDecoder>,
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("entries", &self.entries.len())
            .field("size", &self.size)
            .field("max", &self.max)
            .finish()
    }
}

impl Default for Rewriter {
    fn default() -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max: TABLE_SIZE,
            huffman: None,
        }
    }
}

/// How a literal field affects the table (the first byte's pattern).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Literal {
    Indexing,
    WithoutIndexing,
    NeverIndexed,
}

impl Rewriter {
    /// Follows `block` and returns it with an unacceptable `:authority` replaced.
    pub(crate) fn rewrite(&mut self, block: &[u8]) -> Result<Block, HpackError> {
        let mut out: Option<Vec<u8>> = None;
        let mut pos = 0;
        while pos < block.len() {
            let start = pos;
            let first = block[pos];
            let replacement = if first & 0x80 != 0 {
                let index = integer(block, &mut pos, 7)?;
                // Entries hold what the server got, so this is only ever a static entry.
                let (name, value) = self.get(index)?;
                authority_fix(name, value).map(|v| encode(Literal::WithoutIndexing, &v))
            } else if first & 0xe0 == 0x20 {
                let max = integer(block, &mut pos, 5)?;
                self.max = max;
                self.evict(0);
                None
            } else {
                let (kind, prefix) = match first & 0xf0 {
                    f if f & 0xc0 == 0x40 => (Literal::Indexing, 6),
                    0x10 => (Literal::NeverIndexed, 4),
                    _ => (Literal::WithoutIndexing, 4),
                };
                let index = integer(block, &mut pos, prefix)?;
                let name = if index == 0 {
                    self.string(block, &mut pos)?
                } else {
                    self.get(index)?.0.to_vec()
                };
                let value = self.string(block, &mut pos)?;
                let fixed = authority_fix(&name, &value);
                if kind == Literal::Indexing {
                    let sent = fixed.clone().unwrap_or(value);
                    self.insert(name, sent);
                }
                fixed.map(|v| encode(kind, &v))
            };
            match (replacement, out.as_mut()) {
                (Some(field), Some(out)) => out.extend_from_slice(&field),
                (Some(field), None) => {
                    let mut rewritten = Vec::with_capacity(block.len() + 16);
                    rewritten.extend_from_slice(&block[..start]);
                    rewritten.extend_from_slice(&field);
                    out = Some(rewritten);
                }
                (None, Some(out)) => out.extend_from_slice(&block[start..pos]),
                (None, None) => {}
            }
        }
        Ok(out.map_or(Block::Unchanged, Block::Rewritten))
    }

    /// Entry `index` (1-based; static table first) as (name, value).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::Index(0)),
            i if i <= STATIC_NAMES.len() => {
                // Only `:authority` (index 1, empty value) is ever looked at by value.
                Ok((STATIC_NAMES[i - 1].as_bytes(), b""))
            }
            i => self
                .entries
                .get(i - STATIC_NAMES.len() - 1)
                .map(|(n, v)| (n.as_slice(), v.as_slice()))
                .ok_or(HpackError::Index(i)),
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = entry_size(&name, &value);
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.entries.push_front((name, value));
    }

    /// Drops the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            match self.entries.pop_back() {
                Some((n, v)) => self.size -= entry_size(&n, &v),
                None => break,
            }
        }
    }

    fn string(&mut self, block: &[u8], pos: &mut usize) -> Result<Vec<u8>, HpackError> {
        let at = *pos;
        let huffman = block.get(at).ok_or(HpackError::Truncated(at))? & 0x80 != 0;
        let len = integer(block, pos, 7)?;
        let end = pos
            .checked_add(len)
            .filter(|end| *end <= block.len())
            .ok_or(HpackError::Truncated(at))?;
        let raw = &block[*pos..end];
        *pos = end;
        if !huffman {
            return Ok(raw.to_vec());
        }
        self.huffman
            .get_or_insert_with(HuffmanDecoder::new)
            .decode(raw)
            .map_err(|_| HpackError::Huffman(at))
    }
}

fn entry_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 32
}

/// For an `:authority` h2 would refuse: the same bytes with every character that is not
/// unreserved in a URI (RFC 3986: letters, digits, `-._~`) turned into `_`, which
/// `http::uri::Authority` accepts and which has the same length. `None` when nothing must
/// change (or nothing of the same length would be accepted: an empty value).
pub(crate) fn authority_fix(name: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    if name != b":authority" || value.is_empty() || http::uri::Authority::try_from(value).is_ok() {
        return None;
    }
    let fixed: Vec<u8> = value
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                b
            } else {
                b'_'
            }
        })
        .collect();
    http::uri::Authority::try_from(fixed.as_slice())
        .is_ok()
        .then_some(fixed)
}

/// A literal `:authority` field (name from static index 1), raw string, of `kind`.
fn encode(kind: Literal, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 6);
    let (pattern, prefix) = match kind {
        Literal::Indexing => (0x40, 6),
        Literal::WithoutIndexing => (0x00, 4),
        Literal::NeverIndexed => (0x10, 4),
    };
    put_integer(&mut out, pattern, prefix, 1);
    put_integer(&mut out, 0x00, 7, value.len());
    out.extend_from_slice(value);
    out
}

/// Decodes an integer with an N-bit prefix at `pos` (RFC 7541 §5.1).
fn integer(buf: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, HpackError> {
    let at = *pos;
    let mask = (1u8 << prefix) - 1;
    let first = buf.get(at).ok_or(HpackError::Truncated(at))? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = usize::from(mask);
    let mut shift = 0u32;
    loop {
        let byte = *buf.get(*pos).ok_or(HpackError::Truncated(at))?;
        *pos += 1;
        // Header blocks are bounded far below 2^28; anything longer is garbage.
        if shift > 21 {
            return Err(HpackError::Overflow(at));
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Encodes `value` with an N-bit prefix after the `pattern` bits.
fn put_integer(out: &mut Vec<u8>, pattern: u8, prefix: u8, value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests;

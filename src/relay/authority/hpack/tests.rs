use proptest::prelude::*;

use super::*;

/// Decodes a block as a server would (loona-hpack's decoder, its own table).
fn decoded(decoder: &mut loona_hpack::Decoder<'_>, block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    decoder.decode(block).expect("server-side decode")
}

fn fixed(headers: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    headers
        .into_iter()
        .map(|(n, v)| {
            let v = authority_fix(&n, &v).unwrap_or(v);
            (n, v)
        })
        .collect()
}

#[test]
fn rfc7541_huffman_example_passes_unchanged() {
    // RFC 7541 C.4.1: GET http://www.example.com/ with Huffman-coded :authority, indexed.
    let block = [
        0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90,
        0xf4, 0xff,
    ];
    let mut rewriter = Rewriter::default();
    assert_eq!(rewriter.rewrite(&block), Ok(Block::Unchanged));
    assert_eq!(
        rewriter.get(62).unwrap(),
        (&b":authority"[..], &b"www.example.com"[..])
    );
    assert_eq!(rewriter.size, 57);
}

#[test]
fn a_socket_path_authority_is_made_valid_at_the_same_length() {
    let path = b"/run/numa-shim/cri.sock";
    let fix = authority_fix(b":authority", path).unwrap();
    assert_eq!(fix, b"_run_numa-shim_cri.sock");
    assert!(http::uri::Authority::try_from(fix.as_slice()).is_ok());
    // What h2 accepts is left alone.
    for fine in [
        &b"localhost"[..],
        b"localhost:80",
        b"127.0.0.1:9",
        b"[::1]:80",
    ] {
        assert_eq!(authority_fix(b":authority", fine), None, "{fine:?}");
    }
    assert_eq!(authority_fix(b":authority", b""), None);
    assert_eq!(authority_fix(b"x-authority", path), None);
    // Percent-encoded paths (grpc-java) are refused too.
    assert_eq!(
        authority_fix(b":authority", b"%2Frun%2Fx.sock").unwrap(),
        b"_2Frun_2Fx.sock"
    );
    for bad in [&b"unix:/run/x.sock"[..], b"a b", b"/"] {
        let fix = authority_fix(b":authority", bad).unwrap();
        assert_eq!(fix.len(), bad.len());
        assert!(http::uri::Authority::try_from(fix.as_slice()).is_ok());
    }
}

#[test]
fn every_literal_form_is_rewritten_and_indexes_stay_in_step() {
    let mut block = Vec::new();
    // Incremental indexing, name by static index 1.
    block.extend(encode(Literal::Indexing, b"/tmp/a.sock"));
    // Without indexing and never indexed, literal name.
    block.extend([0x00, 10]);
    block.extend(b":authority");
    block.extend([11]);
    block.extend(b"/tmp/b.sock");
    block.extend(encode(Literal::NeverIndexed, b"/tmp/c.sock"));
    // The entry added first, by index (62).
    block.push(0x80 | 62);
    // A size update to 0 and back empties the table: index 62 no longer exists.
    let mut server = loona_hpack::Decoder::new();
    let mut rewriter = Rewriter::default();
    let Block::Rewritten(out) = rewriter.rewrite(&block).unwrap() else {
        panic!("not rewritten")
    };
    let values: Vec<Vec<u8>> = decoded(&mut server, &out)
        .into_iter()
        .map(|(n, v)| {
            assert_eq!(n, b":authority");
            v
        })
        .collect();
    assert_eq!(
        values,
        [
            &b"_tmp_a.sock"[..],
            b"_tmp_b.sock",
            b"_tmp_c.sock",
            b"_tmp_a.sock"
        ]
    );
    assert_eq!(rewriter.size, 10 + 11 + 32);
    assert_eq!(
        rewriter.rewrite(&[0x20, 0x3f, 0xe1, 0x1f]),
        Ok(Block::Unchanged)
    );
    assert_eq!(rewriter.size, 0);
    assert_eq!(rewriter.rewrite(&[0x80 | 62]), Err(HpackError::Index(62)));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut r = Rewriter::default();
    assert_eq!(r.rewrite(&[0x80]), Err(HpackError::Index(0)));
    assert_eq!(r.rewrite(&[0x41]), Err(HpackError::Truncated(1)));
    assert_eq!(
        r.rewrite(&[0x41, 0x05, b'a']),
        Err(HpackError::Truncated(1))
    );
    assert_eq!(
        r.rewrite(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
        Err(HpackError::Overflow(0))
    );
    // Huffman string of all ones: EOS inside the string.
    assert_eq!(
        r.rewrite(&[0x41, 0x84, 0xff, 0xff, 0xff, 0xff]),
        Err(HpackError::Huffman(1))
    );
}

/// One field of a generated header block.
#[derive(Debug, Clone)]
enum Op {
    /// Indexed: a static entry or one of the newest dynamic entries.
    Indexed(usize),
    Literal(Literal, Option<usize>, Vec<u8>, Vec<u8>),
    SizeUpdate(usize),
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b":authority".to_vec()),
        Just(b"content-type".to_vec()),
        "[a-z-]{1,12}".prop_map(String::into_bytes),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"/run/numa-shim/cri.sock".to_vec()),
        Just(b"localhost".to_vec()),
        "[ -~]{0,40}".prop_map(String::into_bytes),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(Literal::Indexing),
        Just(Literal::WithoutIndexing),
        Just(Literal::NeverIndexed)
    ];
    prop_oneof![
        (1usize..70).prop_map(Op::Indexed),
        (kind, proptest::option::of(1usize..61), name(), value())
            .prop_map(|(k, i, n, v)| Op::Literal(k, i, n, v)),
        (0usize..=4096).prop_map(Op::SizeUpdate),
    ]
}

/// Encodes ops as a client would, skipping those that would be invalid against `table_len`.
fn client_block(ops: &[Op], mut table_len: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Indexed(index) if *index <= 61 + table_len => {
                put_integer(&mut out, 0x80, 7, *index);
            }
            Op::Indexed(_) => {}
            Op::Literal(kind, index, name, value) => {
                let (pattern, prefix) = match kind {
                    Literal::Indexing => (0x40, 6),
                    Literal::WithoutIndexing => (0x00, 4),
                    Literal::NeverIndexed => (0x10, 4),
                };
                match index {
                    Some(i) => put_integer(&mut out, pattern, prefix, *i),
                    None => {
                        put_integer(&mut out, pattern, prefix, 0);
                        put_integer(&mut out, 0, 7, name.len());
                        out.extend_from_slice(name);
                    }
                }
                put_integer(&mut out, 0, 7, value.len());
                out.extend_from_slice(value);
                if *kind == Literal::Indexing {
                    table_len += 1; // an upper bound; evictions only lower it
                }
            }
            // Size updates only at the start of a block (RFC 7541 §4.2).
            Op::SizeUpdate(max) if i == 0 => {
                put_integer(&mut out, 0x20, 5, *max);
                table_len = 0;
            }
            Op::SizeUpdate(_) => {}
        }
    }
    (out, table_len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Across a connection's blocks, the server decodes exactly what the client meant, with
    /// each refused `:authority` replaced by its fix, and both tables stay in step.
    #[test]
    fn the_server_sees_what_the_client_meant(blocks in proptest::collection::vec(proptest::collection::vec(op(), 0..12), 1..6)) {
        let mut client_view = loona_hpack::Decoder::new();
        let mut server_view = loona_hpack::Decoder::new();
        let mut rewriter = Rewriter::default();
        let mut table_len = 0;
        for ops in &blocks {
            // Indexes are only emitted against what a real table could hold: blocks whose
            // indexes the client's own decoder refuses are skipped.
            let (block, len) = client_block(ops, table_len);
            let Ok(meant) = client_view.decode(&block) else { return Ok(()) };
            table_len = len;
            let out = match rewriter.rewrite(&block).unwrap() {
                Block::Unchanged => block.clone(),
                Block::Rewritten(out) => out,
            };
            let seen = decoded(&mut server_view, &out);
            prop_assert_eq!(seen, fixed(meant));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Rewriter::default().rewrite(&bytes);
    }
}

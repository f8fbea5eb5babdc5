//! What the runtime answers on an intercepted or observed call reaches the client unchanged:
//! code, message, details, metadata, trailers and the frame shape (trailers-only stays
//! trailers-only), for every status code, with and without a body. Seen with a raw HTTP/2
//! client that reads the frames themselves, compared with the same call made straight to the
//! fake runtime.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;
use numa_shim::testing::relay::frames;

use client::setup;
use frames::{shape, Conn, Shape};
use numa_shim::relay::{Method, NoopHook};

const SHAPES: [&str; 3] = ["trailers-only", "headers-trailers", "body-trailers"];

fn path(method: Method) -> String {
    format!("/runtime.v1.RuntimeService/{}", method.name())
}

#[tokio::test]
async fn every_answer_of_every_decoded_method_keeps_its_frames() {
    let s = setup(NoopHook).await;
    let mut direct = Conn::connect(&s.runtime.path).await;
    let mut relayed = Conn::connect(&s.relay.path).await;
    let mut checked = 0;
    for method in Method::ALL {
        for shape_name in SHAPES {
            for code in 0..=16 {
                if code == 0 && shape_name == "trailers-only" {
                    continue; // an OK unary answer has a message
                }
                let answer = format!("{shape_name}:{code}");
                let extra = [(fake::ANSWER, answer.as_str())];
                // An empty message decodes as every one of the decoded requests.
                let want = direct.unary(&path(method), &extra, &[]).await;
                let got = relayed.unary(&path(method), &extra, &[]).await;
                assert_eq!(
                    shape(&got),
                    shape(&want),
                    "{} answered {answer}",
                    method.name()
                );
                if code != 0 {
                    let last = got.last().unwrap();
                    assert_eq!(last.header("grpc-status"), Some(code.to_string().as_str()));
                    assert!(last.header("grpc-status-details-bin").is_some());
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, Method::ALL.len() * (3 * 17 - 1));
}

#[tokio::test]
async fn a_trailers_only_error_is_one_headers_frame_with_end_stream() {
    let s = setup(NoopHook).await;
    let mut relayed = Conn::connect(&s.relay.path).await;
    let extra = [(fake::ANSWER, "trailers-only:5")];
    let got = relayed
        .unary(&path(Method::CreateContainer), &extra, &[])
        .await;
    match shape(&got).as_slice() {
        [Shape::Headers { end: true, headers }] => {
            let status = headers.iter().find(|(n, _)| n == "grpc-status");
            assert_eq!(status.map(|(_, v)| v.as_str()), Some("5"));
        }
        other => panic!("not trailers-only: {other:?}"),
    }
}

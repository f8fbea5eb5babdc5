//! The relay forwards calls it does not decode byte for byte: unknown methods and services,
//! server streams, errors with details and metadata, deadlines, large messages, concurrency.

use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;

use std::time::{Duration, Instant};

use bytes::Bytes;
use client::{channel, raw_unary, runtime_client, Setup};
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::NoopHook;
use tonic::{Code, Request};

async fn setup() -> Setup {
    client::setup(NoopHook).await
}

#[tokio::test]
async fn unary_call_keeps_metadata_both_ways() {
    let s = setup().await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let mut req = Request::new(cri::VersionRequest {
        version: "v1".into(),
    });
    req.metadata_mut()
        .insert("x-custom", "abc".parse().unwrap());
    req.metadata_mut().insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            .parse()
            .unwrap(),
    );
    req.set_timeout(Duration::from_secs(7));
    let resp = client.version(req).await.unwrap();
    assert_eq!(resp.metadata().get("x-echo-custom").unwrap(), "abc");
    assert_eq!(resp.get_ref().runtime_name, "fake-runtime");
    assert_eq!(resp.get_ref().version, "v1");
    let seen = s.runtime.log.for_path("/runtime.v1.RuntimeService/Version");
    assert_eq!(seen.len(), 1);
    let h = &seen[0].headers;
    assert_eq!(h.get("x-custom").unwrap(), "abc");
    assert_eq!(
        h.get("traceparent").unwrap(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    // tonic writes the timeout as grpc-timeout; the runtime must get it verbatim.
    let timeout = h.get("grpc-timeout").unwrap().to_str().unwrap();
    assert!(
        timeout.starts_with("7000000") || timeout == "7S",
        "{timeout}"
    );
}

#[tokio::test]
async fn image_service_is_forwarded() {
    let s = setup().await;
    let mut images =
        cri::image_service_client::ImageServiceClient::new(channel(&s.relay.path).await);
    let resp = images
        .image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .unwrap();
    assert_eq!(resp.get_ref().image_filesystems[0].timestamp, 7);
}

#[tokio::test]
async fn unknown_method_and_service_pass_with_headers_and_trailers() {
    let s = setup().await;
    for path in [fake::FUTURE_METHOD, fake::FUTURE_SERVICE] {
        let payload = Bytes::from_static(b"\x0a\x03abc\xf8\x07\x01 anything at all");
        let mut req = Request::new(payload.clone());
        req.metadata_mut().insert("x-custom", "z".parse().unwrap());
        let resp = raw_unary(channel(&s.relay.path).await, path, req)
            .await
            .unwrap();
        assert_eq!(resp.get_ref(), &payload, "{path}");
        assert_eq!(resp.metadata().get("x-future").unwrap(), "yes");
        let seen = s.runtime.log.for_path(path);
        assert_eq!(seen.len(), 1);
        assert_eq!(client::message_of(&seen[0]), payload);
        assert_eq!(seen[0].headers.get("x-custom").unwrap(), "z");
    }
}

#[tokio::test]
async fn unknown_method_trailers_reach_the_client() {
    // tonic's unary client folds trailers into the response metadata.
    let s = setup().await;
    let resp = raw_unary(
        channel(&s.relay.path).await,
        fake::FUTURE_METHOD,
        Request::new(Bytes::from_static(b"x")),
    )
    .await
    .unwrap();
    assert_eq!(resp.metadata().get("x-trailer").unwrap(), "kept");
}

#[tokio::test]
async fn multi_message_request_bodies_pass_unchanged() {
    // A future client- or bidi-streaming method: several framed messages in one request body.
    let s = setup().await;
    let body: Vec<u8> = [&b"\0\0\0\0\x03one"[..], b"\0\0\0\0\x03two", b"\0\0\0\0\x00"].concat();
    let (head, echoed, trailers) = client::h2_raw(
        &s.relay.path,
        fake::FUTURE_SERVICE,
        &[],
        Bytes::from(body.clone()),
    )
    .await;
    assert_eq!(head.status, 200);
    assert_eq!(echoed, body);
    assert_eq!(trailers.unwrap().get("x-trailer").unwrap(), "kept");
    assert_eq!(s.runtime.log.for_path(fake::FUTURE_SERVICE)[0].body, body);
}

#[tokio::test]
async fn server_streams_deliver_every_message() {
    let s = setup().await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let mut events = client
        .get_container_events(cri::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    while let Some(ev) = events.message().await.unwrap() {
        ids.push(ev.container_id);
    }
    let expected: Vec<_> = (0..fake::EVENTS).map(|i| format!("c{i}")).collect();
    assert_eq!(ids, expected);

    let mut pages = client
        .stream_containers(cri::StreamContainersRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while let Some(page) = pages.message().await.unwrap() {
        assert_eq!(page.containers[0].id, format!("k{n}"));
        n += 1;
    }
    assert_eq!(n, fake::STREAMED);
}

async fn status_of(s: &Setup, id: &str) -> tonic::Status {
    let mut client = runtime_client(channel(&s.relay.path).await);
    client
        .container_status(cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap_err()
}

#[tokio::test]
async fn runtime_errors_reach_the_client_unchanged() {
    let s = setup().await;
    let st = status_of(&s, "missing").await;
    assert_eq!(st.code(), Code::NotFound);
    assert_eq!(st.message(), "container \"missing\": not found");
    assert_eq!(st.details(), b"\x08\x05\x12\x0bdetail-blob");
    assert_eq!(st.metadata().get("x-err").unwrap(), "yes");

    let st = status_of(&s, "unimpl").await;
    assert_eq!(
        (st.code(), st.message()),
        (Code::Unimplemented, "not here, sorry")
    );

    let st = status_of(&s, "deadline").await;
    assert_eq!(
        (st.code(), st.message()),
        (Code::DeadlineExceeded, "took too long")
    );
    assert_eq!(st.details(), b"\x08\x05\x12\x0bdetail-blob");
}

#[tokio::test]
async fn grpc_timeout_is_honoured_by_the_runtime() {
    // A raw HTTP/2 client that does not enforce deadlines itself: only the runtime can end the
    // call early, and only if grpc-timeout reached it.
    let s = setup().await;
    let started = Instant::now();
    let request = cri::ContainerStatusRequest {
        container_id: "slow-3000".into(),
        verbose: false,
    };
    let (head, _, trailers) = client::h2_unary(
        &s.relay.path,
        "/runtime.v1.RuntimeService/ContainerStatus",
        &[("grpc-timeout", "300m")],
        &prost::Message::encode_to_vec(&request),
    )
    .await;
    let elapsed = started.elapsed();
    // tonic servers answer an expired grpc-timeout with CANCELLED "Timeout expired".
    let status = trailers
        .as_ref()
        .and_then(tonic::Status::from_header_map)
        .or_else(|| tonic::Status::from_header_map(&head.headers))
        .unwrap();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(status.message(), "Timeout expired");
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
    let seen = s
        .runtime
        .log
        .for_path("/runtime.v1.RuntimeService/ContainerStatus");
    assert_eq!(seen[0].headers.get("grpc-timeout").unwrap(), "300m");
}

#[tokio::test]
async fn ten_mib_message_passes_both_ways() {
    let s = setup().await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let big: String = (0..10 << 20)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let resp = client
        .exec_sync(cri::ExecSyncRequest {
            container_id: "c".into(),
            cmd: vec![big.clone()],
            timeout: 0,
        })
        .await
        .unwrap();
    assert_eq!(resp.get_ref().stdout.len(), big.len());
    assert!(resp.get_ref().stdout == big.as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_from_many_clients_all_succeed() {
    let s = setup().await;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..16 {
        let client = runtime_client(channel(&s.relay.path).await);
        for i in 0..(200 / 16 + usize::from(c < 200 % 16)) {
            let mut client = client.clone();
            tasks.spawn(async move {
                let id = format!("id-{c}-{i}");
                if i % 2 == 0 {
                    let r = client
                        .container_status(cri::ContainerStatusRequest {
                            container_id: id.clone(),
                            verbose: false,
                        })
                        .await
                        .unwrap();
                    assert_eq!(r.into_inner().status.unwrap().id, id);
                } else {
                    let r = client
                        .create_container(cri::CreateContainerRequest {
                            pod_sandbox_id: "sb".into(),
                            config: Some(cri::ContainerConfig {
                                metadata: Some(cri::ContainerMetadata {
                                    name: id.clone(),
                                    attempt: 0,
                                }),
                                ..Default::default()
                            }),
                            sandbox_config: None,
                        })
                        .await
                        .unwrap();
                    assert_eq!(r.into_inner().container_id, format!("ctr-{id}"));
                }
            });
        }
    }
    let mut done = 0;
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
        done += 1;
    }
    assert_eq!(done, 200);
    assert_eq!(s.runtime.log.len(), 200);
}

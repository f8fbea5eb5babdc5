//! Intercepted and observed calls: wire-preserving patches keep unknown fields byte for byte,
//! rejections never reach the runtime, malformed messages are refused, and the hook sees every
//! forwarded outcome with the request as the caller sent it and what it decided (one way: the
//! patched bytes are not decoded again).

use numa_shim::testing::relay::client;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use client::{channel, message_of, raw_unary, runtime_client, setup};
use numa_shim::proto::cri::v1 as cri;
use numa_shim::relay::{
    CriRequest, CriResponse, Decision, Hook, Method, NoopHook, Outcome, Patch, ResourcesPatch,
};
use prost::Message;
use tonic::{Code, Request, Status};

const CREATE: &str = "/runtime.v1.RuntimeService/CreateContainer";
const RUN: &str = "/runtime.v1.RuntimeService/RunPodSandbox";

/// Patches every CreateContainer to cpuset 2-3 (deciding "cpus 2-3"), rejects sandboxes named
/// `reject-me`, stalls on sandboxes named `slow-hook`, and records every outcome with what it
/// decided.
#[derive(Debug, Clone, Default)]
struct TestHook {
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// One call `after` saw: the caller's request, what `before` decided, the runtime's outcome.
type Seen = (CriRequest, Option<&'static str>, Outcome);

impl TestHook {
    fn outcomes(&self, method: Method) -> Vec<(CriRequest, Outcome)> {
        self.decided(method)
            .into_iter()
            .map(|(r, _, o)| (r, o))
            .collect()
    }

    fn decided(&self, method: Method) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, _, _)| r.method() == method)
            .cloned()
            .collect()
    }
}

impl Hook for TestHook {
    type Decided = &'static str;

    async fn before(&self, request: &CriRequest) -> Decision<&'static str> {
        match request {
            CriRequest::CreateContainer(_) => Decision::Forward {
                patch: Patch {
                    resources: ResourcesPatch {
                        cpuset_cpus: Some("2-3".into()),
                        ..Default::default()
                    },
                    annotations: [("numa-shim/cpus".to_string(), "2-3".to_string())].into(),
                },
                decided: "cpus 2-3",
            },
            CriRequest::RunPodSandbox(r) => {
                let name = r
                    .config
                    .as_ref()
                    .and_then(|c| c.metadata.as_ref())
                    .map(|m| m.name.as_str());
                match name {
                    Some("reject-me") => Decision::Reject(Status::with_details(
                        Code::FailedPrecondition,
                        "TopologyAffinityError",
                        Bytes::from_static(b"why"),
                    )),
                    Some("slow-hook") => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        Decision::Continue
                    }
                    _ => Decision::Continue,
                }
            }
            _ => Decision::Continue,
        }
    }

    async fn after(&self, request: &CriRequest, decided: Option<&'static str>, outcome: &Outcome) {
        self.seen
            .lock()
            .unwrap()
            .push((request.clone(), decided, outcome.clone()));
    }
}

fn create_request(sandbox: &str) -> cri::CreateContainerRequest {
    cri::CreateContainerRequest {
        pod_sandbox_id: sandbox.into(),
        config: Some(cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            annotations: [("a".to_string(), "1".to_string())].into(),
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: 2048,
                    cpu_quota: 200_000,
                    cpu_period: 100_000,
                    cpuset_cpus: "0-7".into(),
                    ..Default::default()
                }),
                security_context: None,
            }),
            ..Default::default()
        }),
        sandbox_config: Some(cri::PodSandboxConfig {
            hostname: "pod".into(),
            ..Default::default()
        }),
    }
}

/// A CreateContainerRequest with fields numa-shim's schema does not know: one at the top level
/// and one inside `config.linux.resources` (as a newer kubelet might send).
fn create_with_unknown_fields(sandbox: &str) -> Bytes {
    let mut bytes = create_request(sandbox).encode_to_vec();
    prost::encoding::string::encode(99, &"future-top".to_string(), &mut bytes);
    let mut resources = Vec::new();
    prost::encoding::int64::encode(42, &4242, &mut resources);
    let linux = nest(1, &resources);
    let config = nest(15, &linux);
    bytes.extend(nest(2, &config));
    Bytes::from(bytes)
}

fn nest(tag: u32, inner: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(inner.len() as u64, &mut out);
    out.extend_from_slice(inner);
    out
}

#[tokio::test]
async fn without_a_patch_the_runtime_gets_the_exact_bytes() {
    let s = setup(NoopHook).await;
    let original = create_with_unknown_fields("sb1");
    let resp = raw_unary(
        channel(&s.relay.path).await,
        CREATE,
        Request::new(original.clone()),
    )
    .await
    .unwrap();
    let decoded = cri::CreateContainerResponse::decode(resp.into_inner()).unwrap();
    assert_eq!(decoded.container_id, "ctr-app");
    let seen = s.runtime.log.for_path(CREATE);
    assert_eq!(message_of(&seen[0]), original);
}

#[tokio::test]
async fn patch_keeps_unknown_fields_and_the_runtime_sees_the_new_cpuset() {
    let hook = TestHook::default();
    let s = setup(hook.clone()).await;
    let original = create_with_unknown_fields("sb1");
    raw_unary(
        channel(&s.relay.path).await,
        CREATE,
        Request::new(original.clone()),
    )
    .await
    .unwrap();
    let received = message_of(&s.runtime.log.for_path(CREATE)[0]);
    // The original bytes arrive unchanged, with only the patch appended.
    assert!(received.len() > original.len());
    assert_eq!(&received[..original.len()], &original[..]);
    // The runtime decodes the patched cpuset and annotation; everything else is as sent.
    let got = s.runtime.fake.created.lock().unwrap()[0].clone();
    let mut expected = create_request("sb1");
    let config = expected.config.as_mut().unwrap();
    config
        .annotations
        .insert("numa-shim/cpus".into(), "2-3".into());
    config
        .linux
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .cpuset_cpus = "2-3".into();
    assert_eq!(got, expected);
    // The hook's `after` sees the request as the caller sent it, what it decided, and the
    // decoded response: the decision comes back as a value, not read back from the patch.
    let outcomes = hook.decided(Method::CreateContainer);
    assert_eq!(outcomes.len(), 1);
    let (req, decided, outcome) = &outcomes[0];
    match req {
        CriRequest::CreateContainer(r) => assert_eq!(**r, create_request("sb1")),
        other => panic!("{other:?}"),
    }
    assert_eq!(*decided, Some("cpus 2-3"));
    assert_eq!(outcome.status.code(), Code::Ok);
    assert_eq!(
        outcome.response,
        Some(CriResponse::CreateContainer(cri::CreateContainerResponse {
            container_id: "ctr-app".into()
        }))
    );
}

#[tokio::test]
async fn runtime_error_on_an_intercepted_call_reaches_client_and_hook() {
    let hook = TestHook::default();
    let s = setup(hook.clone()).await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let err = client
        .create_container(create_request("fail"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "sandbox \"fail\" is gone");
    assert_eq!(err.details(), b"\x08\x05\x12\x0bdetail-blob");
    let outcomes = hook.outcomes(Method::CreateContainer);
    assert_eq!(outcomes[0].1.status.code(), Code::FailedPrecondition);
    assert_eq!(outcomes[0].1.response, None);
}

fn sandbox(name: &str) -> cri::RunPodSandboxRequest {
    cri::RunPodSandboxRequest {
        config: Some(cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: "uid-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            ..Default::default()
        }),
        runtime_handler: String::new(),
    }
}

#[tokio::test]
async fn rejected_calls_never_reach_the_runtime() {
    let hook = TestHook::default();
    let s = setup(hook.clone()).await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let err = client
        .run_pod_sandbox(sandbox("reject-me"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "TopologyAffinityError");
    assert_eq!(err.details(), b"why");
    assert!(s.runtime.log.for_path(RUN).is_empty());
    assert!(hook.outcomes(Method::RunPodSandbox).is_empty());
    let ok = client.run_pod_sandbox(sandbox("fine")).await.unwrap();
    assert_eq!(ok.into_inner().pod_sandbox_id, "sb-fine");
    assert_eq!(hook.outcomes(Method::RunPodSandbox).len(), 1);
}

#[tokio::test]
async fn a_hook_slower_than_the_deadline_gives_deadline_exceeded() {
    // A raw HTTP/2 client, so the deadline is enforced by the relay and not the client.
    let s = setup(TestHook::default()).await;
    let started = std::time::Instant::now();
    let (head, _, _) = client::h2_unary(
        &s.relay.path,
        RUN,
        &[("grpc-timeout", "200m")],
        &sandbox("slow-hook").encode_to_vec(),
    )
    .await;
    assert_eq!(head.headers.get("grpc-status").unwrap(), "4");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(s.runtime.log.for_path(RUN).is_empty());
}

#[tokio::test]
async fn malformed_intercepted_messages_are_refused_and_not_forwarded() {
    let s = setup(TestHook::default()).await;
    // Field 2 (config) claims 100 bytes but only 1 follows.
    let garbage = Bytes::from_static(&[0x12, 0x64, 0x01]);
    let err = raw_unary(channel(&s.relay.path).await, CREATE, Request::new(garbage))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message()
            .contains("malformed /runtime.v1.RuntimeService/CreateContainer"),
        "{}",
        err.message()
    );
    assert!(s.runtime.log.for_path(CREATE).is_empty());
}

#[tokio::test]
async fn stop_and_remove_outcomes_are_observed_without_rewriting() {
    // Shared through an Arc, as the placement layer will hold its hook.
    let hook = Arc::new(TestHook::default());
    let s = setup(hook.clone()).await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    client
        .stop_container(cri::StopContainerRequest {
            container_id: "c1".into(),
            timeout: 5,
        })
        .await
        .unwrap();
    let err = client
        .remove_container(cri::RemoveContainerRequest {
            container_id: "missing".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    client
        .stop_pod_sandbox(cri::StopPodSandboxRequest {
            pod_sandbox_id: "sb1".into(),
        })
        .await
        .unwrap();
    client
        .remove_pod_sandbox(cri::RemovePodSandboxRequest {
            pod_sandbox_id: "sb1".into(),
        })
        .await
        .unwrap();
    let stop = hook.outcomes(Method::StopContainer);
    assert_eq!(stop.len(), 1);
    assert_eq!(
        stop[0].0,
        CriRequest::StopContainer(cri::StopContainerRequest {
            container_id: "c1".into(),
            timeout: 5
        })
    );
    assert_eq!(stop[0].1.status.code(), Code::Ok);
    assert_eq!(
        stop[0].1.response,
        Some(CriResponse::StopContainer(cri::StopContainerResponse {}))
    );
    let remove = hook.outcomes(Method::RemoveContainer);
    assert_eq!(remove[0].1.status.code(), Code::NotFound);
    assert_eq!(hook.outcomes(Method::StopPodSandbox).len(), 1);
    assert_eq!(hook.outcomes(Method::RemovePodSandbox).len(), 1);
    // Observed requests reach the runtime byte for byte.
    let sent = cri::StopContainerRequest {
        container_id: "c1".into(),
        timeout: 5,
    }
    .encode_to_vec();
    let seen = s
        .runtime
        .log
        .for_path("/runtime.v1.RuntimeService/StopContainer");
    assert_eq!(message_of(&seen[0]), sent);
}

#[tokio::test]
async fn update_container_resources_is_patched_too() {
    #[derive(Debug, Clone, Default)]
    struct Mems;
    impl Hook for Mems {
        type Decided = ();

        async fn before(&self, _request: &CriRequest) -> Decision {
            Decision::patch(Patch {
                resources: ResourcesPatch {
                    cpuset_mems: Some("1".into()),
                    cpu_quota: Some(-1),
                    ..Default::default()
                },
                ..Default::default()
            })
        }
    }
    let s = setup(Mems).await;
    let mut client = runtime_client(channel(&s.relay.path).await);
    let req = cri::UpdateContainerResourcesRequest {
        container_id: "c1".into(),
        linux: Some(cri::LinuxContainerResources {
            cpuset_cpus: "4".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    client
        .update_container_resources(req.clone())
        .await
        .unwrap();
    let seen = s
        .runtime
        .log
        .for_path("/runtime.v1.RuntimeService/UpdateContainerResources");
    let got = cri::UpdateContainerResourcesRequest::decode(message_of(&seen[0])).unwrap();
    let linux = got.linux.unwrap();
    assert_eq!(
        (
            linux.cpuset_cpus.as_str(),
            linux.cpuset_mems.as_str(),
            linux.cpu_quota
        ),
        ("4", "1", -1)
    );
    assert!(message_of(&seen[0]).starts_with(&req.encode_to_vec()));
}

//! Bad input on the intercepted path gets a clear status and loses nothing: resource values no
//! kubelet sends and no kernel accepts (2^62, 2^63−1) are refused with INVALID_ARGUMENT naming
//! the CRI field, before anything is reserved or reaches the runtime, through the relay in
//! front of the fake runtime.

use numa_shim::testing::e2e as support;

use numa_shim::proto::cri::v1 as cri;
use support::harness::{channel, Setup, Shim};
use support::kubelet::{pod_def, Res, GI};
use tonic::Code;

type Client = cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>;

const HUGE: [i64; 2] = [1 << 62, i64::MAX];

fn set(r: &mut cri::LinuxContainerResources, field: &str, value: i64) {
    match field {
        "cpu_shares" => r.cpu_shares = value,
        "cpu_quota" => r.cpu_quota = value,
        "cpu_period" => r.cpu_period = value,
        "memory_limit_in_bytes" => r.memory_limit_in_bytes = value,
        _ => unreachable!("{field}"),
    }
}

const FIELDS: [&str; 4] = [
    "cpu_shares",
    "cpu_quota",
    "cpu_period",
    "memory_limit_in_bytes",
];

#[tokio::test]
async fn huge_sandbox_resources_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let shim = Shim::start(
        dir.path(),
        &Setup::new("topoDualSocketHT", "single-numa-node", "pod"),
    )
    .await;
    let mut client = Client::new(channel(&shim.listen).await);
    for field in FIELDS {
        for value in HUGE {
            let def = pod_def(&format!("huge-{}", field.replace('_', "-")))
                .pod_level(Res::guaranteed(2000, GI))
                .container("main", Res::guaranteed(2000, GI));
            let mut request = def.run_request();
            let resources = request
                .config
                .as_mut()
                .and_then(|c| c.linux.as_mut())
                .and_then(|l| l.resources.as_mut())
                .unwrap();
            set(resources, field, value);
            let err = client.run_pod_sandbox(request).await.unwrap_err();
            assert_eq!(
                err.code(),
                Code::InvalidArgument,
                "{field}={value}: {err:?}"
            );
            assert!(
                err.message().contains(&format!("linux.resources.{field}")),
                "{field}={value}: {}",
                err.message()
            );
            assert!(
                err.message().contains(&value.to_string()),
                "{}",
                err.message()
            );
        }
    }
    assert!(
        shim.fake().state().sandboxes.is_empty(),
        "nothing reached the runtime"
    );
    assert!(
        shim.started.placer.registry().pods().is_empty(),
        "nothing reserved"
    );
}

#[tokio::test]
async fn huge_container_resources_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let shim = Shim::start(
        dir.path(),
        &Setup::new("topoDualSocketHT", "single-numa-node", "pod"),
    )
    .await;
    let kubelet = shim.kubelet().await;
    let mut client = Client::new(channel(&shim.listen).await);
    let def = pod_def("grows")
        .pod_level(Res::guaranteed(4000, 4 * GI))
        .container("main", Res::guaranteed(2000, GI));
    let sandbox = kubelet.run_sandbox(&def).await.unwrap();
    let before = shim.started.placer.registry().snapshot();
    for field in FIELDS {
        for value in HUGE {
            let mut request = def.create_request(&sandbox, "main");
            let resources = request
                .config
                .as_mut()
                .and_then(|c| c.linux.as_mut())
                .and_then(|l| l.resources.as_mut())
                .unwrap();
            set(resources, field, value);
            let err = client.create_container(request).await.unwrap_err();
            assert_eq!(
                err.code(),
                Code::InvalidArgument,
                "{field}={value}: {err:?}"
            );
            assert!(
                err.message().contains(&format!("linux.resources.{field}")),
                "{field}={value}: {}",
                err.message()
            );
        }
    }
    assert!(shim.fake().state().containers.is_empty(), "nothing created");
    assert_eq!(
        shim.started.placer.registry().snapshot(),
        before,
        "the pod is as it was"
    );
    // A sane request still works afterwards.
    kubelet.create(&def, &sandbox, "main").await.unwrap();
}

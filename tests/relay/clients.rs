//! Clients that are not Go's, with their libraries' default channels on a unix socket: grpcio
//! (gRPC C-core) and grpc-java (Netty, epoll). Both send the socket path as `:authority`, which
//! h2 refuses; numa-shim must answer them as containerd does — unary and server-streaming, on
//! the CRI socket (passthrough and intercepted calls) and on the PodResources socket.
//!
//! Ignored by default: integration/grpc-clients.sh installs grpcio-tools with pip and builds
//! the Java client with Maven on first use. integration/test-all.sh runs them
//! (`cargo test --test relay -- --ignored clients::`).

use numa_shim::testing::podresources::registry as support;
use numa_shim::testing::relay::client;
use numa_shim::testing::relay::fake;

use std::path::Path;
use std::sync::{Arc, Mutex};

use numa_shim::relay::NoopHook;
use serde_json::Value;

const LIBRARIES: [&str; 2] = ["python", "java"];
const RUNTIME: &str = "runtime.v1.RuntimeService";

/// Runs integration/grpc-clients.sh LIBRARY SOCKET ARGS... and parses its JSON.
async fn call(library: &str, socket: &Path, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/grpc-clients.sh");
    let out = tokio::process::Command::new(script)
        .arg(library)
        .arg(socket)
        .args(args)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{library} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{library}: not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 + pip and java + mvn; run with --ignored"]
async fn grpcio_and_grpc_java_defaults_work_on_the_cri_socket() {
    let s = client::setup(NoopHook).await;
    let socket = s.relay.path.as_path();
    for lib in LIBRARIES {
        // Passthrough unary.
        let version = call(lib, socket, &["call", RUNTIME, "Version", "{}"]).await;
        assert_eq!(version["code"], "OK", "{lib}: {version}");
        assert_eq!(version["response"]["runtimeName"], "fake-runtime", "{lib}");
        // Intercepted unary, success and a runtime error (trailers-only).
        let run = r#"{"config": {"metadata": {"name": "x", "uid": "u", "namespace": "n"}}}"#;
        let sandbox = call(lib, socket, &["call", RUNTIME, "RunPodSandbox", run]).await;
        assert_eq!(
            sandbox["response"]["podSandboxId"], "sb-x",
            "{lib}: {sandbox}"
        );
        let fail = r#"{"podSandboxId": "fail"}"#;
        let err = call(lib, socket, &["call", RUNTIME, "CreateContainer", fail]).await;
        assert_eq!(err["code"], "FAILED_PRECONDITION", "{lib}: {err}");
        assert_eq!(err["message"], "sandbox \"fail\" is gone", "{lib}");
        // Server streaming: a CRI stream (GetContainerEvents) and the fake's StreamContainers.
        let events = call(
            lib,
            socket,
            &["stream", RUNTIME, "GetContainerEvents", "{}"],
        )
        .await;
        assert_eq!(events["code"], "OK", "{lib}: {events}");
        let events = events["responses"].as_array().unwrap();
        assert_eq!(events.len(), fake::EVENTS, "{lib}");
        assert_eq!(events[49]["containerId"], "c49", "{lib}");
        let pages = call(lib, socket, &["stream", RUNTIME, "StreamContainers", "{}"]).await;
        assert_eq!(
            pages["responses"].as_array().unwrap().len(),
            fake::STREAMED,
            "{lib}: {pages}"
        );
        // A stream the client stops reading early (it cancels).
        let few = call(
            lib,
            socket,
            &["stream", RUNTIME, "GetContainerEvents", "{}", "3"],
        )
        .await;
        assert_eq!(
            few["responses"].as_array().unwrap().len(),
            3,
            "{lib}: {few}"
        );
    }
    // The runtime saw every call (nothing was reset at numa-shim).
    let seen = s
        .runtime
        .log
        .for_path("/runtime.v1.RuntimeService/GetContainerEvents");
    assert_eq!(seen.len(), 2 * LIBRARIES.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 + pip and java + mvn; run with --ignored"]
async fn grpcio_and_grpc_java_defaults_work_on_the_podresources_socket() {
    let mut r = support::registry();
    assert!(support::run(&mut r, support::plrm_pod("a", 3)));
    let dir = tempfile::tempdir().unwrap();
    let served =
        support::Served::start(dir.path(), Arc::new(Mutex::new(r)), support::options()).await;
    for lib in LIBRARIES {
        let list = call(
            lib,
            &served.path,
            &["call", "v1.PodResourcesLister", "List", "{}"],
        )
        .await;
        assert_eq!(list["code"], "OK", "{lib}: {list}");
        let pods = list["response"]["podResources"].as_array().unwrap();
        assert_eq!(pods.len(), 1, "{lib}: {list}");
        assert_eq!(pods[0]["cpuIds"].as_array().unwrap().len(), 3, "{lib}");
        let get = r#"{"podName": "nope", "podNamespace": "ns"}"#;
        let err = call(
            lib,
            &served.path,
            &["call", "v1.PodResourcesLister", "Get", get],
        )
        .await;
        assert_eq!(err["code"], "NOT_FOUND", "{lib}: {err}");
    }
    served.stop().await;
}

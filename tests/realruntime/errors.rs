//! The runtime's errors on the calls numa-shim decodes reach grpc-go clients (the kubelet's gRPC
//! library, and crictl) through numa-shim exactly as they do straight from the runtime: the same
//! code and message, for an unknown sandbox, a missing image, a container or sandbox in the
//! wrong state and a runtime that is restarting.
//!
//! Each case also names the code each runtime answers, so that it tests what it names: containerd
//! answers NotFound for unknown ids, CRI-O Unknown (its message says "not found: ID does not
//! exist"), and CRI-O's StopContainer / StopPodSandbox of an unknown id succeed (the CRI asks for
//! that; Debian's containerd 1.6 answers NotFound).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::support::*;

/// integration/cri-go-client built once per test binary (grpc-go + k8s.io/cri-api).
fn go_client() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cri-go-client");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/cri-go-client");
        let status = Command::new("go")
            .arg("build")
            .arg("-o")
            .arg(&out)
            .arg(".")
            .current_dir(src)
            .status()
            .expect("go is installed");
        assert!(status.success(), "building cri-go-client failed");
        out
    })
}

/// One call with grpc-go's default dial options: `{"code", "message", "details", "response"}`.
pub(crate) fn go_call(socket: &Path, method: &str, request: &Value) -> Value {
    let out = Command::new(go_client())
        .arg("-endpoint")
        .arg(format!("unix://{}", socket.display()))
        .arg(method)
        .arg(request.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cri-go-client {method}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `crictl ARGS` at `socket`: (exit status, crictl's closing error line).
fn crictl(env: &Env, socket: &Path, args: &[&str]) -> (Option<i32>, String) {
    let endpoint = format!("unix://{}", socket.display());
    let out = Command::new(&env.crictl)
        .args([
            "--runtime-endpoint",
            &endpoint,
            "--image-endpoint",
            &endpoint,
        ])
        .args(["--timeout", "20s"])
        .args(args)
        .output()
        .unwrap();
    // Earlier lines are klog's, with a timestamp and pid; the last is the error crictl reports.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let last = last
        .split_once(" msg=")
        .map_or(last, |(_, m)| m)
        .to_string();
    (out.status.code(), last)
}

/// The code a case expects: `containerd`'s on containerd unless a version of it answers
/// otherwise (`on`), `crio`'s on CRI-O.
#[derive(Debug, Clone)]
struct Expect {
    containerd: &'static str,
    crio: &'static str,
    /// (IT_CONTAINERD_VERSION prefix, or "debian" for Debian's 1.6; its code).
    versions: Vec<(&'static str, &'static str)>,
}

impl Expect {
    fn all(code: &'static str) -> Self {
        Self::each(code, code)
    }

    fn each(containerd: &'static str, crio: &'static str) -> Self {
        Self {
            containerd,
            crio,
            versions: Vec::new(),
        }
    }

    fn on(mut self, version: &'static str, code: &'static str) -> Self {
        self.versions.push((version, code));
        self
    }

    fn code(&self, env: &Env) -> &'static str {
        if env.runtime == "crio" {
            return self.crio;
        }
        let version = std::env::var("IT_CONTAINERD_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "debian".into());
        self.versions
            .iter()
            .find(|(prefix, _)| version.starts_with(prefix))
            .map_or(self.containerd, |(_, code)| code)
    }
}

/// Asserts grpc-go sees the same code and message through numa-shim as straight from the
/// runtime, and that it is the expected code (so the case tests what it names).
fn same_answer(env: &Env, shim: &Path, case: &str, method: &str, request: &Value, want: &Expect) {
    let direct = go_call(&env.containerd, method, request);
    let relayed = go_call(shim, method, request);
    let code = want.code(env);
    assert_eq!(
        direct["code"], code,
        "{case}: {} answered {direct}",
        env.runtime
    );
    assert_eq!(
        (&relayed["code"], &relayed["message"], &relayed["details"]),
        (&direct["code"], &direct["message"], &direct["details"]),
        "{case}: through numa-shim {relayed}, straight {direct}"
    );
}

fn container_request(env: &Env, pod: &PodDef, sandbox: &str, name: &str, image: &str) -> Value {
    json!({
        "podSandboxId": sandbox,
        "config": {
            "metadata": {"name": name},
            "image": {"image": image, "userSpecifiedImage": image},
            "command": ["sleep", "3600"],
            "logPath": format!("{name}.log"),
            "linux": {"resources": {"cpuPeriod": 100000, "cpuQuota": 50000, "cpuShares": 512}},
        },
        "sandboxConfig": sandbox_config(env, pod),
    })
}

fn sandbox_config(env: &Env, pod: &PodDef) -> Value {
    let config = pod.config(env);
    let meta = config.metadata.unwrap();
    json!({
        "metadata": {"name": meta.name, "uid": meta.uid, "namespace": meta.namespace},
        "logDirectory": config.log_directory,
        "linux": {
            "cgroupParent": config.linux.unwrap().cgroup_parent,
            "securityContext": {"namespaceOptions": {"network": "NODE"}},
        },
    })
}

#[tokio::test]
#[ignore = "needs the real-runtime harness (integration/test-all.sh)"]
async fn runtime_errors_reach_grpc_go_clients_unchanged() {
    let _serial = SERIAL.lock().await;
    let env = Env::get();
    let shim = Shim::start(&env, "errors", POD_SCOPE, &[]).await;
    let mut cleanup = Cleanup::new(&env);
    let pod = PodDef::new("errors", resources(Some(500), Some(500), Some(64 * MI)));
    let cri = shim.cri().await;
    let sandbox = cri.run_pod(&env, &pod).await.unwrap();
    cleanup.sandboxes.push(sandbox.clone());
    let s = shim.socket.as_path();

    let unknown = container_request(&env, &pod, "0123-no-such-sandbox", "app", &env.image);
    same_answer(
        &env,
        s,
        "unknown sandbox",
        "CreateContainer",
        &unknown,
        &Expect::each("NotFound", "Unknown"),
    );

    let image = "localhost/numa-shim-it/missing:1.0";
    let missing = container_request(&env, &pod, &sandbox, "app", image);
    same_answer(
        &env,
        s,
        "missing image",
        "CreateContainer",
        &missing,
        &Expect::each("NotFound", "Unknown"),
    );

    let gone = json!({"containerId": "0123-no-such-container", "linux": {"cpusetCpus": "0"}});
    let update = "UpdateContainerResources";
    let not_found = Expect::each("NotFound", "Unknown");
    same_answer(&env, s, "unknown container", update, &gone, &not_found);
    // The CRI asks StopContainer and StopPodSandbox of an unknown id to succeed.
    let idempotent = Expect::all("OK").on("debian", "NotFound");
    let stop = json!({"containerId": "0123-no-such-container"});
    same_answer(&env, s, "stop unknown", "StopContainer", &stop, &idempotent);
    let stopp = json!({"podSandboxId": "0123-no-such-sandbox"});
    same_answer(
        &env,
        s,
        "stop unknown pod",
        "StopPodSandbox",
        &stopp,
        &idempotent,
    );

    // Wrong state: a second container of the same name (containerd: its name is reserved;
    // CRI-O answers with the container it has), a stopped container's cpuset (containerd
    // records it for a container that will not run again, CRI-O refuses it) and a sandbox asked
    // for again while the first still runs (containerd: name reserved; CRI-O answers with the
    // running sandbox, and numa-shim keeps the pod's placement).
    let first = container_request(&env, &pod, &sandbox, "twice", &env.image);
    let created = go_call(s, "CreateContainer", &first);
    assert_eq!(created["code"], "OK", "{created}");
    let twice = created["response"]["containerId"]
        .as_str()
        .unwrap()
        .to_string();
    same_answer(
        &env,
        s,
        "name in use",
        "CreateContainer",
        &first,
        &Expect::each("Unknown", "OK").on("v2.", "FailedPrecondition"),
    );
    let stopped = json!({"containerId": twice, "linux": {"cpusetCpus": "0"}});
    let stop_it = go_call(s, "StopContainer", &json!({"containerId": twice}));
    assert_eq!(stop_it["code"], "OK", "{stop_it}");
    same_answer(
        &env,
        s,
        "stopped container",
        update,
        &stopped,
        &Expect::each("OK", "Unknown"),
    );
    let again = json!({"config": sandbox_config(&env, &pod)});
    same_answer(
        &env,
        s,
        "sandbox name in use",
        "RunPodSandbox",
        &again,
        &Expect::each("Unknown", "OK").on("v2.", "FailedPrecondition"),
    );
    // A container of a stopped sandbox.
    cri.stop_pod(&sandbox).await.unwrap();
    let late = container_request(&env, &pod, &sandbox, "late", &env.image);
    let direct = go_call(&env.containerd, "CreateContainer", &late);
    let relayed = go_call(s, "CreateContainer", &late);
    assert_eq!(
        (&relayed["code"], &relayed["message"]),
        (&direct["code"], &direct["message"]),
        "stopped sandbox: through numa-shim {relayed}, straight {direct}"
    );

    // crictl (grpc-go through k8s.io/cri-client) prints the same error both ways (the stops of
    // unknown ids succeed where the runtime answers OK).
    for (args, fails) in [
        (
            vec!["stopp", "0123-no-such-sandbox"],
            idempotent.code(&env) != "OK",
        ),
        (
            vec!["stop", "0123-no-such-container"],
            idempotent.code(&env) != "OK",
        ),
        (
            vec!["update", "--cpuset-cpus", "0", "0123-no-such-container"],
            true,
        ),
        (vec!["inspect", "0123-no-such-container"], true),
    ] {
        let direct = crictl(&env, &env.containerd, &args);
        let relayed = crictl(&env, s, &args);
        assert_eq!(direct.0 != Some(0), fails, "{args:?}: {}", direct.1);
        assert_eq!(relayed, direct, "crictl {args:?}");
        assert!(
            !relayed.1.contains("without sending trailers"),
            "{}",
            relayed.1
        );
    }

    // A runtime that is restarting: both ways UNAVAILABLE while it is down.
    let shim_socket = shim.socket.clone();
    let env2 = env.clone();
    super::restart_containerd(&env, || async move {
        let run =
            json!({"config": {"metadata": {"name": "down", "uid": "down-uid", "namespace": "x"}}});
        let direct = go_call(&env2.containerd, "RunPodSandbox", &run);
        let relayed = go_call(&shim_socket, "RunPodSandbox", &run);
        assert_eq!(direct["code"], "Unavailable", "{direct}");
        assert_eq!(relayed["code"], "Unavailable", "{relayed}");
        let stop = json!({"containerId": "x"});
        let relayed = go_call(&shim_socket, "StopContainer", &stop);
        assert_eq!(relayed["code"], "Unavailable", "{relayed}");
    })
    .await;
    let after = go_call(s, "StopContainer", &stop);
    assert_eq!(
        after["code"],
        idempotent.code(&env),
        "after the restart: {after}"
    );
}

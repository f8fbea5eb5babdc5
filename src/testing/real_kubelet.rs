//! Real-kubelet test support: numa-shim processes, real kubelets from the shell harness
//! (integration/kubelet.sh, the same one the demo and the other harnesses use), what the kernel
//! applied to each container, what numa-shim and the kubelet decided, and PodResources answers
//! read with the Go client topology exporters use (integration/podresources-go).
//!
//! The harness (integration/test-all.sh or integration/kubelet-versions.sh: containerd;
//! integration/runtime-suite.sh: the runtime IT_RUNTIME picks, e.g. CRI-O) starts the runtime and
//! exports NUMA_SHIM_IT_*; the tests are `#[ignore]`d so a plain `cargo test` skips them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cgroup::{Host, Reading};
use crate::lifecycle::runtime::pid_of;
use crate::proto::cri::v1 as cri;
use crate::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::testing::process::{built_binary, serve_args, ShimProcess};
use crate::transport::unix_channel;
use serde_json::Value;

/// One test at a time: they share the machine's two CPUs and the kubelet's ports.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The harness's environment.
#[derive(Debug, Clone)]
pub struct Env {
    /// The runtime's own socket (containerd or CRI-O): where the tests read containers and
    /// clean up.
    pub runtime: PathBuf,
    pub image: String,
    pub run: PathBuf,
    /// `v1.37.2`, ...
    pub version: String,
    /// How long the periodic-calls test lets the kubelet run.
    pub soak: Duration,
    /// The runtime the harness started (NUMA_SHIM_IT_RUNTIME: `containerd` or `crio`), when it
    /// says.
    pub runtime_kind: Option<String>,
}

impl Env {
    pub fn get() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is not set: run integration/test-all.sh"))
        };
        let soak = std::env::var("NUMA_SHIM_IT_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300);
        Self {
            runtime: var("NUMA_SHIM_IT_CONTAINERD").into(),
            image: var("NUMA_SHIM_IT_BUSYBOX_IMAGE"),
            run: var("NUMA_SHIM_IT_RUN").into(),
            version: std::env::var("NUMA_SHIM_IT_KUBELET_VERSION")
                .unwrap_or_else(|_| "v1.37.2".into()),
            soak: Duration::from_secs(soak),
            runtime_kind: std::env::var("NUMA_SHIM_IT_RUNTIME").ok(),
        }
    }

    /// The kubelet's minor version (34 for v1.34.4).
    pub fn minor(&self) -> u32 {
        self.version
            .trim_start_matches('v')
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    }

    /// The kubelet serves the Pods API (gate PodsAPI: alpha in 1.36, turned on by the tests;
    /// beta and on from 1.37).
    pub fn has_pods_api(&self) -> bool {
        self.minor() >= 36
    }

    /// The kubelet's own managers know pod-level resources (PodLevelResourceManagers, 1.36+).
    pub fn has_pod_level_managers(&self) -> bool {
        self.minor() >= 36
    }

    /// The kubelet's own managers are the ones numa-shim implements (v1.37), so reference mode
    /// can compare them. v1.36.3's differ where the tutorial looks: its Static memory policy
    /// does not skip a container without memory requests (it refuses container-scope-mixed
    /// with UnexpectedAdmissionError; v1.37.2's `Allocate` returns early when
    /// `len(requestedResources) == 0`), and its PodResources GetMemory lists a pod-pool
    /// container's memory under the container (v1.37.2 only for isolation level container).
    pub fn has_reference_managers(&self) -> bool {
        self.minor() >= 37
    }

    pub fn dir(&self, name: &str) -> PathBuf {
        let dir = self.run.join(format!("rk-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// An empty directory for a test's files: what an earlier run left goes first.
    pub fn fresh(&self, name: &str) -> PathBuf {
        let _ = std::fs::remove_dir_all(self.run.join(format!("rk-{name}")));
        self.dir(name)
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The tutorial's resource-manager settings (pod scope, single-numa-node, static CPU and
/// memory) on this machine: CPU 0 and 100Mi reserved, as the kubelet's static policy needs.
pub fn settings(scope: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n\
         memoryManagerPolicy: Static\nreservedMemory: [{{numaNode: 0, limits: {{memory: 100Mi}}}}]\n\
         topologyManagerPolicy: single-numa-node\ntopologyManagerScope: {scope}\n"
    )
}

/// A numa-shim process (the one launcher, `testing::process`, with this suite's flags).
pub struct Shim {
    process: ShimProcess,
    pub socket: PathBuf,
    pub metrics: String,
}

impl Shim {
    /// `numa-shim serve` named `name` in front of the runtime with `extra` flags.
    pub async fn start(env: &Env, name: &str, extra: &[String]) -> Self {
        let dir = env.fresh(&format!("shim-{name}"));
        let socket = dir.join("cri.sock");
        let port = crate::testing::free_port();
        let metrics = format!("127.0.0.1:{port}");
        let state = dir.join("state").display().to_string();
        let mut args = serve_args(
            &socket,
            &env.runtime,
            &[
                "--state-dir",
                &state,
                "--metrics-address",
                &metrics,
                "--drift-period",
                "2s",
            ],
        );
        args.extend(extra.iter().cloned());
        // NUMA_SHIM_IT_BIN runs another build (e.g. an older one, to see a test fail on it).
        let bin = std::env::var("NUMA_SHIM_IT_BIN")
            .unwrap_or_else(|_| built_binary().display().to_string());
        let process =
            ShimProcess::start(Path::new(&bin), args, &socket, &dir.join("numa-shim.log")).await;
        Self {
            process,
            socket,
            metrics,
        }
    }

    /// numa-shim relaying only (no placement): the reference mode's.
    pub async fn relay(env: &Env, name: &str) -> Self {
        let config = env.fresh(&format!("relay-{name}")).join("relay.yaml");
        std::fs::write(
            &config,
            "cpuManagerPolicy: none\nmemoryManagerPolicy: None\n",
        )
        .unwrap();
        let extra = [
            "--config".to_string(),
            config.display().to_string(),
            "--pod-resources-socket".into(),
            "none".into(),
        ];
        Self::start(env, name, &extra).await
    }

    /// The `runtime_name` of the runtime behind numa-shim (its Version answer, relayed).
    pub async fn runtime_name(&self) -> String {
        let mut client = RuntimeServiceClient::new(unix_channel(&self.socket));
        client
            .version(cri::VersionRequest::default())
            .await
            .unwrap()
            .into_inner()
            .runtime_name
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Starts the same process again (same socket, state dir and settings), as systemd would.
    pub async fn restart(&mut self) {
        self.process.restart().await;
    }

    /// SIGTERM (a clean stop: numa-shim drains its calls and exits), waits for the exit.
    pub fn terminate(&mut self) {
        self.process.terminate();
    }

    /// Starts the process again after [`Self::kill9`] or [`Self::terminate`].
    pub async fn start_again(&mut self) {
        self.process.start_again().await;
    }

    pub fn log_text(&self) -> String {
        self.process.log_text()
    }

    /// `GET /placement`.
    pub fn placement(&self) -> Value {
        serde_json::from_str(&http_get(&self.metrics, "/placement")).unwrap()
    }

    /// `GET /metrics`.
    pub fn metrics_text(&self) -> String {
        http_get(&self.metrics, "/metrics")
    }

    /// The PodResources socket numa-shim serves.
    pub fn pod_resources(&self) -> PathBuf {
        self.socket
            .with_file_name("state/pod-resources/kubelet.sock")
    }
}

/// A real kubelet from the shell harness, cleaned up (pods, cgroups, files) when dropped.
pub struct Kubelet {
    pub name: String,
    facts: HashMap<String, String>,
    options: Vec<String>,
    run: PathBuf,
    /// Where this test's part of the kubelet's log (appended across runs) starts.
    log_from: usize,
}

impl Kubelet {
    /// `integration/kubelet.sh config NAME --version V --direct RUNTIME OPTIONS...`: the
    /// kubelet's files, so numa-shim can read them before the kubelet starts ([`Self::run`]).
    pub fn configure(env: &Env, name: &str, options: &[String]) -> Self {
        let mut all = vec![
            "--version".to_string(),
            env.version.clone(),
            "--direct".into(),
            format!("unix://{}", env.runtime.display()),
        ];
        all.extend(options.iter().cloned());
        let mut kubelet = Self {
            name: name.to_string(),
            facts: HashMap::new(),
            options: all,
            run: env.run.clone(),
            log_from: 0,
        };
        kubelet.facts = kubelet.harness("config", &kubelet.options.clone());
        kubelet.log_from = std::fs::metadata(kubelet.fact("log")).map_or(0, |m| m.len() as usize);
        kubelet
    }

    /// Starts the configured kubelet and waits for its /healthz.
    pub fn run(&mut self) {
        self.facts = self.harness("start", &self.options.clone());
    }

    fn harness(&self, action: &str, options: &[String]) -> HashMap<String, String> {
        let out = Command::new("bash")
            .arg(repo().join("integration/kubelet.sh"))
            .arg(action)
            .arg(&self.name)
            .args(options)
            .env("IT_RUN", &self.run)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubelet.sh {action} {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn fact(&self, key: &str) -> &str {
        self.facts
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.facts))
    }

    pub fn path(&self, key: &str) -> PathBuf {
        PathBuf::from(self.fact(key))
    }

    /// SIGTERM and start again with the same files (its pods keep running).
    pub fn restart(&mut self) {
        self.facts = self.harness("start", &self.options.clone());
    }

    /// The kubelet's log since this test configured it.
    pub fn log_text(&self) -> String {
        let text = std::fs::read_to_string(self.fact("log")).unwrap_or_default();
        text.get(self.log_from..).unwrap_or_default().to_string()
    }

    /// Writes a static pod manifest (to a hidden name first, which the kubelet skips, so it
    /// never reads half a file).
    pub fn add(&self, file: &str, yaml: &str) {
        let dir = self.path("manifests");
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, dir.join(file)).unwrap();
    }

    /// Removes a static pod manifest (the kubelet deletes the pod).
    pub fn remove(&self, file: &str) {
        let _ = std::fs::remove_file(self.path("manifests").join(file));
    }

    /// The kubelet's pods (`GET /pods` on the read-only port).
    pub fn pods(&self) -> Vec<Value> {
        let text = http_get(self.fact("read_only"), "/pods");
        let list: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The kubelet's pod whose manifest name is `name` (static pods are `<name>-<node>`).
    pub fn pod_named(&self, name: &str) -> Option<Value> {
        self.pods().into_iter().find(|p| short_name(p) == name)
    }

    /// The full name of the kubelet's pod whose manifest name is `name` (`<name>-<node>`);
    /// panics when the kubelet has no such pod.
    pub fn full_name(&self, name: &str) -> String {
        let pod = self
            .pod_named(name)
            .unwrap_or_else(|| panic!("the kubelet has no pod {name}"));
        pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Waits until every pod in `names` runs with every container ready, and no other pod of
    /// `gone` is left.
    pub async fn wait_running(&self, names: &[&str], gone: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let pods = self.pods();
            let running = names.iter().all(|n| {
                pods.iter()
                    .find(|p| short_name(p) == *n)
                    .is_some_and(all_ready)
            });
            let left = gone
                .iter()
                .any(|n| pods.iter().any(|p| short_name(p) == *n));
            if running && !left {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "pods {names:?} not running (or {gone:?} not gone): {}\nkubelet's admission lines:\n{}\nkubelet log tail:\n{}",
                serde_json::to_string_pretty(&pods.iter().map(status_line).collect::<Vec<_>>())
                    .unwrap(),
                admission_lines(&self.log_text()),
                tail(&self.log_text(), 30)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The `data` of a kubelet state file (`cpu_manager_state`, `memory_manager_state`): the
    /// checkpoint's payload, as the kubelet 1.37 writes it (v4 keeps the v2 fields beside).
    pub fn state(&self, file: &str) -> Value {
        let text = std::fs::read_to_string(self.path("root").join(file)).unwrap();
        let outer: Value = serde_json::from_str(&text).unwrap();
        match outer["data"].as_str() {
            Some(data) => serde_json::from_str(data).unwrap(),
            None => outer,
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("integration/kubelet.sh"))
            .arg("clean")
            .arg(&self.name)
            .env("IT_RUN", &self.run)
            .stdin(Stdio::null())
            .output();
    }
}

/// The kubelet's device manager checkpoint, in its device plugin directory: a path compiled into
/// every kubelet, outside its `--root-dir`, so the harness clears it with each kubelet
/// (`integration/lib/kubelet.sh`).
fn device_checkpoint() -> PathBuf {
    Path::new(crate::deviceplugin::DEFAULT_KUBELET_DIR).join("kubelet_internal_checkpoint")
}

/// Panics when the device manager's checkpoint holds pod entries while this test's kubelet has
/// just started and no device plugin has registered yet: they are an earlier kubelet's device
/// assignments, which this kubelet would take as its own (a static pod's UID repeats with its
/// manifest).
pub fn assert_no_earlier_device_assignments() {
    let checkpoint = device_checkpoint();
    let text = std::fs::read_to_string(&checkpoint).unwrap_or_default();
    let entries = serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)["Data"]
        ["PodDeviceEntries"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(
        entries,
        0,
        "a new kubelet starts with an earlier kubelet's device assignments in {}: {text}",
        checkpoint.display()
    );
}

/// Panics when the kubelet dropped a device plugin's connection since this test configured it
/// (before the test stops a plugin, numa-shim or the kubelet on purpose): its devices were
/// unhealthy meanwhile, and a pod admitted then is refused (`UnexpectedAdmissionError`). The
/// kubelet does this to a plugin whose socket appears while its plugin watcher starts
/// (integration/lib/kubelet.sh waits for that before a kubelet counts as started).
pub fn assert_no_plugin_flap(kubelet: &Kubelet) {
    let log = kubelet.log_text();
    let dropped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Device plugin disconnected"))
        .collect();
    assert!(
        dropped.is_empty(),
        "the kubelet dropped a device plugin that nothing stopped:\n{}\nkubelet's admission lines:\n{}",
        dropped.join("\n"),
        admission_lines(&log)
    );
}

/// A static pod's name without the `-<node>` suffix the kubelet adds.
pub fn short_name(pod: &Value) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    name.strip_suffix(&format!("-{node}"))
        .unwrap_or(name)
        .to_string()
}

fn statuses(pod: &Value) -> Vec<Value> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|k| pod["status"][*k].as_array().cloned().unwrap_or_default())
        .collect()
}

fn all_ready(pod: &Value) -> bool {
    let spec: usize = ["initContainers", "containers"]
        .iter()
        .map(|k| pod["spec"][*k].as_array().map_or(0, Vec::len))
        .sum();
    let statuses = statuses(pod);
    pod["status"]["phase"] == "Running"
        && statuses.len() == spec
        && statuses.iter().all(|s| s["state"]["running"].is_object())
}

fn status_line(pod: &Value) -> Value {
    serde_json::json!({
        "pod": short_name(pod),
        "phase": pod["status"]["phase"],
        "reason": pod["status"]["reason"],
        "message": pod["status"]["message"],
        "containers": statuses(pod).iter().map(|s| (s["name"].clone(), s["state"].clone())).collect::<Vec<_>>(),
    })
}

/// Restart counts and container ids by container name.
pub fn restarts(pod: &Value) -> BTreeMap<String, (u64, String)> {
    statuses(pod)
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or_default().to_string(),
                (
                    s["restartCount"].as_u64().unwrap_or(0),
                    s["containerID"].as_str().unwrap_or_default().to_string(),
                ),
            )
        })
        .collect()
}

/// The kubelet's log lines about admitting pods and allocating their devices (the last 20): what
/// a pod's `UnexpectedAdmissionError` came from.
fn admission_lines(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "admit",
                "Allocate",
                "preferred",
                "preempt",
                "Device plugin",
                "device updates",
                "socket path",
                "Plugin Manager",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What the kernel applied to one container, as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seen {
    pub cpus: String,
    pub mems: String,
    pub quota: i64,
    pub allowed: String,
}

impl From<Reading> for Seen {
    fn from(r: Reading) -> Self {
        Self {
            cpus: r.cpus.to_string(),
            mems: r.mems.to_string(),
            quota: r.cfs_quota,
            allowed: r.cpus_allowed.to_string(),
        }
    }
}

/// Pod (manifest name) → container → what the kernel applied: cpuset.cpus and cpuset.mems and
/// the CFS quota from cgroupfs, Cpus_allowed_list from /proc, for every running container the
/// runtime has for the kubelet's pods.
pub async fn kernel(env: &Env, kubelet: &Kubelet) -> BTreeMap<String, BTreeMap<String, Seen>> {
    let mut client = RuntimeServiceClient::new(unix_channel(&env.runtime));
    let mut out = BTreeMap::new();
    for pod in kubelet.pods() {
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut containers = BTreeMap::new();
        for c in running_containers(&mut client, uid).await {
            let status = client
                .container_status(cri::ContainerStatusRequest {
                    container_id: c.id.clone(),
                    verbose: true,
                })
                .await
                .unwrap()
                .into_inner();
            let Some(pid) = pid_of(&status) else { continue };
            let Ok(reading) = Host::default().read_pid(pid) else {
                continue;
            };
            let name = c.metadata.map(|m| m.name).unwrap_or_default();
            containers.insert(name, Seen::from(reading));
        }
        if !containers.is_empty() {
            out.insert(short_name(&pod), containers);
        }
    }
    out
}

/// Waits until the kernel shows `cpus` for every container of `pod` (pool changes are
/// asynchronous), and returns the readings.
pub async fn wait_cpus(
    env: &Env,
    kubelet: &Kubelet,
    pod: &str,
    cpus: &str,
) -> BTreeMap<String, Seen> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = kernel(env, kubelet).await.remove(pod).unwrap_or_default();
        if (!seen.is_empty() && seen.values().all(|s| s.cpus == cpus)) || Instant::now() > deadline
        {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Runs the Go PodResources client (k8s.io/kubelet podresources v1) against `socket`.
pub fn podresources(socket: &Path, args: &[&str]) -> Value {
    let bin = repo().join("integration/.work/bin/podresources-go");
    let out = Command::new(&bin)
        .arg("-socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (integration/install-deps.sh builds it)",
                bin.display()
            )
        });
    assert!(
        out.status.success(),
        "podresources-go {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A PodResources pod, normalised for comparison: name without the node suffix, containers by
/// name, CPU ids sorted, memory as (type, size, NUMA nodes), empty fields dropped (proto3 JSON
/// leaves out zero values such as NUMA node 0).
pub fn normalise_pod(pod: &Value, node: &str) -> Value {
    let ids = |v: &Value| -> Vec<i64> {
        let mut ids: Vec<i64> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        x.as_str()
                            .and_then(|s| s.parse().ok())
                            .or(x.as_i64())
                            .unwrap_or(0)
                    })
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    };
    let memory = |v: &Value| -> Vec<Value> {
        let mut blocks: Vec<Value> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        let nodes: Vec<i64> = m["topology"]["nodes"]
                            .as_array()
                            .map(|n| n.iter().map(numa_id).collect())
                            .unwrap_or_default();
                        let size = m["size"]
                            .as_str()
                            .and_then(|s| s.parse::<u64>().ok())
                            .or(m["size"].as_u64())
                            .unwrap_or(0);
                        serde_json::json!({"type": m["memory_type"], "size": size, "nodes": nodes})
                    })
                    .collect()
            })
            .unwrap_or_default();
        blocks.sort_by_key(|b| b.to_string());
        blocks
    };
    let mut containers: Vec<Value> = pod["containers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    serde_json::json!({
                        "name": c["name"],
                        "cpu_ids": ids(&c["cpu_ids"]),
                        "memory": memory(&c["memory"]),
                        "devices": c["devices"].as_array().map_or(0, Vec::len),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    containers.sort_by_key(|c| c["name"].to_string());
    let name = pod["name"].as_str().unwrap_or_default();
    serde_json::json!({
        "name": name.strip_suffix(&format!("-{node}")).unwrap_or(name),
        "namespace": pod["namespace"],
        "cpu_ids": ids(&pod["cpu_ids"]),
        "memory": memory(&pod["memory"]),
        "containers": containers,
    })
}

/// The body of `GET path` from an HTTP server on `addr` (HTTP/1.0), empty when nothing answers.
pub fn http_get(addr: &str, path: &str) -> String {
    crate::testing::http_get(addr, path).1
}

/// The value of one Prometheus sample line `name{labels} value`, 0 when absent.
pub fn sample(metrics: &str, series: &str) -> f64 {
    crate::testing::metric_sample(metrics, series).unwrap_or(0.0)
}

/// numa-shim's sample device plugin (integration/device-plugin) for a kubelet of the harness,
/// registered through the kubelet's plugin watcher in its own root dir
/// (`<root>/plugins_registry`): nothing outside the kubelet's private directories, unlike the
/// device plugin directory the kubelet hard-codes. Killed when dropped.
pub struct DevicePlugin {
    child: Option<Child>,
    pub log: PathBuf,
}

impl DevicePlugin {
    /// Starts the plugin with `config` (its JSON: resource and devices) for `kubelet`.
    pub fn start(env: &Env, kubelet: &Kubelet, name: &str, config: &str) -> Self {
        let registry = kubelet.path("root").join("plugins_registry");
        Self::start_with(
            env,
            name,
            config,
            &["-plugins-registry".into(), registry.display().to_string()],
        )
    }

    /// The plugin registering as `registration` says (`-plugins-registry DIR` or
    /// `-device-plugin-dir DIR`, e.g. numa-shim's device plugin front).
    pub fn start_with(env: &Env, name: &str, config: &str, registration: &[String]) -> Self {
        let dir = env.fresh(&format!("plugin-{name}"));
        let file = dir.join("config.json");
        std::fs::write(&file, config).unwrap();
        let log = dir.join("device-plugin.log");
        let bin = repo().join("integration/.work/bin/device-plugin");
        let child = Command::new(&bin)
            .arg("-config")
            .arg(&file)
            .args(registration)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (integration/device-plugin/build.sh builds it)",
                    bin.display()
                )
            });
        Self {
            child: Some(child),
            log,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the plugin's log says `what`.
    pub async fn wait_log(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log_text().contains(what) {
            assert!(
                Instant::now() < deadline,
                "device plugin never logged {what:?}:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL, as a crash (its socket file stays).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for DevicePlugin {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The running containers of the pod with `uid`, as the runtime lists them.
async fn running_containers(
    client: &mut RuntimeServiceClient<tonic::transport::Channel>,
    uid: String,
) -> Vec<cri::Container> {
    let filter = cri::ContainerFilter {
        label_selector: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid)]),
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    client
        .list_containers(cri::ListContainersRequest {
            filter: Some(filter),
        })
        .await
        .unwrap()
        .into_inner()
        .containers
}

/// The PID of the running container `container` of the kubelet's pod `pod` (manifest name).
pub async fn container_pid(env: &Env, kubelet: &Kubelet, pod: &str, container: &str) -> u32 {
    let uid = kubelet.pod_named(pod).expect("the pod")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut client = RuntimeServiceClient::new(unix_channel(&env.runtime));
    let c = running_containers(&mut client, uid)
        .await
        .into_iter()
        .find(|c| c.metadata.as_ref().is_some_and(|m| m.name == container))
        .unwrap_or_else(|| panic!("no running container {container} in {pod}"));
    let status = client
        .container_status(cri::ContainerStatusRequest {
            container_id: c.id,
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    pid_of(&status).expect("the container's pid")
}

/// The id of a PodResources `NUMANode` as the Go client prints it (protojson with proto names:
/// the field is `ID`, an int64 written as a string, and left out for node 0).
pub fn numa_id(node: &Value) -> i64 {
    let id = &node["ID"];
    id.as_i64()
        .or_else(|| id.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

#[test]
fn numa_ids_are_read_as_the_go_client_prints_them() {
    assert_eq!(numa_id(&serde_json::json!({"ID": "1"})), 1);
    assert_eq!(numa_id(&serde_json::json!({"ID": 3})), 3);
    assert_eq!(numa_id(&serde_json::json!({})), 0);
}

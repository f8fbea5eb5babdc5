//! The cluster rig: numa-shim with `podKnowledge: apiserver` in front of containerd, a kubelet
//! from the shared harness registered in API-server mode (`integration/kubelet.sh --apiserver`:
//! the control plane's node kubeconfig, `--node-ip 127.0.0.1`) with numa-shim as its runtime endpoint, the tutorial's namespace, and
//! what the tests compare: the kernel's cpusets, numa-shim's `/placement`, the API's pods.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use numa_shim::cpuset::CpuSet;
use numa_shim::inspect::{Owner, PlacementView};
use serde_json::Value;

use super::cp::Cp;
use super::rk::{self, Env, Kubelet, Seen, Shim};

pub const NAMESPACE: &str = "plrm-tutorial";

/// The Node name the control plane's kubelet certificate names (IT_NODE_NAME of the harness).
pub fn node_name() -> String {
    std::env::var("NUMA_SHIM_IT_NODE_NAME").unwrap_or_else(|_| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_lowercase()
    })
}

/// A kubelet in API-server mode and the numa-shim in front of its runtime.
pub struct Cluster {
    // Dropped in this order: the kubelet (its pods removed at the runtime), then numa-shim.
    pub kubelet: Kubelet,
    pub shim: Shim,
    pub cp: Cp,
    pub env: Env,
    pub node: String,
}

fn drop_in(env: &Env, name: &str, file: &str, body: &str) -> String {
    let path = env.dir(name).join(file);
    std::fs::write(
        &path,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    path.display().to_string()
}

impl Cluster {
    /// The tutorial's settings (pod scope) in the kubelet's main file, its own managers off in
    /// the packaged drop-in; numa-shim reads both and starts first, as on a node.
    pub async fn start(name: &str) -> Self {
        Self::start_with(name, &rk::settings("pod")).await
    }

    /// [`Cluster::start`] with `settings` as the kubelet's main file.
    pub async fn start_with(name: &str, settings: &str) -> Self {
        let env = Env::get();
        let cp = Cp::get();
        let node = node_name();
        fresh_namespace(&cp);
        let main = env.fresh(name).join("kubelet.yaml");
        std::fs::write(&main, settings).unwrap();
        let socket = env.dir(&format!("shim-{name}")).join("cri.sock");
        let endpoint = format!("unix://{}", socket.display());
        let numa_shim = drop_in(
            &env,
            name,
            "10-numa-shim.conf",
            &format!(
                "containerRuntimeEndpoint: {endpoint}\ncpuManagerPolicy: none\n\
                 memoryManagerPolicy: None\ntopologyManagerPolicy: none\n"
            ),
        );
        // The harness's API-server mode: the control plane's node kubeconfig, the node name
        // its certificate names, the Node's address on loopback.
        let options: Vec<String> = [
            "--config",
            &main.display().to_string(),
            "--drop-in",
            &numa_shim,
            "--runtime",
            &endpoint,
            "--apiserver",
        ]
        .map(String::from)
        .to_vec();
        let mut kubelet = Kubelet::configure(&env, name, &options);
        let shim = Shim::start(
            &env,
            name,
            &[
                "--kubelet-config".into(),
                kubelet.fact("config").into(),
                "--kubelet-config-dir".into(),
                kubelet.fact("config_dir").into(),
                "--pod-knowledge".into(),
                "apiserver".into(),
                "--kubeconfig".into(),
                cp.dir.join("numa-shim.kubeconfig").display().to_string(),
                "--node-name".into(),
                node.clone(),
                "--kubelet-pod-resources-socket".into(),
                kubelet.fact("pod_resources").into(),
            ],
        )
        .await;
        kubelet.run();
        let cluster = Self {
            kubelet,
            shim,
            cp,
            env,
            node,
        };
        cluster.wait_node_ready().await;
        cluster
    }

    async fn wait_node_ready(&self) {
        let ready = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let got = self
                .cp
                .try_kubectl(&["get", "node", &self.node, "-o", ready], None);
            if got.as_deref().map(str::trim) == Ok("True") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} not Ready: {got:?}\nkubelet log:\n{}",
                self.node,
                rk::tail(&self.kubelet.log_text(), 30)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `kubectl -n plrm-tutorial ARGS`.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", NAMESPACE];
        all.extend_from_slice(args);
        self.cp.kubectl(&all)
    }

    /// `kubectl apply` of the manifests (YAML documents) in the tutorial's namespace.
    pub fn apply(&self, manifests: &[String]) {
        self.cp.kubectl_in(
            &["-n", NAMESPACE, "apply", "-f", "-"],
            &manifests.join("\n---\n"),
        );
    }

    /// `kubectl delete pod NAMES --wait=false`.
    pub fn delete(&self, names: &[&str]) {
        let mut args = vec!["delete", "pod", "--wait=false"];
        args.extend_from_slice(names);
        self.kubectl(&args);
    }

    /// The API server's pods in the namespace.
    pub fn api_pods(&self) -> Vec<Value> {
        let text = self.kubectl(&["get", "pods", "-o", "json"]);
        let list: Value = serde_json::from_str(&text).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `kubectl get pod -o wide` shows exactly `names`, each Running with every
    /// container ready, on this node; returns that output.
    pub async fn wait_running(&self, names: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let wide = self.kubectl(&["get", "pod", "-o", "wide", "--no-headers"]);
            let rows: BTreeMap<&str, Vec<&str>> = wide
                .lines()
                .filter_map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    Some((*cols.first()?, cols))
                })
                .collect();
            let ok = rows.len() == names.len()
                && names.iter().all(|n| {
                    rows.get(n).is_some_and(|c| {
                        // NAME READY STATUS RESTARTS AGE IP NODE ...
                        let ready = c[1].split_once('/').is_some_and(|(a, b)| a == b);
                        ready && c[2] == "Running" && c.get(6) == Some(&self.node.as_str())
                    })
                });
            if ok {
                return wide;
            }
            assert!(
                Instant::now() < deadline,
                "want {names:?} Running on {}:\n{wide}\nkubelet log:\n{}",
                self.node,
                rk::tail(&self.kubelet.log_text(), 30)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// numa-shim's `/placement`.
    pub fn placement(&self) -> PlacementView {
        serde_json::from_value(self.shim.placement()).unwrap()
    }

    /// What the kernel applied, pod → container → reading (running containers).
    pub async fn kernel(&self) -> BTreeMap<String, BTreeMap<String, Seen>> {
        rk::kernel(&self.env, &self.kubelet).await
    }

    /// Waits until the kernel shows `want` (pod, container, cpuset) for exactly these
    /// containers; returns the readings.
    pub async fn wait_kernel(
        &self,
        want: &[(&str, &str, &str)],
    ) -> BTreeMap<String, BTreeMap<String, Seen>> {
        let want: BTreeMap<(String, String), String> = want
            .iter()
            .map(|(p, c, cpus)| ((p.to_string(), c.to_string()), cpus.to_string()))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let seen = self.kernel().await;
            let got: BTreeMap<(String, String), String> = seen
                .iter()
                .flat_map(|(p, cs)| {
                    cs.iter()
                        .map(move |(c, s)| ((p.clone(), c.clone()), s.cpus.clone()))
                })
                .collect();
            if got == want {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "kernel cpusets {got:?}, want {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Nothing lost, nothing granted twice: numa-shim holds exactly the pods the API server has
    /// running (by UID); every container the kernel runs has the cpuset numa-shim decided for
    /// it; every CPU numa-shim gave a pod (exclusively or as its pod pool) is in no other pod's
    /// kernel cpuset.
    pub async fn assert_consistent(&self) {
        let view = self.placement();
        let seen = self.kernel().await;
        let running: BTreeMap<String, String> = self
            .api_pods()
            .iter()
            .filter(|p| {
                p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .map(|p| {
                (
                    p["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let held: BTreeMap<String, String> = view
            .pods
            .iter()
            .map(|p| (p.uid.clone(), p.name.clone()))
            .collect();
        assert_eq!(held, running, "numa-shim's pods vs the API's running pods");
        for pod in &view.pods {
            let kernel = seen.get(&pod.name).cloned().unwrap_or_default();
            for c in &pod.containers {
                let Some(k) = kernel.get(&c.name) else {
                    continue;
                };
                assert_eq!(
                    CpuSet::parse(&k.cpus).unwrap(),
                    CpuSet::parse(&c.cpus).unwrap(),
                    "{}/{}: kernel vs numa-shim's decision",
                    pod.name,
                    c.name
                );
            }
        }
        let mut owner_of = BTreeMap::new();
        for cpu in view.numa_nodes.iter().flat_map(|n| &n.cpus) {
            let owner = match &cpu.owner {
                Owner::PodPool { pod } => Some(pod.clone()),
                Owner::Exclusive { containers, .. } => {
                    assert_eq!(
                        containers.len(),
                        1,
                        "CPU {} given twice: {containers:?}",
                        cpu.id
                    );
                    Some(containers[0].pod.clone())
                }
                _ => None,
            };
            if let Some(owner) = owner {
                owner_of.insert(cpu.id, owner);
            }
        }
        for (pod, containers) in &seen {
            for (name, s) in containers {
                for cpu in CpuSet::parse(&s.cpus).unwrap().iter() {
                    if let Some(owner) = owner_of.get(&cpu) {
                        assert_eq!(
                            owner,
                            &format!("{NAMESPACE}/{pod}"),
                            "CPU {cpu} of {owner} is in {pod}/{name}'s cpuset {}",
                            s.cpus
                        );
                    }
                }
            }
        }
    }
}

/// A `plrm-tutorial` namespace of this test's own: what an earlier test left goes first.
fn fresh_namespace(cp: &Cp) {
    if cp
        .try_kubectl(&["get", "namespace", NAMESPACE], None)
        .is_ok()
    {
        // Pods of a kubelet already gone never finish terminating by themselves.
        let _ = cp.try_kubectl(
            &[
                "-n",
                NAMESPACE,
                "delete",
                "pods",
                "--all",
                "--force",
                "--grace-period=0",
            ],
            None,
        );
        cp.kubectl(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
    }
    cp.kubectl(&["create", "namespace", NAMESPACE]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cp
        .try_kubectl(&["-n", NAMESPACE, "get", "serviceaccount", "default"], None)
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount in {NAMESPACE}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "numa-shim log tail:\n{}",
                rk::tail(&self.shim.log_text(), 40)
            );
        }
        let _ = self
            .cp
            .try_kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"], None);
        // The kubelet and numa-shim go with their fields. Without its Node, the pod garbage
        // collector removes what is left of the namespace's pods.
        let _ = self
            .cp
            .try_kubectl(&["delete", "node", &self.node, "--wait=false"], None);
    }
}

//! Pods as the tests describe them, and the CRI requests a kubelet 1.37 with its own resource
//! managers off sends for them (spec: kubelet-plrm-and-cri.md §2.1–2.3): sandbox resources from
//! the pod-level values (or the container aggregate), container resources with the pod limit
//! standing in for a missing container limit, `cpu_quota` from the limit (never -1), empty
//! cpusets. Also the pod as the kubelet Pods API sends it (core/v1 protobuf bytes).

use std::collections::HashMap;

use crate::proto::cri::v1 as cri;
use crate::proto::podsapi::core_v1;
use prost::Message;

pub const GI: u64 = 1 << 30;
pub const MI: u64 = 1 << 20;
const PERIOD: i64 = 100_000;

/// Requests and limits: CPU in milli-CPUs, memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Res {
    pub cpu_req: Option<u64>,
    pub cpu_lim: Option<u64>,
    pub mem_req: Option<u64>,
    pub mem_lim: Option<u64>,
}

impl Res {
    /// Requests equal limits.
    pub fn guaranteed(cpu_milli: u64, memory: u64) -> Self {
        Self {
            cpu_req: Some(cpu_milli),
            cpu_lim: Some(cpu_milli),
            mem_req: Some(memory),
            mem_lim: Some(memory),
        }
    }

    pub fn burstable(cpu_req: u64, cpu_lim: u64, mem_req: u64, mem_lim: u64) -> Self {
        Self {
            cpu_req: Some(cpu_req),
            cpu_lim: Some(cpu_lim),
            mem_req: Some(mem_req),
            mem_lim: Some(mem_lim),
        }
    }

    /// The CRI values the kubelet sends for these resources.
    pub fn linux(&self) -> cri::LinuxContainerResources {
        linux_resources(self.cpu_req, self.cpu_lim, self.mem_lim, None)
    }

    fn add(self, other: Self) -> Self {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        Self {
            cpu_req: sum(self.cpu_req, other.cpu_req),
            cpu_lim: sum(self.cpu_lim, other.cpu_lim),
            mem_req: sum(self.mem_req, other.mem_req),
            mem_lim: sum(self.mem_lim, other.mem_lim),
        }
    }
}

/// One container of a test pod.
#[derive(Debug, Clone)]
pub struct Ctr {
    pub name: String,
    pub res: Res,
    /// A restartable init container (`restartPolicy: Always`).
    pub sidecar: bool,
    /// Device nodes a device plugin gave it (host paths): CreateContainer's `devices`.
    pub devices: Vec<String>,
}

/// A test pod.
#[derive(Debug, Clone)]
pub struct PodDef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// Pod-level resources (`spec.resources`).
    pub resources: Option<Res>,
    pub init: Vec<Ctr>,
    pub containers: Vec<Ctr>,
}

/// A pod named `name` (uid `uid-<name>`, namespace `e2e`) without containers yet.
pub fn pod_def(name: &str) -> PodDef {
    PodDef {
        uid: format!("uid-{name}"),
        name: name.to_string(),
        namespace: "e2e".to_string(),
        resources: None,
        init: Vec::new(),
        containers: Vec::new(),
    }
}

impl PodDef {
    pub fn pod_level(mut self, res: Res) -> Self {
        self.resources = Some(res);
        self
    }

    pub fn container(mut self, name: &str, res: Res) -> Self {
        self.containers.push(Ctr {
            name: name.to_string(),
            res,
            sidecar: false,
            devices: Vec::new(),
        });
        self
    }

    pub fn sidecar(mut self, name: &str, res: Res) -> Self {
        self.init.push(Ctr {
            name: name.to_string(),
            res,
            sidecar: true,
            devices: Vec::new(),
        });
        self
    }

    /// Container `name` gets device node `host_path` from a device plugin (the kubelet puts the
    /// plugin's `DeviceSpec`s into CreateContainer's `devices`).
    pub fn device(mut self, name: &str, host_path: &str) -> Self {
        let c = self
            .init
            .iter_mut()
            .chain(&mut self.containers)
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("pod {} has no container {name}", self.name));
        c.devices.push(host_path.to_string());
        self
    }

    /// Init containers then app containers, in the order the kubelet creates them.
    pub fn all(&self) -> impl Iterator<Item = &Ctr> {
        self.init.iter().chain(&self.containers)
    }

    pub fn ctr(&self, name: &str) -> &Ctr {
        self.all()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("pod {} has no container {name}", self.name))
    }

    /// What the kubelet sizes the sandbox with: pod-level values, else the sum of the
    /// long-running containers.
    fn sandbox_res(&self) -> Res {
        self.resources.unwrap_or_else(|| {
            self.init
                .iter()
                .filter(|c| c.sidecar)
                .chain(&self.containers)
                .fold(Res::default(), |acc, c| acc.add(c.res))
        })
    }

    fn guaranteed(&self) -> bool {
        let r = self.sandbox_res();
        r.cpu_req.is_some()
            && r.cpu_req == r.cpu_lim
            && r.mem_req.is_some()
            && r.mem_req == r.mem_lim
    }

    fn sandbox_metadata(&self) -> cri::PodSandboxMetadata {
        cri::PodSandboxMetadata {
            name: self.name.clone(),
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            attempt: 0,
        }
    }

    fn labels(&self) -> HashMap<String, String> {
        [
            ("io.kubernetes.pod.name", self.name.as_str()),
            ("io.kubernetes.pod.namespace", self.namespace.as_str()),
            ("io.kubernetes.pod.uid", self.uid.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// The sandbox config the kubelet builds (`generatePodSandboxConfig`).
    pub fn sandbox_config(&self) -> cri::PodSandboxConfig {
        let r = self.sandbox_res();
        let qos = if self.guaranteed() { "" } else { "burstable-" };
        cri::PodSandboxConfig {
            metadata: Some(self.sandbox_metadata()),
            hostname: self.name.clone(),
            log_directory: format!(
                "/var/log/pods/{}_{}_{}",
                self.namespace, self.name, self.uid
            ),
            labels: self.labels(),
            annotations: [
                ("kubernetes.io/config.source".to_string(), "api".to_string()),
                (
                    "kubernetes.io/config.seen".to_string(),
                    "2026-11-30T11:00:00Z".to_string(),
                ),
            ]
            .into(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: format!("kubepods-{qos}pod{}.slice", self.uid.replace('-', "_")),
                overhead: Some(cri::LinuxContainerResources::default()),
                resources: Some(linux_resources(r.cpu_req, r.cpu_lim, r.mem_lim, None)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn run_request(&self) -> cri::RunPodSandboxRequest {
        cri::RunPodSandboxRequest {
            config: Some(self.sandbox_config()),
            runtime_handler: String::new(),
        }
    }

    /// The CreateContainer request for container `name` (`generateLinuxContainerResources`):
    /// a missing container limit is the pod-level limit.
    pub fn create_request(&self, sandbox_id: &str, name: &str) -> cri::CreateContainerRequest {
        let c = self.ctr(name);
        let pod = self.resources.unwrap_or_default();
        let cpu_lim = c.res.cpu_lim.or(pod.cpu_lim);
        let mem_lim = c.res.mem_lim.or(pod.mem_lim);
        let oom = if self.guaranteed() { -997 } else { 500 };
        let mut labels = self.labels();
        labels.insert("io.kubernetes.container.name".into(), name.to_string());
        cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: name.to_string(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: "registry.k8s.io/pause:3.10".into(),
                    ..Default::default()
                }),
                labels,
                annotations: [
                    (
                        "io.kubernetes.container.hash".to_string(),
                        "1a2b3c4d".to_string(),
                    ),
                    (
                        "io.kubernetes.container.restartCount".to_string(),
                        "0".to_string(),
                    ),
                ]
                .into(),
                log_path: format!("{name}/0.log"),
                linux: Some(cri::LinuxContainerConfig {
                    resources: Some(linux_resources(c.res.cpu_req, cpu_lim, mem_lim, Some(oom))),
                    security_context: None,
                }),
                devices: c
                    .devices
                    .iter()
                    .map(|path| cri::Device {
                        container_path: path.clone(),
                        host_path: path.clone(),
                        permissions: "rw".into(),
                    })
                    .collect(),
                ..Default::default()
            }),
            sandbox_config: Some(self.sandbox_config()),
        }
    }

    /// The pod as the kubelet Pods API sends it (`v1.Pod#Marshal()`).
    pub fn pods_api_bytes(&self) -> Vec<u8> {
        let container = |c: &Ctr| core_v1::Container {
            name: Some(c.name.clone()),
            resources: Some(requirements(&c.res)),
            restart_policy: c.sidecar.then(|| "Always".to_string()),
        };
        core_v1::Pod {
            metadata: Some(core_v1::ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                uid: Some(self.uid.clone()),
                creation_timestamp: None,
            }),
            spec: Some(core_v1::PodSpec {
                containers: self.containers.iter().map(container).collect(),
                node_name: Some("e2e-node".into()),
                init_containers: self.init.iter().map(container).collect(),
                resources: self.resources.as_ref().map(requirements),
            }),
            status: Some(core_v1::PodStatus {
                phase: Some("Pending".into()),
            }),
        }
        .encode_to_vec()
    }
}

fn requirements(r: &Res) -> core_v1::ResourceRequirements {
    let q = |v: String| core_v1::Quantity { string: Some(v) };
    let mut requests = HashMap::new();
    let mut limits = HashMap::new();
    if let Some(v) = r.cpu_req {
        requests.insert("cpu".to_string(), q(format!("{v}m")));
    }
    if let Some(v) = r.mem_req {
        requests.insert("memory".to_string(), q(v.to_string()));
    }
    if let Some(v) = r.cpu_lim {
        limits.insert("cpu".to_string(), q(format!("{v}m")));
    }
    if let Some(v) = r.mem_lim {
        limits.insert("memory".to_string(), q(v.to_string()));
    }
    core_v1::ResourceRequirements { limits, requests }
}

/// `MilliCPUToShares`.
pub fn shares(milli: u64) -> i64 {
    ((milli * 1024 / 1000) as i64).clamp(2, 262_144)
}

/// `MilliCPUToQuota`.
pub fn quota(milli: u64) -> i64 {
    ((milli as i64) * PERIOD / 1000).max(1000)
}

fn linux_resources(
    cpu_req: Option<u64>,
    cpu_lim: Option<u64>,
    mem_lim: Option<u64>,
    oom: Option<i64>,
) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: PERIOD,
        cpu_quota: cpu_lim.map_or(0, quota),
        cpu_shares: cpu_req.or(cpu_lim).map_or(2, shares),
        memory_limit_in_bytes: mem_lim.map_or(0, |m| m as i64),
        oom_score_adj: oom.unwrap_or(0),
        unified: [("memory.oom.group".to_string(), "1".to_string())].into(),
        ..Default::default()
    }
}

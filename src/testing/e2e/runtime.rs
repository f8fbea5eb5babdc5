//! A stateful fake container runtime for the end-to-end tests: a tonic RuntimeService on a unix
//! socket that keeps sandboxes and containers (with the annotations it was given), answers the
//! list and status calls from them, records every decoded request it received, and can be told
//! to fail RunPodSandbox or CreateContainer for chosen names. Made with [`Fake::with_cgroups`],
//! it also plays the kernel: each started container gets a pid and a cgroup v1 tree (cpuset.cpus,
//! cpuset.mems, cpu.cfs_quota_us, /proc/<pid>/{cgroup,status}) under a directory, written from
//! its resources and rewritten by every UpdateContainerResources, which the drift check reads
//! and a test can change behind numa-shim's back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::proto::cri::v1 as cri;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use cri::runtime_service_server::{RuntimeService, RuntimeServiceServer};

use crate::testing::served::Served;

/// One container as the runtime holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub container: cri::Container,
    /// Its resources: those of CreateContainer, then every UpdateContainerResources merged in.
    pub resources: cri::LinuxContainerResources,
}

/// Everything the runtime holds and received.
#[derive(Debug, Default)]
pub struct State {
    next: u64,
    pub sandboxes: BTreeMap<String, cri::PodSandbox>,
    pub containers: BTreeMap<String, Held>,
    /// RunPodSandbox requests as received, in order (failed ones included).
    pub sandbox_requests: Vec<cri::RunPodSandboxRequest>,
    /// CreateContainer requests as received, in order (failed ones included).
    pub create_requests: Vec<cri::CreateContainerRequest>,
    /// UpdateContainerResources requests as received, in order.
    pub updates: Vec<cri::UpdateContainerResourcesRequest>,
    /// Pod names whose RunPodSandbox fails (after being received).
    pub fail_sandboxes: BTreeSet<String>,
    /// Container names whose CreateContainer fails (after being received).
    pub fail_containers: BTreeSet<String>,
    /// Container ids whose UpdateContainerResources fails (after being received).
    pub fail_updates: BTreeSet<String>,
    /// Container ids whose UpdateContainerResources is applied at once but answered only after
    /// this long (a runtime that wrote the cgroups and is slow to say so).
    pub slow_updates: BTreeMap<String, std::time::Duration>,
    /// UpdatePodSandboxResources answers UNIMPLEMENTED (as containerd 2.4 does).
    pub sandbox_updates_unimplemented: bool,
    /// UpdatePodSandboxResources requests as received, in order.
    pub sandbox_updates: Vec<cri::UpdatePodSandboxResourcesRequest>,
    /// Where the fake kernel's cgroup and proc trees are (`cg/`, `proc/`), if it plays one.
    pub cgroups: Option<PathBuf>,
    /// Container id → pid of the started containers (with `cgroups` only).
    pub pids: BTreeMap<String, u32>,
}

/// The first pid the fake kernel hands out.
const FIRST_PID: u32 = 4000;

impl State {
    /// Writes the cgroup files of a started container from the resources it holds now (a
    /// runtime applying them): an unset `cpuset_mems` reads as node 0, an unset quota as -1.
    fn write_cgroup(&self, id: &str) {
        let (Some(root), Some(pid), Some(held)) = (
            self.cgroups.as_ref(),
            self.pids.get(id),
            self.containers.get(id),
        ) else {
            return;
        };
        let r = &held.resources;
        let mems = if r.cpuset_mems.is_empty() {
            "0"
        } else {
            &r.cpuset_mems
        };
        let quota = if r.cpu_quota == 0 { -1 } else { r.cpu_quota };
        let cpuset = root.join("cg/cpuset/e2e").join(id);
        let cpu = root.join("cg/cpu,cpuacct/e2e").join(id);
        let proc = root.join("proc").join(pid.to_string());
        for dir in [&cpuset, &cpu, &proc] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let write = |path: PathBuf, text: String| std::fs::write(path, text).unwrap();
        write(cpuset.join("cpuset.cpus"), format!("{}\n", r.cpuset_cpus));
        write(cpuset.join("cpuset.mems"), format!("{mems}\n"));
        write(cpu.join("cpu.cfs_quota_us"), format!("{quota}\n"));
        write(
            proc.join("cgroup"),
            format!("7:cpuset:/e2e/{id}\n4:cpu,cpuacct:/e2e/{id}\n0::/\n"),
        );
        write(
            proc.join("status"),
            format!("Name:\tfake\nCpus_allowed_list:\t{}\n", r.cpuset_cpus),
        );
    }
}

/// The fake runtime's shared state.
#[derive(Debug, Clone, Default)]
pub struct Fake(Arc<Mutex<State>>);

impl Fake {
    /// A fake runtime that also plays the kernel, with its cgroup and proc trees in `root`.
    pub fn with_cgroups(root: &Path) -> Self {
        let fake = Self::default();
        fake.state().cgroups = Some(root.to_path_buf());
        fake
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// The fake kernel's cgroup and proc filesystems (needs [`Fake::with_cgroups`]).
    pub fn host(&self) -> crate::cgroup::Host {
        let root = self
            .state()
            .cgroups
            .clone()
            .expect("a fake made with_cgroups");
        crate::cgroup::Host::new(root.join("cg"), root.join("proc"))
    }

    /// What the fake kernel applied to started container `id`.
    pub fn cgroup(&self, id: &str) -> crate::cgroup::Reading {
        let pid = *self
            .state()
            .pids
            .get(id)
            .unwrap_or_else(|| panic!("container {id} was never started"));
        self.host().read_pid(pid).unwrap()
    }

    /// Writes `text` into cgroup `file` (`cpuset.cpus`, `cpuset.mems`, `cpu.cfs_quota_us`) of
    /// started container `id`, behind the runtime's and numa-shim's back (an operator or another
    /// agent): the runtime's record of the container's resources stays as it was.
    pub fn change_cgroup(&self, id: &str, file: &str, text: &str) {
        let root = self
            .state()
            .cgroups
            .clone()
            .expect("a fake made with_cgroups");
        let controller = if file.starts_with("cpuset.") {
            "cpuset"
        } else {
            "cpu,cpuacct"
        };
        let path = root
            .join("cg")
            .join(controller)
            .join("e2e")
            .join(id)
            .join(file);
        assert!(path.exists(), "{} is not there", path.display());
        std::fs::write(path, format!("{text}\n")).unwrap();
    }

    /// The CreateContainer request the runtime received for container `name` of pod `pod`
    /// (the last one, if several).
    pub fn created(&self, pod: &str, name: &str) -> cri::CreateContainerRequest {
        self.state()
            .create_requests
            .iter()
            .rev()
            .find(|r| {
                r.sandbox_config
                    .as_ref()
                    .and_then(|s| s.metadata.as_ref())
                    .is_some_and(|m| m.name == pod)
                    && r.config
                        .as_ref()
                        .and_then(|c| c.metadata.as_ref())
                        .is_some_and(|m| m.name == name)
            })
            .cloned()
            .unwrap_or_else(|| panic!("runtime received no CreateContainer for {pod}/{name}"))
    }

    /// The resources the runtime applied to container `id` now.
    pub fn resources(&self, id: &str) -> cri::LinuxContainerResources {
        self.state()
            .containers
            .get(id)
            .map(|h| h.resources.clone())
            .unwrap_or_else(|| panic!("runtime has no container {id}"))
    }

    /// UpdateContainerResources requests received for container `id`.
    pub fn updates_for(&self, id: &str) -> Vec<cri::UpdateContainerResourcesRequest> {
        self.state()
            .updates
            .iter()
            .filter(|u| u.container_id == id)
            .cloned()
            .collect()
    }

    fn id(state: &mut State, prefix: &str) -> String {
        state.next += 1;
        format!("{prefix}-{:04}", state.next)
    }
}

/// The resources of a CreateContainer request (empty when absent).
pub fn resources_of(req: &cri::CreateContainerRequest) -> cri::LinuxContainerResources {
    req.config
        .as_ref()
        .and_then(|c| c.linux.as_ref())
        .and_then(|l| l.resources.clone())
        .unwrap_or_default()
}

#[tonic::async_trait]
impl RuntimeService for Fake {
    async fn version(
        &self,
        _: Request<cri::VersionRequest>,
    ) -> Result<Response<cri::VersionResponse>, Status> {
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "e2e-fake".into(),
            runtime_version: "1.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        let req = request.into_inner();
        let mut state = self.state();
        state.sandbox_requests.push(req.clone());
        let config = req.config.unwrap_or_default();
        let meta = config.metadata.clone().unwrap_or_default();
        if state.fail_sandboxes.contains(&meta.name) {
            return Err(Status::internal(format!(
                "failed to create sandbox {}: injected failure",
                meta.name
            )));
        }
        let id = Fake::id(&mut state, "sb");
        let sandbox = cri::PodSandbox {
            id: id.clone(),
            metadata: Some(meta),
            state: cri::PodSandboxState::SandboxReady as i32,
            created_at: state.next as i64,
            labels: config.labels,
            annotations: config.annotations,
            runtime_handler: req.runtime_handler,
        };
        state.sandboxes.insert(id.clone(), sandbox);
        Ok(Response::new(cri::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let mut state = self.state();
        if let Some(sandbox) = state.sandboxes.get_mut(&id) {
            sandbox.state = cri::PodSandboxState::SandboxNotready as i32;
        }
        for held in state.containers.values_mut() {
            if held.container.pod_sandbox_id == id {
                held.container.state = cri::ContainerState::ContainerExited as i32;
            }
        }
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        let id = request.into_inner().pod_sandbox_id;
        let mut state = self.state();
        state.sandboxes.remove(&id);
        state
            .containers
            .retain(|_, h| h.container.pod_sandbox_id != id);
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn list_pod_sandbox(
        &self,
        _: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        let items = self.state().sandboxes.values().cloned().collect();
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        request: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        let req = request.into_inner();
        let mut state = self.state();
        state.create_requests.push(req.clone());
        let config = req.config.clone().unwrap_or_default();
        let meta = config.metadata.clone().unwrap_or_default();
        if !state.sandboxes.contains_key(&req.pod_sandbox_id) {
            return Err(Status::not_found(format!(
                "sandbox {} not found",
                req.pod_sandbox_id
            )));
        }
        if state.fail_containers.contains(&meta.name) {
            return Err(Status::internal(format!(
                "failed to create container {}: injected failure",
                meta.name
            )));
        }
        let id = Fake::id(&mut state, "ctr");
        let container = cri::Container {
            id: id.clone(),
            pod_sandbox_id: req.pod_sandbox_id.clone(),
            metadata: Some(meta),
            image: config.image.clone(),
            image_ref: String::new(),
            state: cri::ContainerState::ContainerCreated as i32,
            created_at: state.next as i64,
            labels: config.labels.clone(),
            annotations: config.annotations.clone(),
            image_id: String::new(),
        };
        let held = Held {
            container,
            resources: resources_of(&req),
        };
        state.containers.insert(id.clone(), held);
        Ok(Response::new(cri::CreateContainerResponse {
            container_id: id,
        }))
    }

    async fn start_container(
        &self,
        request: Request<cri::StartContainerRequest>,
    ) -> Result<Response<cri::StartContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        let mut state = self.state();
        let held = state
            .containers
            .get_mut(&id)
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        held.container.state = cri::ContainerState::ContainerRunning as i32;
        if state.cgroups.is_some() && !state.pids.contains_key(&id) {
            let pid = FIRST_PID + state.pids.len() as u32;
            state.pids.insert(id.clone(), pid);
            state.write_cgroup(&id);
        }
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        if let Some(held) = self.state().containers.get_mut(&id) {
            held.container.state = cri::ContainerState::ContainerExited as i32;
        }
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        let id = request.into_inner().container_id;
        self.state().containers.remove(&id);
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        _: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        let containers = self
            .state()
            .containers
            .values()
            .map(|h| h.container.clone())
            .collect();
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        let id = request.into_inner().container_id;
        let state = self.state();
        let held = state
            .containers
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
        // containerd's verbose answer: `info` JSON with the pid (the drift check reads it).
        let info = state
            .pids
            .get(&id)
            .map(|pid| ("info".to_string(), format!("{{\"pid\": {pid}}}")))
            .into_iter()
            .collect();
        let c = &held.container;
        let status = cri::ContainerStatus {
            id: c.id.clone(),
            metadata: c.metadata.clone(),
            state: c.state,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            resources: Some(cri::ContainerResources {
                linux: Some(held.resources.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(status),
            info,
        }))
    }

    async fn update_container_resources(
        &self,
        request: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Result<Response<cri::UpdateContainerResourcesResponse>, Status> {
        let req = request.into_inner();
        let slow = {
            let mut state = self.state();
            state.updates.push(req.clone());
            if state.fail_updates.contains(&req.container_id) {
                return Err(Status::internal(format!(
                    "e2e-fake: update of container {} fails",
                    req.container_id
                )));
            }
            let held = state.containers.get_mut(&req.container_id).ok_or_else(|| {
                Status::not_found(format!("container {} not found", req.container_id))
            })?;
            if let Some(linux) = req.linux {
                if !linux.cpuset_cpus.is_empty() {
                    held.resources.cpuset_cpus = linux.cpuset_cpus;
                }
                if !linux.cpuset_mems.is_empty() {
                    held.resources.cpuset_mems = linux.cpuset_mems;
                }
                if linux.cpu_quota != 0 {
                    held.resources.cpu_quota = linux.cpu_quota;
                }
            }
            state.write_cgroup(&req.container_id);
            state.slow_updates.get(&req.container_id).copied()
        };
        if let Some(slow) = slow {
            tokio::time::sleep(slow).await;
        }
        Ok(Response::new(cri::UpdateContainerResourcesResponse {}))
    }

    async fn update_pod_sandbox_resources(
        &self,
        request: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<cri::UpdatePodSandboxResourcesResponse>, Status> {
        let req = request.into_inner();
        let mut state = self.state();
        state.sandbox_updates.push(req.clone());
        if state.sandbox_updates_unimplemented {
            return Err(Status::unimplemented(
                "unknown method UpdatePodSandboxResources for service runtime.v1.RuntimeService",
            ));
        }
        if !state.sandboxes.contains_key(&req.pod_sandbox_id) {
            return Err(Status::not_found(format!(
                "sandbox {} not found",
                req.pod_sandbox_id
            )));
        }
        Ok(Response::new(cri::UpdatePodSandboxResourcesResponse {}))
    }
}

/// A running fake runtime.
pub struct Runtime {
    pub path: PathBuf,
    pub fake: Fake,
    served: Served,
}

impl Runtime {
    /// Serves `fake` on `path` (a leftover socket file is removed first).
    pub async fn start(path: &Path, fake: Fake) -> Self {
        let server = Server::builder().add_service(RuntimeServiceServer::new(fake.clone()));
        let served = Served::spawn(path, |listener, stopped| async move {
            server
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            path: path.to_path_buf(),
            fake,
            served,
        }
    }

    /// Stops serving (the state stays in `fake`).
    pub async fn stop(self) {
        self.served.stop().await;
    }
}

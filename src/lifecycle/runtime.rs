//! numa-shim's own CRI client to the runtime: the calls it makes itself (cpuset updates, start-up
//! reconciliation, the drift check), never on behalf of the kubelet. A tonic channel over the
//! runtime's unix socket; every failure is a [`RuntimeError`] naming the socket and the method.

use std::path::{Path, PathBuf};

use tonic::transport::Channel;

use crate::proto::cri::v1 as cri;
use crate::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::transport::limits::MAX_MESSAGE;
use crate::transport::unix_channel;

/// A call numa-shim made to the runtime that failed: which socket, which method, and the status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("runtime {}: {method}: {}: {}", .socket.display(), .status.code(), .status.message())]
pub struct RuntimeError {
    pub socket: PathBuf,
    pub method: &'static str,
    pub status: tonic::Status,
}

impl RuntimeError {
    /// The gRPC code the runtime (or the channel) answered.
    pub fn code(&self) -> tonic::Code {
        self.status.code()
    }
}

/// The runtime client.
#[derive(Debug, Clone)]
pub struct Runtime {
    client: RuntimeServiceClient<Channel>,
    socket: PathBuf,
}

impl Runtime {
    pub fn new(socket: &Path) -> Self {
        let client = RuntimeServiceClient::new(unix_channel(socket))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        Self {
            client,
            socket: socket.to_path_buf(),
        }
    }

    /// The runtime's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn failed(&self, method: &'static str) -> impl FnOnce(tonic::Status) -> RuntimeError + '_ {
        move |status| RuntimeError {
            socket: self.socket.clone(),
            method,
            status,
        }
    }

    /// Sets a running container's cpuset and, when numa-shim decided one, its CFS quota (only
    /// `cpuset_cpus`/`cpuset_mems`, as the kubelet's CPU manager reconcile does, plus the lifted
    /// quota of an exclusive slice: a container whose cgroup lost it gets it back).
    pub async fn update_cpuset(
        &self,
        container_id: &str,
        cpus: &str,
        mems: Option<&str>,
        cpu_quota: Option<i64>,
    ) -> Result<(), RuntimeError> {
        let request = update_request(container_id, cpus, mems, cpu_quota);
        self.client
            .clone()
            .update_container_resources(request)
            .await
            .map(|_| ())
            .map_err(self.failed("UpdateContainerResources"))
    }

    /// Every sandbox the runtime has.
    pub async fn sandboxes(&self) -> Result<Vec<cri::PodSandbox>, RuntimeError> {
        let request = cri::ListPodSandboxRequest::default();
        let response = self.client.clone().list_pod_sandbox(request).await;
        Ok(response
            .map_err(self.failed("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    /// Every container the runtime has.
    pub async fn containers(&self) -> Result<Vec<cri::Container>, RuntimeError> {
        let request = cri::ListContainersRequest::default();
        let response = self.client.clone().list_containers(request).await;
        Ok(response
            .map_err(self.failed("ListContainers"))?
            .into_inner()
            .containers)
    }

    /// The `info` of the runtime's verbose Status answer (CRI-O puts its configuration there,
    /// containerd its own).
    pub async fn status_info(
        &self,
    ) -> Result<std::collections::HashMap<String, String>, tonic::Status> {
        let request = cri::StatusRequest { verbose: true };
        Ok(self.client.clone().status(request).await?.into_inner().info)
    }

    /// The container's status with the runtime's verbose info (pid for cgroup reads).
    pub async fn container_status(
        &self,
        id: &str,
    ) -> Result<cri::ContainerStatusResponse, RuntimeError> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        };
        let response = self.client.clone().container_status(request).await;
        Ok(response
            .map_err(self.failed("ContainerStatus"))?
            .into_inner())
    }
}

/// The UpdateContainerResources numa-shim sends: the fields it decides, every other one left at
/// its zero value, which runtimes read as "keep" (`cpu_quota` 0 included).
fn update_request(
    container_id: &str,
    cpus: &str,
    mems: Option<&str>,
    cpu_quota: Option<i64>,
) -> cri::UpdateContainerResourcesRequest {
    let linux = cri::LinuxContainerResources {
        cpuset_cpus: cpus.to_string(),
        cpuset_mems: mems.unwrap_or_default().to_string(),
        cpu_quota: cpu_quota.unwrap_or_default(),
        ..Default::default()
    };
    cri::UpdateContainerResourcesRequest {
        container_id: container_id.to_string(),
        linux: Some(linux),
        ..Default::default()
    }
}

/// The process id in a verbose ContainerStatus `info` (containerd: `info` JSON with `pid`).
pub fn pid_of(status: &cri::ContainerStatusResponse) -> Option<u32> {
    let info = status.info.get("info")?;
    let value: serde_json::Value = serde_json::from_str(info).ok()?;
    value
        .get("pid")?
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The update carries the cpus, the mems and the lifted quota numa-shim decided, and leaves
    /// the rest (the kubelet's shares, period, memory limit) at zero: "keep".
    #[test]
    fn update_carries_cpus_mems_and_the_decided_quota() {
        let request = update_request("c1", "2-3", Some("1"), Some(-1));
        let linux = request.linux.unwrap();
        assert_eq!(request.container_id, "c1");
        assert_eq!(
            (
                linux.cpuset_cpus.as_str(),
                linux.cpuset_mems.as_str(),
                linux.cpu_quota
            ),
            ("2-3", "1", -1)
        );
        assert_eq!(
            cri::LinuxContainerResources {
                cpuset_cpus: String::new(),
                cpuset_mems: String::new(),
                cpu_quota: 0,
                ..linux
            },
            cri::LinuxContainerResources::default(),
            "nothing else is set"
        );
        // Without a decided quota and mems: the runtime keeps its own.
        let linux = update_request("c1", "0", None, None).linux.unwrap();
        assert_eq!((linux.cpuset_mems.as_str(), linux.cpu_quota), ("", 0));
    }

    /// Each of numa-shim's own calls names the socket and the method when it fails.
    #[tokio::test]
    async fn every_failed_call_names_socket_and_method() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gone.sock");
        let runtime = Runtime::new(&socket);
        let errors = [
            runtime.sandboxes().await.map(drop).unwrap_err(),
            runtime.containers().await.map(drop).unwrap_err(),
            runtime.container_status("c1").await.map(drop).unwrap_err(),
            runtime
                .update_cpuset("c1", "0", None, None)
                .await
                .unwrap_err(),
        ];
        let methods = [
            "ListPodSandbox",
            "ListContainers",
            "ContainerStatus",
            "UpdateContainerResources",
        ];
        for (err, method) in errors.iter().zip(methods) {
            assert_eq!(err.method, method);
            assert_eq!(err.code(), tonic::Code::Unavailable);
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("runtime {}: {method}: ", socket.display())),
                "{text}"
            );
        }
    }
}

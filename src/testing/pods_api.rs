//! The one fake kubelet Pods API of the tests (used by `testing::e2e` and
//! tests/realruntime): it serves the pods a test registers, as the kubelet's `WatchPods` does —
//! an ADDED event for each pod already known, then INITIAL_SYNC_COMPLETE, then an ADDED event for
//! each pod registered later — and `ListPods`. The real kubelet's Pods API is what
//! tests/realkubelet uses; this one is for tests without a kubelet.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::proto::podsapi::core_v1;
use crate::proto::podsapi::v1alpha1::pods_server::{Pods, PodsServer};
use crate::proto::podsapi::v1alpha1::{
    EventType, GetPodRequest, GetPodResponse, ListPodsRequest, ListPodsResponse, WatchPodsEvent,
    WatchPodsRequest,
};
use prost::Message;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

/// A fake kubelet Pods API; clones share the pods.
#[derive(Clone, Default)]
pub struct PodsApi {
    /// core/v1 Pods as protobuf bytes, in the order they were registered.
    pods: Arc<Mutex<Vec<Vec<u8>>>>,
    added: Arc<Notify>,
}

impl PodsApi {
    /// Serves on `socket` (a stale file there is removed) until the returned task is aborted.
    pub fn serve(&self, socket: &Path) -> JoinHandle<()> {
        let _ = std::fs::remove_file(socket);
        let incoming = UnixListenerStream::new(UnixListener::bind(socket).unwrap());
        let server = tonic::transport::Server::builder().add_service(PodsServer::new(self.clone()));
        tokio::spawn(async move {
            let _ = server.serve_with_incoming(incoming).await;
        })
    }

    /// The kubelet learns of a pod (before it creates its sandbox).
    pub fn add(&self, pod: &core_v1::Pod) {
        self.add_bytes(pod.encode_to_vec());
    }

    /// [`PodsApi::add`] of a pod already encoded.
    pub fn add_bytes(&self, pod: Vec<u8>) {
        self.pods.lock().unwrap().push(pod);
        self.added.notify_waiters();
    }
}

#[tonic::async_trait]
impl Pods for PodsApi {
    async fn watch_pods(
        &self,
        _: Request<WatchPodsRequest>,
    ) -> Result<Response<BoxStream<WatchPodsEvent>>, Status> {
        let (tx, rx) = mpsc::channel(64);
        let api = self.clone();
        tokio::spawn(async move {
            let mut sent = 0;
            let mut synced = false;
            loop {
                // Registered before the pods are read, so no registration is missed.
                let notified = api.added.notified();
                let pods: Vec<Vec<u8>> = api.pods.lock().unwrap()[sent..].to_vec();
                for pod in pods {
                    sent += 1;
                    let event = WatchPodsEvent {
                        r#type: EventType::Added as i32,
                        pod,
                    };
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                if !synced {
                    synced = true;
                    let event = WatchPodsEvent {
                        r#type: EventType::InitialSyncComplete as i32,
                        pod: Vec::new(),
                    };
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                notified.await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_pods(
        &self,
        _: Request<ListPodsRequest>,
    ) -> Result<Response<ListPodsResponse>, Status> {
        Ok(Response::new(ListPodsResponse {
            pods: self.pods.lock().unwrap().clone(),
        }))
    }

    async fn get_pod(&self, _: Request<GetPodRequest>) -> Result<Response<GetPodResponse>, Status> {
        Err(Status::not_found("not served by the fake"))
    }
}

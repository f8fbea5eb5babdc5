//! numa-shim's endpoints towards the kubelet, one per fronted resource, and their registration:
//! classic (serve `<kubeletDir>/<socket>`, call `Register` on `<kubeletDir>/kubelet.sock`; a
//! restarted kubelet recreates `kubelet.sock` and removes the sockets there, so both are
//! watched and the endpoint served and registered again) or through the kubelet's plugin
//! watcher (serve `<pluginsRegistry>/<socket>` with the plugin watcher's Registration service
//! beside the DevicePlugin one; the kubelet finds it there, also after its restart).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::StreamExt;
use tonic::transport::Server;
use tracing::{debug, info, warn};

use super::front::{socket_name, Facing, Resource, Shared, VERSION};
use crate::listen::{inode_of as inode, SocketOptions};
use crate::proto::deviceplugin::v1beta1 as dp;
use crate::proto::pluginregistration::v1 as reg;
use crate::transport::unix_channel;

/// How often the kubelet's registration socket and numa-shim's endpoints are looked at.
pub const POLL: Duration = Duration::from_secs(1);

/// How numa-shim registers its endpoints with the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletSide {
    /// `Register` on `<dir>/kubelet.sock`, endpoints served in `dir`.
    Classic { dir: PathBuf },
    /// Endpoints served in the kubelet's plugin watcher directory.
    PluginWatcher { dir: PathBuf },
}

impl KubeletSide {
    fn dir(&self) -> &Path {
        match self {
            Self::Classic { dir } | Self::PluginWatcher { dir } => dir,
        }
    }
}

/// The plugin watcher's Registration service for one endpoint.
#[derive(Debug, Clone)]
struct WatcherInfo {
    resource: String,
    endpoint: PathBuf,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for WatcherInfo {
    async fn get_info(
        &self,
        _request: tonic::Request<reg::InfoRequest>,
    ) -> Result<tonic::Response<reg::PluginInfo>, tonic::Status> {
        Ok(tonic::Response::new(reg::PluginInfo {
            r#type: "DevicePlugin".to_string(),
            name: self.resource.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: vec![VERSION.to_string()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: tonic::Request<reg::RegistrationStatus>,
    ) -> Result<tonic::Response<reg::RegistrationStatusResponse>, tonic::Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            info!(resource = %self.resource, endpoint = %self.endpoint.display(), "fronted resource registered with the kubelet (plugin watcher)");
        } else {
            warn!(resource = %self.resource, endpoint = %self.endpoint.display(), error = %status.error, "the kubelet refused the fronted resource's registration (plugin watcher)");
        }
        Ok(tonic::Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// Serves `resource` to the kubelet until `stop`: binds numa-shim's endpoint, registers it, and
/// does both again whenever the kubelet restarted or the endpoint's socket was removed.
pub async fn serve_resource(
    shared: Arc<Shared>,
    resource: Arc<Resource>,
    side: KubeletSide,
    mut stop: watch::Receiver<bool>,
) {
    let name = resource.name.clone();
    let socket = side.dir().join(socket_name(&name));
    let kubelet_sock = side.dir().join("kubelet.sock");
    let mut first = true;
    let mut waiting = false;
    while !*stop.borrow() {
        // The directory is the kubelet's: made by it, never by numa-shim (a socket left in a
        // directory numa-shim made after the kubelet's was removed is a stale plugin to the next
        // kubelet there, which registers it twice and drops it again a second later).
        if !side.dir().is_dir() {
            if !waiting {
                info!(resource = %name, dir = %side.dir().display(), "the kubelet's directory for the fronted resource's endpoint is not there: waiting for the kubelet to make it");
                waiting = true;
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => continue,
                _ = stop.changed() => break,
            }
        }
        waiting = false;
        let bound = match crate::listen::bind_in_place(
            &socket,
            SocketOptions {
                mode: 0o600,
                group: None,
            },
        )
        .await
        {
            Ok(b) => b,
            Err(err) => {
                warn!(resource = %name, socket = %socket.display(), error = %err, "cannot serve the fronted resource to the kubelet; trying again");
                tokio::select! {
                    () = tokio::time::sleep(POLL * 5) => continue,
                    _ = stop.changed() => break,
                }
            }
        };
        let ours = bound.inode();
        let (end_tx, end_rx) = watch::channel(false);
        let facing = Facing {
            shared: shared.clone(),
            resource: resource.clone(),
        };
        let watcher = match &side {
            KubeletSide::PluginWatcher { .. } => Some(WatcherInfo {
                resource: name.clone(),
                endpoint: socket.clone(),
            }),
            KubeletSide::Classic { .. } => None,
        };
        let server = tokio::spawn(serve_endpoint(bound.listener, facing, watcher, end_rx));
        // Registered with this kubelet (the inode of its kubelet.sock), or not yet.
        let mut registered_with: Option<u64> = None;
        loop {
            if inode(&socket) != Some(ours) {
                info!(resource = %name, socket = %socket.display(), "numa-shim's endpoint socket was removed (kubelet restarted): serving and registering it again");
                break;
            }
            if let KubeletSide::Classic { .. } = &side {
                let now = inode(&kubelet_sock);
                if now.is_some() && now != registered_with {
                    if registered_with.is_some() {
                        info!(resource = %name, "the kubelet's registration socket was recreated (kubelet restarted): registering the fronted resource again");
                    }
                    match register(&kubelet_sock, &name, resource.pre_start_required()).await {
                        Ok(()) => {
                            info!(resource = %name, endpoint = %socket.display(), kubelet = %kubelet_sock.display(), again = !first, "fronted resource registered with the kubelet (devices without topology; preferred allocation from numa-shim)");
                            registered_with = now;
                            first = false;
                        }
                        Err(status) => {
                            debug!(resource = %name, code = ?status.code(), message = status.message(), "the kubelet does not take the registration yet; trying again");
                        }
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => break,
            }
        }
        // Streams the kubelet keeps open would hold a graceful stop for ever: a short grace, then
        // the endpoint is dropped (the kubelet reconnects to the new one).
        let _ = end_tx.send(true);
        let mut server = server;
        if tokio::time::timeout(Duration::from_secs(1), &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
        crate::listen::remove_if_same(&socket, ours);
    }
    resource
        .served
        .store(false, std::sync::atomic::Ordering::Release);
}

async fn serve_endpoint(
    listener: tokio::net::UnixListener,
    facing: Facing,
    watcher: Option<WatcherInfo>,
    mut end: watch::Receiver<bool>,
) {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener)
        .map(|accepted| accepted.map(crate::relay::AuthorityFilter::new));
    let plugin = dp::device_plugin_server::DevicePluginServer::new(facing)
        .max_decoding_message_size(crate::transport::limits::MAX_MESSAGE);
    let router = Server::builder()
        .add_service(plugin)
        .add_optional_service(watcher.map(reg::registration_server::RegistrationServer::new));
    let shutdown = async move {
        let _ = end.wait_for(|v| *v).await;
    };
    if let Err(err) = router
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
    {
        warn!(error = %err, "fronted resource endpoint stopped");
    }
}

/// `Register` with the kubelet for `resource`: numa-shim's endpoint, the plugin's
/// `pre_start_required`, and always `get_preferred_allocation_available`.
pub async fn register(
    kubelet_sock: &Path,
    resource: &str,
    pre_start_required: bool,
) -> Result<(), tonic::Status> {
    let mut client = dp::registration_client::RegistrationClient::new(unix_channel(kubelet_sock));
    let call = client.register(dp::RegisterRequest {
        version: VERSION.to_string(),
        endpoint: socket_name(resource),
        resource_name: resource.to_string(),
        options: Some(dp::DevicePluginOptions {
            pre_start_required,
            get_preferred_allocation_available: true,
        }),
    });
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(result) => result.map(|_| ()),
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "the kubelet did not answer Register within 10s",
        )),
    }
}

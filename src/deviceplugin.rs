//! The device plugin front (docs/devices.md, "The device plugin front"): numa-shim stands between
//! the kubelet and the device plugins, so that the kubelet's device choice is numa-shim's.
//!
//! Plugins register with numa-shim (`<dir>/kubelet.sock`, the `Registration` service of the
//! device plugin API v1beta1); numa-shim follows each plugin's `ListAndWatch`, keeps every
//! device's true NUMA nodes and health, and registers its own endpoint for the resource with the
//! kubelet. The kubelet gets the devices **without topology**: its device manager then gives no
//! hint for the resource and, at allocation, offers every available device to
//! `GetPreferredAllocation` and takes the answer first. numa-shim answers with the devices its own
//! admission of the pod (CPUs, memory and devices merged, as the kubelet with all its managers
//! would) gives the container (`decide`, `choice`); `Allocate`, `PreStartContainer` and the
//! options go to the plugin as they are. The true topology is published
//! ([`FrontedTopology`]) for the PodResources readers, which put it back on the kubelet's answers.
//!
//! `front` holds the state and the services, `kubelet` the endpoints towards the kubelet and
//! their registration (classic or through the plugin watcher), `choice` the pure parts of the
//! answer, `decide` the dry-run decision.

pub mod choice;
pub mod decide;
pub mod front;
pub mod kubelet;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tracing::{info, warn};

pub use decide::{Answered, Chooser};
pub use front::{Shared, VERSION};
pub use kubelet::KubeletSide;

use crate::lifecycle::devices::FrontedTopology;
use crate::listen::SocketOptions;
use crate::proto::deviceplugin::v1beta1 as dp;

/// Where the front listens and how it reaches the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontOptions {
    /// The directory plugins register in (`kubelet.sock` there).
    pub dir: PathBuf,
    /// How numa-shim registers with the kubelet.
    pub kubelet: KubeletSide,
}

/// The default directory plugins are pointed at.
pub const DEFAULT_DIR: &str = "/var/lib/numa-shim/device-plugins";
/// The kubelet's device plugin directory (hard-coded by the kubelet, whatever its root dir).
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet/device-plugins";

/// Why the front did not start.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    #[error(transparent)]
    Listen(#[from] crate::listen::ListenError),
}

/// A running front.
#[derive(Debug)]
pub struct Front {
    pub shared: Arc<Shared>,
    pub socket: PathBuf,
}

/// Starts the front: removes stale sockets in `options.dir` (plugins then register again, as
/// after a kubelet restart), serves the Registration service on `<dir>/kubelet.sock`, and serves
/// every registered resource to the kubelet, until `stop`.
pub async fn start(
    options: FrontOptions,
    chooser: Chooser,
    topology: Arc<FrontedTopology>,
    stop: watch::Receiver<bool>,
) -> Result<Front, FrontError> {
    crate::files::ensure_dir(&options.dir, 0o750).map_err(crate::listen::ListenError::from)?;
    let removed = front::remove_sockets(&options.dir);
    let socket = options.dir.join("kubelet.sock");
    let bound = crate::listen::bind(
        &socket,
        SocketOptions {
            mode: 0o660,
            group: None,
        },
    )
    .await?;
    let shared = Arc::new(Shared::new(options.dir.clone(), chooser, topology));
    let (tx, mut rx) = mpsc::unbounded_channel();
    *shared.on_new.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    info!(socket = %socket.display(), stale_removed = removed, kubelet = ?options.kubelet, "device plugin front listening: point device plugins at this directory");
    {
        let (shared, stop) = (shared.clone(), stop.clone());
        let side = options.kubelet.clone();
        tokio::spawn(async move {
            while let Some(resource) = rx.recv().await {
                resource
                    .served
                    .store(true, std::sync::atomic::Ordering::Release);
                tokio::spawn(kubelet::serve_resource(
                    shared.clone(),
                    resource,
                    side.clone(),
                    stop.clone(),
                ));
            }
        });
    }
    {
        let shared = shared.clone();
        let mut stop = stop.clone();
        let inode = bound.inode();
        let path = bound.path.clone();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(bound.listener)
                .map(|accepted| accepted.map(crate::relay::AuthorityFilter::new));
            let service =
                dp::registration_server::RegistrationServer::new(front::FrontRegistration(shared));
            let shutdown = async move {
                let _ = stop.wait_for(|v| *v).await;
            };
            if let Err(err) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
            {
                warn!(error = %err, "device plugin front registration server stopped");
            }
            crate::listen::remove_if_same(&path, inode);
        });
    }
    Ok(Front { shared, socket })
}

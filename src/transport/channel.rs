//! Lazily connected tonic channels over unix sockets (the runtime, the kubelet's sockets).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// How long a connect to a unix-socket gRPC server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A lazily connected channel to a unix-socket gRPC server.
pub fn unix_channel(path: &Path) -> Channel {
    let path: PathBuf = path.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector_lazy(tower::service_fn(move |_| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
}

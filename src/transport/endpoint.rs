//! CRI endpoint strings (`unix:///path` or a bare path) and runtime socket auto-detection.
//! Only unix sockets are supported.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Runtime sockets probed, in order, when no runtime endpoint is given.
pub const RUNTIME_CANDIDATES: [&str; 4] = [
    "/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
];

/// An endpoint that is not a unix socket path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// A scheme other than `unix://`.
    #[error("endpoint {0:?} is not a unix socket (expected unix:///path)")]
    Scheme(String),
    /// An empty or relative path.
    #[error("endpoint {0:?} needs an absolute socket path")]
    Path(String),
    /// No candidate runtime socket exists under the given root.
    #[error("no container runtime socket found (tried {0}); pass --runtime")]
    NoRuntime(String),
}

/// The socket path of a `unix:///path` (or bare `/path`) endpoint.
pub fn parse(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = match endpoint.split_once("://") {
        Some(("unix", rest)) => rest,
        Some(_) => return Err(EndpointError::Scheme(endpoint.to_string())),
        None => endpoint,
    };
    if !path.starts_with('/') {
        return Err(EndpointError::Path(endpoint.to_string()));
    }
    Ok(PathBuf::from(path))
}

/// The first candidate runtime socket that exists as a socket under `root` (`/` on a node).
pub fn detect_runtime(root: &Path) -> Result<PathBuf, EndpointError> {
    RUNTIME_CANDIDATES
        .iter()
        .map(|c| root.join(c.trim_start_matches('/')))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(false)
        })
        .ok_or_else(|| EndpointError::NoRuntime(RUNTIME_CANDIDATES.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_endpoints() {
        assert_eq!(
            parse("unix:///run/a.sock"),
            Ok(PathBuf::from("/run/a.sock"))
        );
        assert_eq!(parse("/run/a.sock"), Ok(PathBuf::from("/run/a.sock")));
        assert!(matches!(
            parse("tcp://1.2.3.4:5"),
            Err(EndpointError::Scheme(_))
        ));
        assert!(matches!(
            parse("unix://relative.sock"),
            Err(EndpointError::Path(_))
        ));
        assert!(matches!(parse(""), Err(EndpointError::Path(_))));
    }

    #[test]
    fn detects_the_first_existing_socket() {
        let root = tempfile::tempdir().unwrap();
        assert!(matches!(
            detect_runtime(root.path()),
            Err(EndpointError::NoRuntime(_))
        ));
        // A regular file where containerd's socket would be does not count.
        std::fs::create_dir_all(root.path().join("run/containerd")).unwrap();
        std::fs::write(root.path().join("run/containerd/containerd.sock"), b"").unwrap();
        std::fs::create_dir_all(root.path().join("run/crio")).unwrap();
        let crio = root.path().join("run/crio/crio.sock");
        let _l = std::os::unix::net::UnixListener::bind(&crio).unwrap();
        assert_eq!(detect_runtime(root.path()), Ok(crio));
    }
}

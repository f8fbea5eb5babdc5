//! The listening socket: directory created, a stale socket replaced, a live one refused, and the
//! mode set before the socket is reachable under its name (bound under a temporary name, then
//! renamed into place).

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tracing::{info, warn};

use super::PodResourcesError;

/// Binds `path` with file mode `mode`.
pub async fn bind(path: &Path, mode: u32) -> Result<UnixListener, PodResourcesError> {
    let err = |action, source| PodResourcesError::Socket {
        action,
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| err("create the directory of", e))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(PodResourcesError::NotASocket {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => match tokio::net::UnixStream::connect(path).await {
            Ok(_) => {
                return Err(PodResourcesError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                warn!(socket = %path.display(), "replacing stale pod-resources socket");
            }
            Err(e) => return Err(err("probe", e)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(err("inspect", e)),
    }
    let temp = temp_name(path);
    let _ = std::fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|e| err("bind", e))?;
    let secured = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = secured {
        let _ = std::fs::remove_file(&temp);
        return Err(err("secure", e));
    }
    info!(socket = %path.display(), mode = format!("{mode:o}"), "pod-resources listening");
    Ok(listener)
}

/// The inode of the socket at `path` (to remove it later only if it is still this one).
pub fn socket_inode(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Removes the socket at `path` if it is still the inode `inode` (not replaced by a newer
/// process); returns whether it did.
pub fn remove_if_same(path: &Path, inode: u64) -> bool {
    socket_inode(path) == Some(inode) && std::fs::remove_file(path).is_ok()
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

//! Listening unix sockets (the CRI relay's and the PodResources server's): refuse to steal a
//! live one, replace a stale one, set mode and group before the socket becomes reachable under
//! its name, and remove it only if still ours. Takes every path as a parameter.

use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tracing::{info, warn};

/// Why a listening socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The path holds a file that is not a socket.
    #[error("refusing to replace {path}: it exists and is not a socket")]
    NotASocket { path: PathBuf },
    /// Another live server answers on the path.
    #[error("another server is already listening on {path}")]
    InUse { path: PathBuf },
    /// The socket's directory is unsafe or cannot be made.
    #[error("listening socket directory: {0}")]
    Directory(#[from] crate::files::FilesError),
    /// Preparing, binding or securing the socket failed.
    #[error("cannot {action} listening socket {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Ownership and permissions of the listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    /// File mode bits, e.g. `0o660`.
    pub mode: u32,
    /// Group to give the socket; `None` keeps the process's group.
    pub group: Option<u32>,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            mode: 0o660,
            group: None,
        }
    }
}

/// A bound listening socket and the inode it was created with.
#[derive(Debug)]
pub struct Bound {
    pub listener: UnixListener,
    pub path: PathBuf,
    inode: u64,
}

/// Binds `path`. A live server on it is an error; a stale socket file is replaced; any other
/// file is left alone and reported. The socket is bound under a temporary name, given its mode
/// and group, then renamed into place, so it is never reachable with looser permissions.
/// The socket's directory is made (owner-only, plus the group's traverse when the group may
/// connect) when it is missing.
pub async fn bind(path: &Path, options: SocketOptions) -> Result<Bound, ListenError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let existed = parent.exists();
        crate::files::ensure_dir(parent, dir_mode(options.mode))?;
        // A directory made here lets the socket's group reach the socket; an existing one is
        // the operator's (or systemd's RuntimeDirectory=) and keeps its group.
        if let Some(gid) = options.group.filter(|_| !existed) {
            std::os::unix::fs::chown(parent, None, Some(gid)).map_err(|e| ListenError::Io {
                action: "give the socket's group the directory of",
                path: path.to_path_buf(),
                source: e,
            })?;
        }
    }
    bind_in_place(path, options).await
}

/// [`bind`] in a directory that must already exist (someone else's, e.g. the kubelet's plugin
/// directory): a missing one is an error and is never made.
pub async fn bind_in_place(path: &Path, options: SocketOptions) -> Result<Bound, ListenError> {
    let err = |action, source| ListenError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(ListenError::NotASocket {
                path: path.to_path_buf(),
            })
        }
        Ok(_) => match tokio::net::UnixStream::connect(path).await {
            Ok(_) => {
                return Err(ListenError::InUse {
                    path: path.to_path_buf(),
                })
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                warn!(socket = %path.display(), "replacing stale socket");
            }
            Err(e) => return Err(err("probe", e)),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(err("inspect", e)),
    }
    let temp = temp_name(path);
    let _ = std::fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|e| err("bind", e))?;
    let secured = secure(&temp, options).and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = secured {
        let _ = std::fs::remove_file(&temp);
        return Err(err("secure", e));
    }
    let inode = std::fs::symlink_metadata(path)
        .map_err(|e| err("inspect", e))?
        .ino();
    info!(socket = %path.display(), mode = format!("{:o}", options.mode), group = ?options.group, "listening");
    Ok(Bound {
        listener,
        path: path.to_path_buf(),
        inode,
    })
}

/// The mode of a socket's directory: owner-only, plus traverse and list for the group when the
/// socket's group may connect (0700 or 0750).
fn dir_mode(socket_mode: u32) -> u32 {
    if socket_mode & 0o060 != 0 {
        0o750
    } else {
        0o700
    }
}

fn secure(path: &Path, options: SocketOptions) -> std::io::Result<()> {
    if let Some(gid) = options.group {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(options.mode))
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

impl Bound {
    /// The inode the socket was created with.
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Stops listening and removes the socket file if it is still the one this process created.
    pub fn close(self) {
        drop(self.listener);
        remove_if_same(&self.path, self.inode);
    }
}

/// The inode at `path` now, if there is a file (a socket replaced by a restarted peer has
/// another one).
pub fn inode_of(path: &Path) -> Option<u64> {
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// Removes `path` only if it is still the inode `inode`; returns whether it did.
pub fn remove_if_same(path: &Path, inode: u64) -> bool {
    match inode_of(path) {
        Some(now) if now == inode => match std::fs::remove_file(path) {
            Ok(()) => true,
            Err(e) => {
                warn!(socket = %path.display(), error = %e, "cannot remove socket");
                false
            }
        },
        _ => {
            info!(socket = %path.display(), "socket replaced by another process, left in place");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_with_mode_and_replaces_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cri.sock");
        let options = SocketOptions {
            mode: 0o600,
            group: None,
        };
        let first = bind(&path, options).await.unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // A live server answers: refused.
        assert!(matches!(
            bind(&path, options).await,
            Err(ListenError::InUse { .. })
        ));
        // Drop the listener: the file stays but nobody answers, so it is stale and replaced.
        drop(first.listener);
        let second = bind(&path, SocketOptions::default()).await.unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o660
        );
        assert_ne!(second.inode, first.inode);
        // The first owner must not delete the replacement.
        assert!(!remove_if_same(&path, first.inode));
        assert!(path.exists());
        second.close();
        assert!(!path.exists());
    }

    /// The socket's directory is created 0700, or 0750 when the socket's group may connect, and
    /// a directory others could write to (where they could replace the socket) is tightened.
    #[tokio::test]
    async fn the_socket_directory_gets_an_explicit_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let private = dir.path().join("private/cri.sock");
        let bound = bind(
            &private,
            SocketOptions {
                mode: 0o600,
                group: None,
            },
        )
        .await
        .unwrap();
        assert_eq!(mode(private.parent().unwrap()), 0o700);
        bound.close();
        let shared = dir.path().join("shared/cri.sock");
        let bound = bind(&shared, SocketOptions::default()).await.unwrap();
        assert_eq!(mode(shared.parent().unwrap()), 0o750);
        bound.close();
        std::fs::set_permissions(
            shared.parent().unwrap(),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let bound = bind(&shared, SocketOptions::default()).await.unwrap();
        assert_eq!(mode(shared.parent().unwrap()), 0o750);
        bound.close();
    }

    /// In someone else's directory: a missing one is an error and is not made.
    #[tokio::test]
    async fn binding_in_place_never_makes_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet/plugin.sock");
        let err = bind_in_place(&path, SocketOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ListenError::Io { .. }), "{err}");
        assert!(!path.parent().unwrap().exists(), "the directory was made");
        std::fs::create_dir(path.parent().unwrap()).unwrap();
        bind_in_place(&path, SocketOptions::default())
            .await
            .unwrap()
            .close();
    }

    #[tokio::test]
    async fn refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cri.sock");
        std::fs::write(&path, b"data").unwrap();
        let got = bind(&path, SocketOptions::default()).await;
        assert!(
            matches!(got, Err(ListenError::NotASocket { .. })),
            "{got:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }
}

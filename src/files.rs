//! The directories and files numa-shim writes (state dir, checkpoint, socket directories): made
//! with explicit modes whatever the umask, never written through a symlink, and tightened when
//! anyone but numa-shim could write to them.
//!
//! Owns only permission and link checks on paths it is given; it never decides what goes into
//! a file and never removes anything but the temp files it is asked to replace.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::warn;

/// Mode of directories holding numa-shim's own state (the checkpoint names every pod).
pub const PRIVATE_DIR: u32 = 0o700;
/// Mode of files holding numa-shim's own state.
pub const PRIVATE_FILE: u32 = 0o600;

/// Why a directory or file could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("directory {path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("directory {path}: not a directory")]
    NotADirectory { path: PathBuf },
    #[error("directory {path}: owned by uid {owner}, not by numa-shim's uid {uid}; refusing to write there")]
    ForeignOwner { path: PathBuf, owner: u32, uid: u32 },
}

/// Makes `path` (and missing parents) a directory with `mode`, or checks the existing one: it
/// must be a directory owned by this process's user; group or other write bits are removed
/// (with a warning). A symlinked directory is accepted when its target passes the same checks
/// (an operator may move the state to another disk).
pub fn ensure_dir(path: &Path, mode: u32) -> Result<(), FilesError> {
    let io = |action, source| FilesError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| io("create", e))?;
    let meta = fs::metadata(path).map_err(|e| io("inspect", e))?;
    if !meta.is_dir() {
        return Err(FilesError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    if let Some(uid) = own_uid() {
        if meta.uid() != uid {
            return Err(FilesError::ForeignOwner {
                path: path.to_path_buf(),
                owner: meta.uid(),
                uid,
            });
        }
    }
    let found = meta.permissions().mode() & 0o7777;
    if found & 0o022 != 0 {
        let tightened = (found & !0o7022) & (mode | 0o700);
        warn!(dir = %path.display(), found = format!("{found:o}"), now = format!("{tightened:o}"), "directory was writable by others; tightened");
        fs::set_permissions(path, Permissions::from_mode(tightened))
            .map_err(|e| io("tighten", e))?;
    }
    Ok(())
}

/// Creates `path` afresh with `mode` for writing: whatever was at the path (a leftover temp
/// file, or a symlink someone planted) is unlinked first, and the file is opened with
/// `O_CREAT | O_EXCL`, which never follows a symlink; if anything appears at the path in
/// between, the open fails instead of writing elsewhere.
pub fn create_fresh(path: &Path, mode: u32) -> std::io::Result<File> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// The effective uid of this process (the owner of `/proc/self`); `None` without /proc.
fn own_uid() -> Option<u32> {
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_with_the_mode_and_tightens_what_others_could_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b");
        ensure_dir(&path, 0o750).unwrap();
        assert_eq!(mode_of(&path) & !0o750, 0, "never more than the mode");
        fs::set_permissions(&path, Permissions::from_mode(0o777)).unwrap();
        ensure_dir(&path, 0o750).unwrap();
        assert_eq!(mode_of(&path), 0o750, "group and other write removed");
        // Read bits the operator gave are not removed, only write bits.
        fs::set_permissions(&path, Permissions::from_mode(0o755)).unwrap();
        ensure_dir(&path, 0o700).unwrap();
        assert_eq!(mode_of(&path), 0o755);
    }

    #[test]
    fn a_file_in_the_way_is_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"x").unwrap();
        let err = ensure_dir(&path, 0o700).unwrap_err();
        assert!(err.to_string().contains("f"), "{err}");
    }

    #[test]
    fn create_fresh_replaces_a_symlink_instead_of_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let path = dir.path().join("tmp");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let file = create_fresh(&path, 0o600).unwrap();
        drop(file);
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(mode_of(&path), 0o600);
    }
}

//! A small tmpfs mounted for one test (needs root, as the suites that use it run), for
//! numa-shim's state on a full or a read-only disk: `tests/e2e/state_full.rs` and
//! `tests/realruntime/state.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size at `path` (mode 0700); unmounted on drop, even when the test fails.
pub struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it: `256k`) at `path`, made first.
    pub fn mount(path: &Path, size: &str) -> Self {
        std::fs::create_dir_all(path).unwrap();
        mount(&[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size},mode=0700"),
            "tmpfs",
            path.to_str().unwrap(),
        ]);
        Self {
            path: path.to_path_buf(),
        }
    }

    /// Writes a filler file until the filesystem is full; returns its path.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        let _ = file.sync_all();
        filler
    }

    /// Mounts it again with `mode` (`ro`, `rw`).
    pub fn remount(&self, mode: &str) {
        mount(&[
            "-o",
            &format!("remount,{mode}"),
            self.path.to_str().unwrap(),
        ]);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn mount(args: &[&str]) {
    let status = Command::new("mount").args(args).status().unwrap();
    assert!(
        status.success(),
        "mount {args:?}: {status} (the test suite runs as root)"
    );
}

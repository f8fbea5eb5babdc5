//! Reads what the kernel actually applied to a process: its cpuset (cpus, mems) and CFS quota
//! from the cgroup filesystem (v1 and v2, through cgroups-rs), and `Cpus_allowed_list` from /proc.
//!
//! Used by the drift check and the real-runtime tests. Read-only: never writes a cgroup file
//! (the runtime applies cpusets). Both roots (`/sys/fs/cgroup`, `/proc`) are parameters.

use std::fs;
use std::path::{Path, PathBuf};

use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::cpuset::CpuSetController;

use crate::cpuset::CpuSet;

/// Why a cgroup reading failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no {controller} entry for pid {pid}")]
    NoController {
        path: PathBuf,
        controller: &'static str,
        pid: u32,
    },
    #[error("{path}: malformed {what}: {detail}")]
    Malformed {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("{path}: cfs quota: {detail}")]
    Quota { path: PathBuf, detail: String },
}

/// Which hierarchy holds the cpuset controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// What the kernel applied to one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub version: Version,
    /// The cgroup directory the cpuset was read from.
    pub cpuset_dir: PathBuf,
    /// `cpuset.cpus` (empty in v2 when the file is empty: inherited).
    pub cpus: CpuSet,
    /// `cpuset.mems`.
    pub mems: CpuSet,
    /// `cpu.cfs_quota_us` (v1) or the quota of `cpu.max` (v2); -1 = unlimited.
    pub cfs_quota: i64,
    /// `Cpus_allowed_list` of the process from /proc.
    pub cpus_allowed: CpuSet,
}

/// The cgroup and proc filesystems of a host.
#[derive(Debug, Clone)]
pub struct Host {
    cgroup_root: PathBuf,
    proc_root: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Self::new("/sys/fs/cgroup", "/proc")
    }
}

impl Host {
    pub fn new(cgroup_root: impl Into<PathBuf>, proc_root: impl Into<PathBuf>) -> Self {
        Self {
            cgroup_root: cgroup_root.into(),
            proc_root: proc_root.into(),
        }
    }

    /// Where the cpuset controller lives: a v1 `cpuset` mount, else the v2 unified root.
    pub fn version(&self) -> Version {
        if self.cgroup_root.join("cpuset").is_dir() {
            Version::V1
        } else {
            Version::V2
        }
    }

    /// Reads cpuset, quota and allowed CPUs of `pid`.
    pub fn read_pid(&self, pid: u32) -> Result<Reading, CgroupError> {
        let version = self.version();
        let (cpuset_dir, cpu_dir) = match version {
            Version::V1 => (self.v1_dir(pid, "cpuset")?, self.v1_dir(pid, "cpu")?),
            Version::V2 => {
                let dir = self.v2_dir(pid)?;
                (dir.clone(), dir)
            }
        };
        let v2 = version == Version::V2;
        let cpuset = CpuSetController::new(cpuset_dir.clone(), self.cgroup_root.clone(), v2);
        let cpus = read_list(&cpuset_dir.join("cpuset.cpus"))?;
        let mems = read_list(&cpuset_dir.join("cpuset.mems"))?;
        // cgroups-rs parses the same files; keep its view as a cross-check of ours.
        let via_crate: CpuSet = cpuset
            .cpuset()
            .cpus
            .iter()
            .flat_map(|&(a, b)| a as u32..=b as u32)
            .collect();
        if via_crate != cpus {
            return Err(CgroupError::Malformed {
                path: cpuset_dir.join("cpuset.cpus"),
                what: "cpu list",
                detail: format!("cgroups-rs read {via_crate}, direct read {cpus}"),
            });
        }
        let cfs_quota = CpuController::new(cpu_dir.clone(), self.cgroup_root.clone(), v2)
            .cfs_quota()
            .map_err(|e| CgroupError::Quota {
                path: cpu_dir,
                detail: e.to_string(),
            })?;
        Ok(Reading {
            version,
            cpuset_dir,
            cpus,
            mems,
            cfs_quota,
            cpus_allowed: self.cpus_allowed(pid)?,
        })
    }

    /// `Cpus_allowed_list` from /proc/<pid>/status.
    pub fn cpus_allowed(&self, pid: u32) -> Result<CpuSet, CgroupError> {
        let path = self.proc_root.join(pid.to_string()).join("status");
        let text = fs::read_to_string(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or_else(|| CgroupError::Malformed {
                path: path.clone(),
                what: "status",
                detail: "no Cpus_allowed_list".into(),
            })?;
        CpuSet::parse(line).map_err(|e| CgroupError::Malformed {
            path,
            what: "cpu list",
            detail: e.to_string(),
        })
    }

    fn proc_cgroup(&self, pid: u32) -> Result<(PathBuf, String), CgroupError> {
        let path = self.proc_root.join(pid.to_string()).join("cgroup");
        let text = fs::read_to_string(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        Ok((path, text))
    }

    fn v1_dir(&self, pid: u32, controller: &'static str) -> Result<PathBuf, CgroupError> {
        let (path, text) = self.proc_cgroup(pid)?;
        // Lines look like "4:cpu,cpuacct:/kubepods/pod.../abc".
        let rel = text
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':').skip(1);
                parts.next().zip(parts.next())
            })
            .find(|(controllers, _)| controllers.split(',').any(|c| c == controller))
            .map(|(_, rel)| rel.to_string())
            .ok_or(CgroupError::NoController {
                path,
                controller,
                pid,
            })?;
        let mount = if controller == "cpu" && !self.cgroup_root.join("cpu").exists() {
            "cpu,cpuacct"
        } else {
            controller
        };
        Ok(self
            .cgroup_root
            .join(mount)
            .join(rel.trim_start_matches('/')))
    }

    fn v2_dir(&self, pid: u32) -> Result<PathBuf, CgroupError> {
        let (path, text) = self.proc_cgroup(pid)?;
        let rel =
            text.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or(CgroupError::NoController {
                    path,
                    controller: "unified",
                    pid,
                })?;
        Ok(self.cgroup_root.join(rel.trim_start_matches('/')))
    }
}

fn read_list(path: &Path) -> Result<CpuSet, CgroupError> {
    let text = fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    CpuSet::parse(&text).map_err(|e| CgroupError::Malformed {
        path: path.to_path_buf(),
        what: "cpu list",
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn reads_v1_hierarchy() {
        let dir = tempfile::tempdir().unwrap();
        let (cg, proc) = (dir.path().join("cg"), dir.path().join("proc"));
        write(
            &proc,
            "42/cgroup",
            "7:cpuset:/kubepods/podA/c1\n4:cpu,cpuacct:/kubepods/podA/c1\n0::/\n",
        );
        write(&proc, "42/status", "Name:\tsleep\nCpus_allowed_list:\t1\n");
        write(&cg, "cpuset/kubepods/podA/c1/cpuset.cpus", "1\n");
        write(&cg, "cpuset/kubepods/podA/c1/cpuset.mems", "0\n");
        write(&cg, "cpu,cpuacct/kubepods/podA/c1/cpu.cfs_quota_us", "-1\n");
        let r = Host::new(&cg, &proc).read_pid(42).unwrap();
        assert_eq!(r.version, Version::V1);
        assert_eq!(
            (r.cpus.to_string(), r.mems.to_string(), r.cfs_quota),
            ("1".into(), "0".into(), -1)
        );
        assert_eq!(r.cpus_allowed.to_string(), "1");
    }

    #[test]
    fn reads_v2_hierarchy() {
        let dir = tempfile::tempdir().unwrap();
        let (cg, proc) = (dir.path().join("cg"), dir.path().join("proc"));
        write(&proc, "7/cgroup", "0::/kubepods.slice/c2\n");
        write(&proc, "7/status", "Cpus_allowed_list:\t0-1\n");
        write(&cg, "cgroup.controllers", "cpuset cpu\n");
        write(&cg, "kubepods.slice/c2/cpuset.cpus", "0-1\n");
        write(&cg, "kubepods.slice/c2/cpuset.mems", "0\n");
        write(&cg, "kubepods.slice/c2/cpu.max", "150000 100000\n");
        let r = Host::new(&cg, &proc).read_pid(7).unwrap();
        assert_eq!(r.version, Version::V2);
        assert_eq!((r.cpus.to_string(), r.cfs_quota), ("0-1".into(), 150_000));
    }

    #[test]
    fn missing_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = Host::new(dir.path(), dir.path())
            .read_pid(9)
            .unwrap_err()
            .to_string();
        assert!(err.contains("9/cgroup"), "{err}");
    }

    #[test]
    fn reads_this_process_on_the_real_host() {
        let host = Host::default();
        let pid = std::process::id();
        let allowed = host.cpus_allowed(pid).unwrap();
        assert!(!allowed.is_empty());
        let reading = host.read_pid(pid).unwrap();
        assert!(
            allowed.is_subset(&reading.cpus) || reading.cpus.is_empty(),
            "{reading:?}"
        );
    }
}

//! Low-level sysfs file reading for discovery: every error names the file it failed on.
//! Read-only.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;
use crate::topology::TopologyError;

/// Ids `n` of the entries named `<prefix><n>` in `dir`, ascending; empty if `dir` is absent.
pub(super) fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<u32>, TopologyError> {
    let mut ids: Vec<u32> = dir_entries(dir)?
        .into_iter()
        .filter_map(|(name, _)| name.strip_prefix(prefix)?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// (name, path) of every entry of `dir`; empty if `dir` does not exist.
pub(super) fn dir_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, TopologyError> {
    let read_err = |source| TopologyError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_err(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    Ok(out)
}

pub(super) fn read_text(path: &Path) -> Result<String, TopologyError> {
    fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The file's text, or `None` when it does not exist.
pub(super) fn read_optional(path: &Path) -> Result<Option<String>, TopologyError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TopologyError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(super) fn read_cpulist(path: &Path) -> Result<CpuSet, TopologyError> {
    parse_cpulist(path, &read_text(path)?)
}

pub(super) fn parse_cpulist(path: &Path, text: &str) -> Result<CpuSet, TopologyError> {
    CpuSet::parse(text).map_err(|source| TopologyError::CpuList {
        path: path.to_path_buf(),
        source,
    })
}

pub(super) fn read_id(path: &Path) -> Result<u32, TopologyError> {
    parse_id(path, &read_text(path)?)
}

/// A non-negative id; "-1" (unknown, seen for package and die ids in some VMs) reads as 0.
pub(super) fn parse_id(path: &Path, text: &str) -> Result<u32, TopologyError> {
    match text.trim() {
        "-1" => Ok(0),
        t => t
            .parse()
            .map_err(|_| malformed(path, "an unsigned integer", text)),
    }
}

pub(super) fn malformed(path: &Path, expected: &'static str, content: &str) -> TopologyError {
    TopologyError::Malformed {
        path: path.to_path_buf(),
        expected,
        content: content.trim().to_string(),
    }
}

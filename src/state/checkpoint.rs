//! A versioned, checksummed JSON checkpoint written atomically: temp file in the same directory,
//! fsync, rename over the old file, fsync the directory. A torn or edited file is detected by
//! its checksum and reported as corrupt, never half-loaded.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Why the checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state dir {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {path}: write failed: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {path}: read failed: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {path}: corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("checkpoint {path}: format version {found} is not supported (this build reads {FORMAT_VERSION})")]
    Version { path: PathBuf, found: u32 },
    #[error("checkpoint payload cannot be encoded: {0}")]
    Encode(serde_json::Error),
}

#[derive(Serialize)]
struct Envelope<'a> {
    version: u32,
    checksum: String,
    payload: &'a RawValue,
}

#[derive(Deserialize)]
struct EnvelopeIn<'a> {
    version: u32,
    checksum: String,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// One checkpoint file in a state directory.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    path: PathBuf,
}

impl Checkpoint {
    /// The checkpoint `name` inside `state_dir` (created on first write).
    pub fn new(state_dir: &Path, name: &str) -> Self {
        Self {
            path: state_dir.join(name),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `payload` atomically: readers see the old or the new file, never a mix.
    pub fn write<T: Serialize>(&self, payload: &T) -> Result<(), StateError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(|source| StateError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let raw = serde_json::to_string(payload).map_err(StateError::Encode)?;
        let raw = RawValue::from_string(raw).map_err(StateError::Encode)?;
        let envelope = Envelope {
            version: FORMAT_VERSION,
            checksum: checksum(raw.get()),
            payload: &raw,
        };
        let bytes = serde_json::to_vec(&envelope).map_err(StateError::Encode)?;

        let tmp = self.path.with_extension("tmp");
        let werr = |source| StateError::Write {
            path: tmp.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(werr)?;
        file.write_all(&bytes).map_err(werr)?;
        file.sync_all().map_err(werr)?;
        drop(file);
        fs::rename(&tmp, &self.path).map_err(|source| StateError::Write {
            path: self.path.clone(),
            source,
        })?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| StateError::Dir {
                path: dir.to_path_buf(),
                source,
            })
    }

    /// Reads the checkpoint: `Ok(None)` when there is none, `Err(Corrupt | Version)` when it
    /// cannot be trusted (the caller then rebuilds from the runtime).
    pub fn read<T: DeserializeOwned>(&self) -> Result<Option<T>, StateError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Read {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let corrupt = |reason: String| StateError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let envelope: EnvelopeIn<'_> =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if envelope.version != FORMAT_VERSION {
            return Err(StateError::Version {
                path: self.path.clone(),
                found: envelope.version,
            });
        }
        let want = checksum(envelope.payload.get());
        if envelope.checksum != want {
            return Err(corrupt(format!(
                "checksum {} does not match content ({want})",
                envelope.checksum
            )));
        }
        serde_json::from_str(envelope.payload.get())
            .map(Some)
            .map_err(|e| corrupt(e.to_string()))
    }

    /// Removes the checkpoint (and a leftover temp file). Missing files are fine.
    pub fn remove(&self) -> Result<(), StateError> {
        for path in [self.path.clone(), self.path.with_extension("tmp")] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StateError::Write { path, source }),
            }
        }
        Ok(())
    }
}

/// FNV-1a 64 of the payload text, as 16 hex digits prefixed with the algorithm.
fn checksum(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("fnv1a64:{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sample() -> BTreeMap<String, Vec<u32>> {
        BTreeMap::from([
            ("pod-a".to_string(), vec![1, 2]),
            ("pod-b".to_string(), vec![3]),
        ])
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(&dir.path().join("nested"), "state.json");
        assert!(cp.read::<BTreeMap<String, Vec<u32>>>().unwrap().is_none());
        cp.write(&sample()).unwrap();
        assert_eq!(
            cp.read::<BTreeMap<String, Vec<u32>>>().unwrap(),
            Some(sample())
        );
        assert!(
            !cp.path().with_extension("tmp").exists(),
            "temp file left behind"
        );
    }

    #[test]
    fn edited_payload_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "state.json");
        cp.write(&sample()).unwrap();
        let text = fs::read_to_string(cp.path())
            .unwrap()
            .replace("[1,2]", "[1,9]");
        fs::write(cp.path(), text).unwrap();
        let err = cp.read::<BTreeMap<String, Vec<u32>>>().unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[test]
    fn truncated_file_is_corrupt_and_future_version_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "state.json");
        cp.write(&sample()).unwrap();
        let full = fs::read(cp.path()).unwrap();
        fs::write(cp.path(), &full[..full.len() / 2]).unwrap();
        assert!(matches!(
            cp.read::<BTreeMap<String, Vec<u32>>>(),
            Err(StateError::Corrupt { .. })
        ));

        let text = String::from_utf8(full)
            .unwrap()
            .replacen("\"version\":1", "\"version\":7", 1);
        fs::write(cp.path(), text).unwrap();
        let err = cp.read::<BTreeMap<String, Vec<u32>>>().unwrap_err();
        assert!(matches!(err, StateError::Version { found: 7, .. }), "{err}");
    }

    #[test]
    fn overwrite_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "state.json");
        cp.write(&sample()).unwrap();
        cp.write(&BTreeMap::<String, Vec<u32>>::new()).unwrap();
        assert_eq!(
            cp.read::<BTreeMap<String, Vec<u32>>>().unwrap(),
            Some(BTreeMap::new())
        );
        cp.remove().unwrap();
        assert!(cp.read::<BTreeMap<String, Vec<u32>>>().unwrap().is_none());
    }
}

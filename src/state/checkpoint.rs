//! A versioned, checksummed JSON checkpoint, written crash-safely at the cost of one data sync.
//!
//! The file is text: a header page naming the layout, then two slots of equal size, each holding
//! one envelope (`version`, `seq`, `checksum` over all three and the payload, `payload`) padded
//! with spaces. A write goes to the slot that does not hold the newest envelope, in place, and is
//! made durable with `fdatasync`: the blocks already exist, so no metadata changes, no rename and
//! no directory sync are needed, and on a filesystem that overwrites in place (ext4, XFS without
//! shared extents, tmpfs) a full disk cannot refuse it. A write cut short by a crash leaves that
//! slot failing its checksum and the other slot whole; the reader takes the valid slot with the
//! highest `seq`. So a reader sees the last write that returned, or one that had begun when the
//! machine stopped, never a mix. A write that fails blanks its slot again (best effort), so a
//! refused decision does not come back as the newest state.
//!
//! The first write of a process (and any write that no longer fits a slot, or that finds the
//! file replaced) makes a new file instead: temp file in the same directory, fsync, rename over
//! the old file, fsync the directory. That path needs free space, so a full state disk refuses
//! it. Slots are whole pages, so a torn sector never spans two of them. A file in the format of
//! earlier builds (one bare envelope) is read, and replaced by the first write.
//!
//! The checkpoint names every pod, so the directory is 0700 and the file 0600 whatever the
//! umask, and nothing is ever written through a symlink: the temp file is created with
//! `O_CREAT | O_EXCL` after whatever sat at its path was unlinked, `rename` replaces a link at
//! the checkpoint's path instead of following it (see `crate::files`), and a write in place goes
//! only into the very file this process made: it holds that file open (read-only, so a
//! read-only remount is not blocked), reopens it through `/proc/self/fd` for each write, and
//! writes only while the path still names it at its full size.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The header page: this prefix, the slot size in bytes, then spaces and a newline.
const HEADER_PREFIX: &str = "numa-shim checkpoint, two slots, newest valid seq wins; slot bytes ";
/// Header and slots are whole pages of this size.
const PAGE: usize = 4096;
/// The smallest slot; a new file's slots hold at least twice the payload written into it.
const MIN_SLOT: usize = 4 * PAGE;

/// Why the checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state dir {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state dir: {0}")]
    Unsafe(#[from] crate::files::FilesError),
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

impl StateError {
    /// Whether the filesystem is out of space or quota (ENOSPC, EDQUOT): waiting may fix it.
    pub fn is_full(&self) -> bool {
        let source = match self {
            Self::Dir { source, .. } | Self::Write { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    version: u32,
    seq: u64,
    checksum: String,
    payload: &'a RawValue,
}

#[derive(Deserialize)]
struct EnvelopeIn<'a> {
    version: u32,
    /// Absent in the bare envelope of earlier builds.
    #[serde(default)]
    seq: Option<u64>,
    checksum: String,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// One envelope, checked.
enum Opened<'a> {
    /// Its `seq` (none in earlier builds' files) and payload text.
    Valid(Option<u64>, &'a str),
    /// A format version this build does not read.
    Version(u32),
    /// Torn or edited: why.
    Damaged(String),
}

/// Checks one envelope's version and checksum.
fn open_envelope(bytes: &[u8]) -> Opened<'_> {
    let envelope: EnvelopeIn<'_> = match serde_json::from_slice(bytes) {
        Ok(envelope) => envelope,
        Err(e) => return Opened::Damaged(e.to_string()),
    };
    if envelope.version != FORMAT_VERSION {
        return Opened::Version(envelope.version);
    }
    let payload = envelope.payload.get();
    let want = match envelope.seq {
        Some(seq) => sealed_checksum(envelope.version, seq, payload),
        None => checksum(&[payload.as_bytes()]),
    };
    if envelope.checksum != want {
        return Opened::Damaged(format!(
            "checksum {} does not match content ({want})",
            envelope.checksum
        ));
    }
    Opened::Valid(envelope.seq, payload)
}

/// A slot's checksum: over `version:seq:payload`.
fn sealed_checksum(version: u32, seq: u64, payload: &str) -> String {
    checksum(&[format!("{version}:{seq}:").as_bytes(), payload.as_bytes()])
}

/// The file this process made and writes in place.
#[derive(Debug)]
struct Slots {
    /// That file, open read-only: its inode cannot be freed and reused while this is held.
    file: File,
    slot_bytes: usize,
    /// The slot the next write goes to (the other one holds the newest envelope).
    next: usize,
    /// The newest envelope's `seq`.
    seq: u64,
}

/// One checkpoint file in a state directory. Clones share what they know of the file; writes
/// are one at a time (the store's writer).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    path: PathBuf,
    slots: Arc<Mutex<Option<Slots>>>,
}

impl Checkpoint {
    /// The checkpoint `name` inside `state_dir` (created on first write).
    pub fn new(state_dir: &Path, name: &str) -> Self {
        Self {
            path: state_dir.join(name),
            slots: Arc::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `payload` durably: once this returns, a reader (after any crash) sees it or a
    /// later write, never an earlier one and never a mix.
    pub fn write<T: Serialize>(&self, payload: &T) -> Result<(), StateError> {
        let raw = serde_json::to_string(payload).map_err(StateError::Encode)?;
        let raw = RawValue::from_string(raw).map_err(StateError::Encode)?;
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seq = slots.as_ref().map_or(1, |s| s.seq + 1);
        let envelope = envelope(seq, &raw)?;
        if let Some(s) = slots.as_mut() {
            if envelope.len() < s.slot_bytes {
                let written =
                    self.write_in_place(s, &envelope)
                        .map_err(|source| StateError::Write {
                            path: self.path.clone(),
                            source,
                        })?;
                if written {
                    s.seq = seq;
                    s.next = 1 - s.next;
                    return Ok(());
                }
            }
        }
        *slots = self.write_new_file(seq, &envelope)?;
        Ok(())
    }

    /// Overwrites the free slot of the file this process made and syncs its data. `Ok(false)`
    /// when that file is no longer at the path (removed or replaced): the caller makes a new one.
    fn write_in_place(&self, slots: &Slots, envelope: &[u8]) -> std::io::Result<bool> {
        let held = slots.file.metadata()?;
        if held.len() != file_len(slots.slot_bytes) {
            return Ok(false);
        }
        match fs::symlink_metadata(&self.path) {
            Ok(m) if m.is_file() && m.dev() == held.dev() && m.ino() == held.ino() => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        }
        // The held inode itself, never whatever the path names by the time of the open.
        let file = OpenOptions::new().write(true).open(fd_path(&slots.file))?;
        let at = slot_offset(slots.next, slots.slot_bytes);
        let written = file
            .write_all_at(&padded(envelope, slots.slot_bytes), at)
            .and_then(|()| file.sync_data());
        if let Err(e) = written {
            // The envelope may sit in the page cache and reach the disk later: blank the slot
            // again so a refused decision does not read back as the newest state.
            let _ = file
                .write_all_at(&padded(b"", slots.slot_bytes), at)
                .and_then(|()| file.sync_data());
            return Err(e);
        }
        Ok(true)
    }

    /// Makes a new file with `envelope` in slot 0 and an empty slot 1, atomically.
    fn write_new_file(&self, seq: u64, envelope: &[u8]) -> Result<Option<Slots>, StateError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        crate::files::ensure_dir(dir, crate::files::PRIVATE_DIR)?;
        let slot_bytes = MIN_SLOT.max((2 * envelope.len()).next_multiple_of(PAGE));
        let mut bytes = padded(format!("{HEADER_PREFIX}{slot_bytes}").as_bytes(), PAGE);
        bytes.extend(padded(envelope, slot_bytes));
        bytes.extend(padded(b"", slot_bytes));

        let tmp = self.path.with_extension("tmp");
        let file = match write_synced(&tmp, &bytes) {
            Ok(file) => file,
            Err(source) => {
                // A half-written temp file on a full disk would hold on to the space it took.
                let _ = fs::remove_file(&tmp);
                return Err(StateError::Write { path: tmp, source });
            }
        };
        if let Err(source) = fs::rename(&tmp, &self.path) {
            let _ = fs::remove_file(&tmp);
            return Err(StateError::Write {
                path: self.path.clone(),
                source,
            });
        }
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| StateError::Dir {
                path: dir.to_path_buf(),
                source,
            })?;
        // Held read-only for the writes in place; without /proc the next write makes a new file.
        let held = File::open(fd_path(&file)).ok();
        Ok(held.map(|file| Slots {
            file,
            slot_bytes,
            next: 1,
            seq,
        }))
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
        let payload = if bytes.starts_with(HEADER_PREFIX.as_bytes()) {
            self.newest_slot(&bytes)?
        } else {
            // The bare envelope of earlier builds.
            match open_envelope(&bytes) {
                Opened::Valid(_, payload) => payload,
                Opened::Version(found) => return Err(self.version(found)),
                Opened::Damaged(reason) => return Err(self.corrupt(reason)),
            }
        };
        serde_json::from_str(payload)
            .map(Some)
            .map_err(|e| self.corrupt(e.to_string()))
    }

    /// The payload of the valid slot with the highest `seq`.
    fn newest_slot<'a>(&self, bytes: &'a [u8]) -> Result<&'a str, StateError> {
        let corrupt = |reason| self.corrupt(reason);
        let header = std::str::from_utf8(&bytes[..PAGE.min(bytes.len())])
            .map_err(|e| corrupt(format!("header: {e}")))?;
        let slot_bytes: usize = header[HEADER_PREFIX.len()..]
            .trim_end()
            .parse()
            .map_err(|_| corrupt(format!("header: {:?}", header.trim_end())))?;
        if slot_bytes == 0
            || !slot_bytes.is_multiple_of(PAGE)
            || slot_bytes > bytes.len()
            || bytes.len() as u64 != file_len(slot_bytes)
        {
            return Err(corrupt(format!(
                "{} bytes, its header says slots of {slot_bytes}",
                bytes.len()
            )));
        }
        let mut newest: Option<(u64, &str)> = None;
        let mut reasons = Vec::new();
        let mut other_version = None;
        for slot in 0..2 {
            let start = slot_offset(slot, slot_bytes) as usize;
            let text = bytes[start..start + slot_bytes].trim_ascii_end();
            if text.is_empty() {
                reasons.push(format!("slot {slot}: empty"));
                continue;
            }
            match open_envelope(text) {
                Opened::Valid(Some(seq), payload) if newest.is_none_or(|(s, _)| seq > s) => {
                    newest = Some((seq, payload));
                }
                Opened::Valid(Some(_), _) => {}
                Opened::Valid(None, _) => reasons.push(format!("slot {slot}: no seq")),
                Opened::Version(found) => {
                    other_version = Some(found);
                    reasons.push(format!("slot {slot}: format version {found}"));
                }
                Opened::Damaged(reason) => reasons.push(format!("slot {slot}: {reason}")),
            }
        }
        if let (None, Some(found)) = (newest, other_version) {
            return Err(self.version(found));
        }
        match newest {
            Some((_, payload)) => {
                if !reasons.is_empty() {
                    tracing::info!(path = %self.path.display(), skipped = %reasons.join("; "),
                        "checkpoint read from its newest valid slot");
                }
                Ok(payload)
            }
            None => Err(corrupt(reasons.join("; "))),
        }
    }

    fn corrupt(&self, reason: String) -> StateError {
        StateError::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }

    fn version(&self, found: u32) -> StateError {
        StateError::Version {
            path: self.path.clone(),
            found,
        }
    }

    /// Removes the checkpoint (and a leftover temp file). Missing files are fine.
    pub fn remove(&self) -> Result<(), StateError> {
        *self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
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

/// The envelope of `payload` as the `seq`-th write, as JSON bytes.
fn envelope(seq: u64, payload: &RawValue) -> Result<Vec<u8>, StateError> {
    let envelope = Envelope {
        version: FORMAT_VERSION,
        seq,
        checksum: sealed_checksum(FORMAT_VERSION, seq, payload.get()),
        payload,
    };
    serde_json::to_vec(&envelope).map_err(StateError::Encode)
}

fn slot_offset(slot: usize, slot_bytes: usize) -> u64 {
    (PAGE + slot * slot_bytes) as u64
}

/// The length of a file with slots of `slot_bytes` (no overflow for any header value).
fn file_len(slot_bytes: usize) -> u64 {
    (slot_bytes as u64)
        .saturating_mul(2)
        .saturating_add(PAGE as u64)
}

/// `/proc/self/fd/N` of an open file: opening it opens that very inode.
fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// `text` padded with spaces to `len` bytes, the last one a newline (`text` is shorter).
fn padded(text: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(text);
    out.resize(len - 1, b' ');
    out.push(b'\n');
    out
}

/// Writes `bytes` to a freshly created owner-only file at `path` and syncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    let mut file = crate::files::create_fresh(path, crate::files::PRIVATE_FILE)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(file)
}

/// FNV-1a 64 of `parts` one after another, as 16 hex digits prefixed with the algorithm.
fn checksum(parts: &[&[u8]]) -> String {
    let hash = parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("fnv1a64:{hash:016x}")
}

#[cfg(test)]
mod tests;

use super::*;
use std::collections::BTreeMap;

/// A checkpoint `state.json` in a new temporary directory (kept while the guard lives).
fn fresh() -> (tempfile::TempDir, Checkpoint) {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "state.json");
    (dir, cp)
}

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
    let (_dir, cp) = fresh();
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
    let (_dir, cp) = fresh();
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
    let (_dir, cp) = fresh();
    cp.write(&sample()).unwrap();
    cp.write(&BTreeMap::<String, Vec<u32>>::new()).unwrap();
    assert_eq!(
        cp.read::<BTreeMap<String, Vec<u32>>>().unwrap(),
        Some(BTreeMap::new())
    );
    cp.remove().unwrap();
    assert!(cp.read::<BTreeMap<String, Vec<u32>>>().unwrap().is_none());
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// A symlink planted where the temp file goes must not make numa-shim (root) write through it.
#[test]
fn a_symlink_planted_at_the_temp_path_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"precious").unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let cp = Checkpoint::new(&state, "state.json");
    std::os::unix::fs::symlink(&victim, cp.path().with_extension("tmp")).unwrap();
    cp.write(&sample()).unwrap();
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"precious",
        "target overwritten"
    );
    assert_eq!(
        cp.read::<BTreeMap<String, Vec<u32>>>().unwrap(),
        Some(sample())
    );
    assert!(!fs::symlink_metadata(cp.path()).unwrap().is_symlink());
}

/// A symlink planted at the checkpoint's own path is replaced, not written through.
#[test]
fn a_symlink_planted_at_the_checkpoint_path_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"precious").unwrap();
    let cp = Checkpoint::new(dir.path(), "state.json");
    std::os::unix::fs::symlink(&victim, cp.path()).unwrap();
    cp.write(&sample()).unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert!(!fs::symlink_metadata(cp.path()).unwrap().is_symlink());
    assert_eq!(mode(cp.path()), 0o600);
}

/// The checkpoint names every pod: owner-only, in an owner-only directory, whatever the umask.
#[test]
fn checkpoint_is_0600_in_a_0700_directory() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/state");
    let cp = Checkpoint::new(&state, "state.json");
    cp.write(&sample()).unwrap();
    assert_eq!(mode(cp.path()), 0o600);
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&dir.path().join("a")), 0o700, "created parents too");
}

/// A state directory others may write to (an old install under umask 000) is tightened.
#[test]
fn a_state_directory_others_can_write_is_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    fs::set_permissions(&state, fs::Permissions::from_mode(0o777)).unwrap();
    let cp = Checkpoint::new(&state, "state.json");
    cp.write(&sample()).unwrap();
    assert_eq!(mode(&state), 0o700);
}

/// A failed write (here: the temp path is a directory) leaves no half-written temp file behind
/// and says which path failed.
#[test]
fn a_failed_write_names_the_path() {
    let (_dir, cp) = fresh();
    fs::create_dir(cp.path().with_extension("tmp")).unwrap();
    fs::write(cp.path().with_extension("tmp").join("x"), b"x").unwrap();
    let err = cp.write(&sample()).unwrap_err();
    assert!(
        err.to_string().contains("state.tmp"),
        "error names the temp file: {err}"
    );
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path).unwrap().ino()
}

fn numbers(n: u32) -> BTreeMap<String, Vec<u32>> {
    BTreeMap::from([(format!("pod-{n}"), vec![n])])
}

/// After the first write of a process, a write goes into the same file, in place: no new file,
/// no rename (the inode stays), and the newest write is what is read.
#[test]
fn later_writes_go_in_place() {
    let (dir, cp) = fresh();
    cp.write(&numbers(0)).unwrap();
    let first = inode(cp.path());
    let len = fs::metadata(cp.path()).unwrap().len();
    for n in 1..6 {
        cp.write(&numbers(n)).unwrap();
        assert_eq!(inode(cp.path()), first, "write {n} made a new file");
        assert_eq!(fs::metadata(cp.path()).unwrap().len(), len);
        assert_eq!(cp.read().unwrap(), Some(numbers(n)));
    }
    // Another process (a fresh Checkpoint) reads the same, and its first write makes a new file.
    let again = Checkpoint::new(dir.path(), "state.json");
    assert_eq!(again.read().unwrap(), Some(numbers(5)));
    again.write(&numbers(6)).unwrap();
    assert_ne!(inode(cp.path()), first);
    assert_eq!(again.read().unwrap(), Some(numbers(6)));
}

/// A write cut short anywhere (any prefix, or any set of its sectors, reaching the disk) reads
/// as the write before it or as itself, never as an error or a mix.
#[test]
fn a_torn_write_reads_as_the_one_before_or_itself() {
    let (dir, cp) = fresh();
    cp.write(&numbers(1)).unwrap();
    cp.write(&sample()).unwrap(); // slot 1
    let before = fs::read(cp.path()).unwrap();
    let (slot_bytes, next) = {
        let slots = cp.slots.lock().unwrap();
        let s = slots.as_ref().unwrap();
        (s.slot_bytes, s.next)
    };
    assert_eq!(next, 0, "the third write goes to slot 0");
    let newer = numbers(3);
    let raw = RawValue::from_string(serde_json::to_string(&newer).unwrap()).unwrap();
    let slot = padded(&envelope(3, &raw).unwrap(), slot_bytes);
    let at = slot_offset(0, slot_bytes) as usize;
    let sectors = slot_bytes / 512;
    let mut cuts: Vec<Vec<usize>> = (0..=sectors).map(|k| (0..k).collect()).collect();
    cuts.extend((0..sectors).map(|k| vec![k]));
    cuts.push((0..sectors).step_by(2).collect());
    cuts.push((1..sectors).collect());
    for landed in cuts {
        let mut torn = before.clone();
        for s in &landed {
            torn[at + s * 512..at + (s + 1) * 512].copy_from_slice(&slot[s * 512..(s + 1) * 512]);
        }
        fs::write(cp.path(), &torn).unwrap();
        let got: BTreeMap<String, Vec<u32>> = Checkpoint::new(dir.path(), "state.json")
            .read()
            .unwrap_or_else(|e| panic!("sectors {landed:?}: {e}"))
            .unwrap();
        assert!(
            got == sample() || got == newer,
            "sectors {landed:?}: {got:?}"
        );
    }
    // Both slots damaged: corrupt, with each slot's reason.
    let mut both = before.clone();
    let second = slot_offset(1, slot_bytes) as usize;
    both[at + 10] = b'#';
    both[second + 10] = b'#';
    fs::write(cp.path(), &both).unwrap();
    let err = cp.read::<BTreeMap<String, Vec<u32>>>().unwrap_err();
    assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains("slot 0") && err.to_string().contains("slot 1"),
        "{err}"
    );
}

/// A payload that no longer fits its slot gets a new, larger file; writes then go in place again.
#[test]
fn a_payload_outgrowing_its_slot_gets_a_new_file() {
    let (_dir, cp) = fresh();
    cp.write(&numbers(1)).unwrap();
    let small = inode(cp.path());
    let big: BTreeMap<String, Vec<u32>> =
        (0..4000).map(|n| (format!("pod-{n}"), vec![n])).collect();
    cp.write(&big).unwrap();
    let grown = inode(cp.path());
    assert_ne!(grown, small);
    assert_eq!(cp.read().unwrap(), Some(big.clone()));
    cp.write(&numbers(2)).unwrap();
    assert_eq!(inode(cp.path()), grown);
    assert_eq!(cp.read().unwrap(), Some(numbers(2)));
}

/// The bare envelope earlier builds wrote is read, and the first write replaces it.
#[test]
fn a_checkpoint_of_earlier_builds_is_read_and_replaced() {
    let (_dir, cp) = fresh();
    let payload = serde_json::to_string(&sample()).unwrap();
    let old = format!(
        "{{\"version\":1,\"checksum\":\"{}\",\"payload\":{payload}}}",
        checksum(&[payload.as_bytes()])
    );
    fs::write(cp.path(), &old).unwrap();
    assert_eq!(cp.read().unwrap(), Some(sample()));
    fs::write(cp.path(), old.replace("[1,2]", "[1,9]")).unwrap();
    assert!(matches!(
        cp.read::<BTreeMap<String, Vec<u32>>>(),
        Err(StateError::Corrupt { .. })
    ));
    fs::write(cp.path(), &old).unwrap();
    cp.write(&numbers(1)).unwrap();
    assert!(fs::read(cp.path())
        .unwrap()
        .starts_with(HEADER_PREFIX.as_bytes()));
    assert_eq!(cp.read().unwrap(), Some(numbers(1)));
}

/// A file put at the path by someone else (here: a symlink to a victim, then a plain file) is
/// never written into: the next write makes a new file of its own.
#[test]
fn a_file_replaced_behind_its_back_is_not_written_into() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"precious").unwrap();
    let state = dir.path().join("state");
    let cp = Checkpoint::new(&state, "state.json");
    cp.write(&numbers(1)).unwrap();
    fs::remove_file(cp.path()).unwrap();
    std::os::unix::fs::symlink(&victim, cp.path()).unwrap();
    cp.write(&numbers(2)).unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"precious");
    assert!(!fs::symlink_metadata(cp.path()).unwrap().is_symlink());
    assert_eq!(cp.read().unwrap(), Some(numbers(2)));

    let theirs = dir.path().join("theirs");
    fs::write(&theirs, b"theirs").unwrap();
    fs::rename(&theirs, cp.path()).unwrap();
    cp.write(&numbers(3)).unwrap();
    assert_eq!(cp.read().unwrap(), Some(numbers(3)));
    assert_eq!(mode(cp.path()), 0o600);
}

/// A header naming an absurd slot size (here: one that overflows `2 * slot_bytes`) is corrupt,
/// never a panic, and so are a short file and a header without a number.
#[test]
fn a_bad_header_is_corrupt_not_a_panic() {
    let (_dir, cp) = fresh();
    for size in [
        "9223372036854775808",
        "18446744073709551615",
        "0",
        "4095",
        "abc",
        "",
    ] {
        for len in [0, PAGE, 2 * PAGE, 3 * PAGE] {
            let mut bytes = padded(format!("{HEADER_PREFIX}{size}").as_bytes(), PAGE);
            bytes.resize(len.max(HEADER_PREFIX.len()), b' ');
            fs::write(cp.path(), &bytes).unwrap();
            let err = cp.read::<BTreeMap<String, Vec<u32>>>().unwrap_err();
            assert!(
                matches!(err, StateError::Corrupt { .. }),
                "{size} {len}: {err}"
            );
        }
    }
}

/// An older slot in a format this build does not read does not hide the newer, valid one.
#[test]
fn an_unreadable_older_slot_does_not_hide_the_newer_one() {
    let (_dir, cp) = fresh();
    cp.write(&numbers(1)).unwrap(); // slot 0
    cp.write(&numbers(2)).unwrap(); // slot 1
    let text = fs::read_to_string(cp.path())
        .unwrap()
        .replacen("\"version\":1", "\"version\":7", 1);
    fs::write(cp.path(), text).unwrap();
    assert_eq!(cp.read().unwrap(), Some(numbers(2)));
}

/// A file cut short behind numa-shim's back (here: to nothing) is never written into (that would
/// leave it without its header, sparse and unreadable): the next write makes a new file.
#[test]
fn a_truncated_file_gets_a_new_one() {
    let (_dir, cp) = fresh();
    cp.write(&numbers(1)).unwrap();
    let file = fs::OpenOptions::new().write(true).open(cp.path()).unwrap();
    file.set_len(0).unwrap();
    drop(file);
    cp.write(&numbers(2)).unwrap();
    assert_eq!(cp.read().unwrap(), Some(numbers(2)));
    cp.write(&numbers(3)).unwrap();
    assert_eq!(cp.read().unwrap(), Some(numbers(3)));
}

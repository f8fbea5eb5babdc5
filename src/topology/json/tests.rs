use std::path::{Path, PathBuf};

use super::*;
use crate::topology::SyntheticSpec;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/topologies")
}

/// One row of the fixtures README table: file name and header counters (None = "-").
struct Row {
    file: String,
    header: [Option<usize>; 5],
}

fn readme_rows() -> Vec<Row> {
    let readme = std::fs::read_to_string(fixtures_dir().join("README.md")).unwrap();
    readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let file = cells.get(1)?.strip_suffix(".json")?;
            let counts: Vec<Option<usize>> =
                cells.get(3)?.split('/').map(|c| c.parse().ok()).collect();
            Some(Row {
                file: format!("{file}.json"),
                header: counts.try_into().ok()?,
            })
        })
        .collect()
}

#[test]
fn every_fixture_loads_and_matches_the_readme_table() {
    let rows = readme_rows();
    let mut files: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 25);
    assert_eq!(rows.len(), files.len(), "one README row per fixture");
    for row in &rows {
        let t = Topology::load(&fixtures_dir().join(&row.file)).unwrap();
        let counted = [
            t.cpus.len(),
            t.num_cores(),
            t.num_sockets(),
            t.num_numa_nodes(),
            t.num_uncore_caches(),
        ];
        for (i, (header, got)) in row.header.iter().zip(counted).enumerate() {
            let Some(want) = *header else { continue };
            let known_anomaly = match row.file.as_str() {
                // README: lists 64 CPUs, header says 128.
                "topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore.json" => i == 0,
                // README: 96 distinct core ids, header says 192.
                "topoDualSocketMultiNumaPerSocketUncore.json" => i == 1,
                _ => false,
            };
            if known_anomaly {
                assert_ne!(got, want, "{} counter {i}: anomaly gone?", row.file);
            } else {
                assert_eq!(got, want, "{} counter {i}", row.file);
            }
        }
        // No numa block in the fixtures: nodes derived from the CPUs, memory unknown.
        assert_eq!(t.numa.len(), t.num_numa_nodes(), "{}", row.file);
        assert!(t.numa.iter().all(|n| n.memory == 0), "{}", row.file);
    }
}

#[test]
fn fixtures_round_trip_and_keep_numa_absent() {
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let t = Topology::load(&path).unwrap();
        let text = t.to_json().unwrap();
        assert!(!text.contains("\"numa\": ["), "{}", path.display());
        assert_eq!(
            Topology::from_json_str(&text).unwrap(),
            t,
            "{}",
            path.display()
        );
    }
}

#[test]
fn spec_example_reads_quantities() {
    let text = r#"{
      "cpus": [ {"id": 1, "core": 1, "socket": 0, "numa": 1, "uncore": 0},
                {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0} ],
      "numa": [ {"id": 1, "memory": "32Gi", "hugepages": {"2Mi": "512Mi"}, "distances": [21, 10]},
                {"id": 0, "memory": "64Gi", "hugepages": {"2Mi": "0", "1Gi": "0"}, "distances": [10, 21]} ]
    }"#;
    let t = Topology::from_json_str(text).unwrap();
    assert_eq!(t.cpus.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(t.numa[0].id, 0);
    assert_eq!(t.numa[0].memory, 64 << 30);
    assert_eq!(
        t.numa[0].hugepages,
        BTreeMap::from([(2 << 20, 0), (1 << 30, 0)])
    );
    // Listed 1 then 0: distance vectors are indexed by node id, not by listing order.
    assert_eq!(t.numa[0].distances, [10, 21]);
    assert_eq!(t.numa[1].distances, [21, 10]);
    assert_eq!(t.numa[1].hugepages[&(2 << 20)], 512 << 20);
}

#[test]
fn writes_binary_quantities_and_hugepages_by_size() {
    let mut spec = SyntheticSpec::new(2, 1, 2, 2, 1);
    spec.memory_per_numa = 6_252_756 * 1024;
    spec.hugepages_per_numa = BTreeMap::from([(1 << 30, 2 << 30), (2 << 20, 0)]);
    let t = spec.build().unwrap();
    let text = t.to_json().unwrap();
    let want_node =
        r#"{"id":0,"memory":"6252756Ki","hugepages":{"2Mi":"0","1Gi":"2Gi"},"distances":[10,21]}"#;
    assert!(text.contains(want_node), "{text}");
    assert!(
        text.contains(r#"{"id":5,"core":1,"socket":0,"numa":0,"uncore":0}"#),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2 + 8 + 2 + 2 + 2, "{text}");
    assert_eq!(Topology::from_json_str(&text).unwrap(), t);
}

#[test]
fn die_is_written_only_when_set() {
    let mut t = SyntheticSpec::new(1, 1, 2, 1, 1).build().unwrap();
    t.cpus[1].die = 3;
    let text = t.to_json().unwrap();
    assert!(
        text.contains(r#""die":3"#) && text.matches("die").count() == 1,
        "{text}"
    );
    assert_eq!(Topology::from_json_str(&text).unwrap(), t);
}

#[test]
fn format_bytes_picks_the_largest_exact_unit() {
    for (bytes, want) in [
        (0, "0"),
        (1000, "1000"),
        (1024, "1Ki"),
        (1536, "1536"),
        (64 << 30, "64Gi"),
        (6_252_756 * 1024, "6252756Ki"),
        (3 << 40, "3Ti"),
        ((1 << 30) + (1 << 20), "1025Mi"),
    ] {
        assert_eq!(format_binary(bytes), want);
        assert_eq!(Quantity::parse(want).unwrap().value().unsigned_abs(), bytes);
    }
}

#[test]
fn accepts_numbers_and_decimal_quantities_for_memory() {
    let text = r#"{"cpus": [{"id": 0, "core": 0, "socket": 0}],
                   "numa": [{"id": 0, "memory": 1000000, "hugepages": {"2097152": 4194304}}]}"#;
    let t = Topology::from_json_str(text).unwrap();
    assert_eq!(t.numa[0].memory, 1_000_000);
    assert_eq!(t.numa[0].hugepages[&(2 << 20)], 4 << 20);
    assert!(t.numa[0].distances.is_empty());
}

#[test]
fn refuses_bad_documents_with_reason() {
    let cpu0 = r#"{"id": 0, "core": 0, "socket": 0}"#;
    for (text, reason) in [
        (r#"{"cpus": []}"#.to_string(), "no cpu"),
        (
            format!(r#"{{"cpus": [{cpu0}, {cpu0}]}}"#),
            "cpu 0 is listed twice",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 1}}]}}"#),
            "cpu 0 is on numa node 0, which is not in the numa list",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0}}, {{"id": 0}}]}}"#),
            "numa node 0 is listed twice",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "distances": [10, 20]}}]}}"#),
            "numa node 0 has 2 distances",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "memory": "lots"}}]}}"#),
            "memory",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "memory": "1.5"}}]}}"#),
            "not a whole",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "memory": "-1Gi"}}]}}"#),
            "not a whole",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "hugepages": {{"0": "0"}}}}]}}"#),
            "hugepages \"0\": a hugepage size must be positive",
        ),
        (
            format!(r#"{{"cpus": [{cpu0}], "numa": [{{"id": 0, "hugepages": {{"2Mi": "x"}}}}]}}"#),
            "hugepages",
        ),
        (
            r#"{"cpus": [{"id": 0, "socket": 0}]}"#.to_string(),
            "missing field `core`",
        ),
        ("not json".to_string(), "topology json <string>"),
    ] {
        let err = Topology::from_json_str(&text).unwrap_err().to_string();
        assert!(
            err.contains(reason),
            "{text}: {err:?} does not say {reason:?}"
        );
    }
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("machine.json");
    std::fs::write(&path, "{").unwrap();
    let err = Topology::load(&path).unwrap_err().to_string();
    assert!(err.contains("machine.json"), "{err}");
    let missing = dir.path().join("nowhere");
    let err = Topology::load(&missing).unwrap_err().to_string();
    assert!(err.starts_with("read ") && err.contains("nowhere"), "{err}");
}

#[test]
fn load_detects_a_sysfs_directory() {
    let dir = tempfile::tempdir().unwrap();
    let want = SyntheticSpec::new(2, 1, 2, 2, 1).build().unwrap();
    crate::topology::fake::FakeSysfs::new(want.clone())
        .write(dir.path())
        .unwrap();
    assert_eq!(Topology::load(dir.path()).unwrap(), want);
}

#[test]
fn topology_is_a_serde_type_for_inline_yaml() {
    let yaml = "cpus:\n  - {id: 0, core: 0, socket: 0}\n  - {id: 1, core: 0, socket: 0}\nnuma:\n  - {id: 0, memory: 8Gi, distances: [10]}\n";
    let t: Topology = serde_yaml_ng::from_str(yaml).unwrap();
    assert_eq!(t.numa[0].memory, 8 << 30);
    assert_eq!(t.num_cores(), 1);
    let bad = "cpus: []\n";
    let err = serde_yaml_ng::from_str::<Topology>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no cpu"), "{err}");
}

//! The module dependency order of ARCHITECTURE.md ("Layers"), checked on the source: a module
//! may name (`crate::x`) only modules below it. Fails with every upward arrow, file and line.

use std::path::{Path, PathBuf};

/// Bottom to top; keep in step with ARCHITECTURE.md.
const LAYERS: &[&str] = &[
    "proto",
    "quantity",
    "files",
    "cpuset",
    "telemetry",
    "transport",
    "topology",
    "cgroup",
    "crio",
    "listen",
    "state",
    "placement",
    "k8s",
    "knowledge",
    "report",
    "relay",
    "lifecycle",
    "podresources",
    "inspect",
    "deviceplugin",
    "scenario",
    "config",
    "cli",
    "testing",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/relay/grpc.rs` → `relay`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every `crate::name` on a line that is not a comment.
fn named_modules(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

#[test]
fn modules_name_only_modules_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    let mut unlisted = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(own) = rank(&module) else {
            unlisted.push(module);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            for named in named_modules(line) {
                if named == module {
                    continue;
                }
                match rank(&named) {
                    Some(r) if r < own => {}
                    _ => upward.push(format!(
                        "{}:{}: {module} names crate::{named}",
                        file.display(),
                        n + 1
                    )),
                }
            }
        }
    }
    unlisted.sort();
    unlisted.dedup();
    assert!(
        unlisted.is_empty(),
        "modules missing from LAYERS (and ARCHITECTURE.md): {unlisted:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that point up the layer order:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_arrow() {
    assert_eq!(
        named_modules("use crate::lifecycle::runtime::x; // crate::relay"),
        vec!["lifecycle"]
    );
    assert!(named_modules("//! see crate::report").is_empty());
    assert!(named_modules("use numa_shim_crate::x;").is_empty());
}

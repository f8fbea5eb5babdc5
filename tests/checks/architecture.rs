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
    "lifecycle",
    "relay",
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

/// The lifecycle's files that may name tonic: numa-shim's own CRI client (`runtime`), the codes
/// of its answers (`pool`) and a refused resize's status code (`resize`). The rest — the
/// `Placer`, the registry, recovery — knows no gRPC: the relay's hook turns CRI answers into
/// plain `lifecycle::Outcome`s and placement errors into statuses.
const LIFECYCLE_TONIC: &[&str] = &["runtime.rs", "pool.rs", "resize.rs"];

#[test]
fn the_lifecycle_names_tonic_only_where_it_talks_to_the_runtime() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("lifecycle.rs")];
    sources(&src.join("lifecycle"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src.join("lifecycle")).unwrap_or(file);
        if LIFECYCLE_TONIC
            .iter()
            .any(|allowed| rel == Path::new(allowed))
        {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if names_crate(code, "tonic") {
                found.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the lifecycle names tonic outside {LIFECYCLE_TONIC:?}:\n{}",
        found.join("\n")
    );
}

/// Whether `code` names the outside crate `name` (`name::`, not as part of a longer word).
fn names_crate(code: &str, name: &str) -> bool {
    code.match_indices(&format!("{name}::"))
        .any(|(i, _)| !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':'))
}

#[test]
fn the_check_sees_an_upward_arrow() {
    assert_eq!(
        named_modules("use crate::lifecycle::runtime::x; // crate::relay"),
        vec!["lifecycle"]
    );
    assert!(named_modules("//! see crate::report").is_empty());
    assert!(named_modules("use numa_shim_crate::x;").is_empty());
    assert!(names_crate("use tonic::Code;", "tonic"));
    assert!(names_crate("        tonic::Code::NotFound => x,", "tonic"));
    assert!(!names_crate("use crate::tonic_like::x;", "tonic"));
}

//! CRI-O's two spellings of its settings: the TOML of `crio.conf` and its drop-ins (snake_case
//! keys under `[crio.runtime]`), and the JSON of its verbose Status `config` (the Go field names
//! of `RuntimeConfig`, which has no JSON tags).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use toml_edit::{Document, TableLike};

use super::{CrioError, CrioSettings, Handler, Workload};

/// CRI-O's settings from `path`: a configuration file followed by the drop-ins of `<path>.d`
/// (when that directory exists), or, for a directory, its drop-ins alone. Drop-ins are every
/// file below the directory in lexical order, as CRI-O walks it.
pub fn load(path: &Path) -> Result<CrioSettings, CrioError> {
    let mut settings = CrioSettings::default();
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        settings = parse_file(path)?;
        super::drop_in_dir(path)
    };
    if dir.is_dir() {
        for file in files_below(&dir)? {
            settings.merge(parse_file(&file)?);
        }
    }
    Ok(settings)
}

fn parse_file(path: &Path) -> Result<CrioSettings, CrioError> {
    let text = std::fs::read_to_string(path).map_err(|source| CrioError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    from_toml(&text).map_err(|message| CrioError::Parse {
        path: path.to_path_buf(),
        message,
    })
}

/// Every regular file below `dir`, in the lexical order of their paths.
fn files_below(dir: &Path) -> Result<Vec<std::path::PathBuf>, CrioError> {
    let read = |d: &Path| {
        std::fs::read_dir(d).map_err(|source| CrioError::Read {
            path: d.to_path_buf(),
            source,
        })
    };
    let mut out = Vec::new();
    let mut entries: Vec<_> = read(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            out.extend(files_below(&entry)?);
        } else if entry.is_file() {
            out.push(entry);
        }
    }
    Ok(out)
}

/// The settings one TOML file sets; the error names the key whose value has the wrong type.
pub(super) fn from_toml(text: &str) -> Result<CrioSettings, String> {
    let doc: Document<&str> = Document::parse(text).map_err(|e| e.to_string())?;
    let mut settings = CrioSettings::default();
    let Some(runtime) = table(doc.as_table(), &["crio", "runtime"])? else {
        return Ok(settings);
    };
    settings.infra_ctr_cpuset = string(runtime, "infra_ctr_cpuset", "crio.runtime")?;
    settings.shared_cpuset = string(runtime, "shared_cpuset", "crio.runtime")?;
    if let Some(workloads) = table(runtime, &["workloads"])? {
        for (name, item) in workloads.iter() {
            let at = format!("crio.runtime.workloads.{name}");
            let w = item
                .as_table_like()
                .ok_or_else(|| format!("{at}: expected a table"))?;
            let cpuset = match table(w, &["resources"]).map_err(|e| format!("{at}.{e}"))? {
                Some(r) => string(r, "cpuset", &format!("{at}.resources"))?,
                None => None,
            };
            settings.workloads.insert(
                name.to_string(),
                Workload {
                    activation_annotation: string(w, "activation_annotation", &at)?,
                    cpuset,
                    allowed_annotations: strings(w, "allowed_annotations", &at)?,
                },
            );
        }
    }
    if let Some(runtimes) = table(runtime, &["runtimes"])? {
        for (name, item) in runtimes.iter() {
            let at = format!("crio.runtime.runtimes.{name}");
            let h = item
                .as_table_like()
                .ok_or_else(|| format!("{at}: expected a table"))?;
            settings.handlers.insert(
                name.to_string(),
                Handler {
                    allowed_annotations: strings(h, "allowed_annotations", &at)?,
                },
            );
        }
    }
    Ok(settings)
}

/// The table at `path` below `root`, if there is one.
fn table<'a>(root: &'a dyn TableLike, path: &[&str]) -> Result<Option<&'a dyn TableLike>, String> {
    let mut at = root;
    for (i, key) in path.iter().enumerate() {
        match at.get(key) {
            None => return Ok(None),
            Some(item) => {
                at = item
                    .as_table_like()
                    .ok_or_else(|| format!("{}: expected a table", path[..=i].join(".")))?;
            }
        }
    }
    Ok(Some(at))
}

fn string(t: &dyn TableLike, key: &str, at: &str) -> Result<Option<String>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| format!("{at}.{key}: expected a string")),
    }
}

fn strings(t: &dyn TableLike, key: &str, at: &str) -> Result<Option<Vec<String>>, String> {
    let Some(v) = t.get(key) else {
        return Ok(None);
    };
    let bad = || format!("{at}.{key}: expected an array of strings");
    let array = v.as_array().ok_or_else(bad)?;
    array
        .iter()
        .map(|x| x.as_str().map(str::to_string).ok_or_else(bad))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `RuntimeConfig` as CRI-O's verbose Status writes it (`info["config"]["crio"]`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct StatusConfig {
    #[serde(rename = "InfraCtrCPUSet", default)]
    infra_ctr_cpuset: String,
    #[serde(rename = "SharedCPUSet", default)]
    shared_cpuset: String,
    #[serde(default)]
    workloads: Option<HashMap<String, StatusWorkload>>,
    #[serde(default)]
    runtimes: Option<HashMap<String, StatusHandler>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StatusWorkload {
    #[serde(default)]
    activation_annotation: String,
    #[serde(default)]
    allowed_annotations: Option<Vec<String>>,
    #[serde(default)]
    resources: Option<StatusResources>,
}

/// Workload resources: the one CRI-O struct here with JSON tags.
#[derive(Debug, Default, Deserialize)]
struct StatusResources {
    #[serde(default)]
    cpuset: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StatusHandler {
    #[serde(default)]
    allowed_annotations: Option<Vec<String>>,
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl From<StatusConfig> for CrioSettings {
    fn from(c: StatusConfig) -> Self {
        let workloads: BTreeMap<String, Workload> = c
            .workloads
            .unwrap_or_default()
            .into_iter()
            .map(|(name, w)| {
                let workload = Workload {
                    activation_annotation: non_empty(w.activation_annotation),
                    cpuset: w.resources.and_then(|r| non_empty(r.cpuset)),
                    allowed_annotations: w.allowed_annotations,
                };
                (name, workload)
            })
            .collect();
        let handlers = c
            .runtimes
            .unwrap_or_default()
            .into_iter()
            .map(|(name, h)| {
                let handler = Handler {
                    allowed_annotations: h.allowed_annotations,
                };
                (name, handler)
            })
            .collect();
        Self {
            infra_ctr_cpuset: non_empty(c.infra_ctr_cpuset),
            shared_cpuset: non_empty(c.shared_cpuset),
            workloads,
            handlers,
        }
    }
}

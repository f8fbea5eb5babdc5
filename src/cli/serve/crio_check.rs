//! At start, warns about CRI-O settings that would fight numa-shim over cpusets
//! (`crate::crio`): read from the `crioConfig` files when they are set, and from the runtime's
//! verbose Status answer, where CRI-O reports the configuration it runs with (containerd's answer
//! has no CRI-O part and gives no warning). Only logs; never changes what numa-shim does, and a
//! runtime or file that cannot be read is a warning too, not a reason to stop.

use std::path::PathBuf;

use tracing::{debug, info, warn};

use crate::cpuset::CpuSet;
use crate::crio::{self, CrioSettings};
use crate::lifecycle::runtime::Runtime;

/// Reads both sources and logs each distinct conflict once, naming where it was seen.
pub(super) async fn warn_about_crio(runtime: PathBuf, files: Option<PathBuf>, reserved: CpuSet) {
    let mut seen: Vec<(String, Vec<String>)> = Vec::new();
    let mut checked = Vec::new();
    let mut note = |source: String, settings: &CrioSettings| {
        checked.push(source.clone());
        for conflict in settings.conflicts(&reserved) {
            let message = conflict.to_string();
            match seen.iter_mut().find(|(m, _)| *m == message) {
                Some((_, sources)) => sources.push(source.clone()),
                None => seen.push((message, vec![source.clone()])),
            }
        }
    };
    match Runtime::new(&runtime).status_info().await {
        Ok(info) => match CrioSettings::from_status_info(&info) {
            Ok(Some(settings)) => note("CRI-O status".to_string(), &settings),
            Ok(None) => {
                debug!(runtime = %runtime.display(), "runtime status has no CRI-O configuration")
            }
            Err(e) => {
                warn!(runtime = %runtime.display(), error = %e, "cannot check CRI-O's settings")
            }
        },
        Err(status) => {
            warn!(runtime = %runtime.display(), code = ?status.code(), message = status.message(), "cannot check CRI-O's settings: Status failed");
        }
    }
    if let Some(path) = files {
        let read = path.clone();
        match tokio::task::spawn_blocking(move || crio::load(&read)).await {
            Ok(Ok(settings)) => note(path.display().to_string(), &settings),
            Ok(Err(e)) => warn!(error = %e, "cannot check CRI-O's settings"),
            Err(e) => warn!(error = %e, "cannot check CRI-O's settings"),
        }
    }
    for (message, sources) in &seen {
        warn!(source = %sources.join(", "), conflict = %message, "CRI-O setting fights numa-shim");
    }
    if seen.is_empty() && !checked.is_empty() {
        info!(source = %checked.join(", "), "no CRI-O setting fights numa-shim");
    }
}

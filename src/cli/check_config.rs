//! `numa-shim check-config`: validates a configuration file the way `serve` would use it —
//! numa-shim's own keys, then the kubelet resource-manager fields resolved against the machine
//! (`--topology`, the file's `topology`, or /sys), then, when it is given the kubelet's
//! configuration (`--kubelet-config`, with its drop-in directory `--kubelet-config-dir`), what
//! the kubelet must run with under numa-shim, then CRI-O's configuration files when `crioConfig`
//! names them (settings that fight numa-shim over cpusets, `crate::crio`) — and prints `OK` with
//! the warnings, or every error (exit status 1). Reads files only; never binds a socket or talks
//! to a runtime.

use std::path::{Path, PathBuf};

use super::flags::FileFlags;
use crate::config::{self, Config};
use crate::cpuset::CpuSet;
use crate::crio;
use crate::k8s::Severity;
use crate::placement::config::{Config as Placement, CpuPolicy, MemoryPolicy};
use crate::placement::node::Node;
use crate::topology::Topology;

/// Arguments of `numa-shim check-config`: the same files `serve` reads.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub files: FileFlags,
}

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Each error names the key (or file) first.
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Runs the command: prints the findings, fails when there is an error.
pub fn run(args: Args) -> Result<(), super::CliError> {
    let findings = check_files(&args);
    print!("{}", render(&findings));
    if findings.errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{} configuration error(s)", findings.errors.len()).into())
    }
}

/// Loads the files named by `args`, lays the flags over the file as `serve` does, and checks
/// the result.
pub fn check_files(args: &Args) -> Findings {
    let file = match args.files.load() {
        Ok(file) => file.with_flags(&args.files.as_config()),
        Err(err) => {
            return Findings {
                errors: vec![err.to_string()],
                warnings: Vec::new(),
            }
        }
    };
    let topology = file
        .topology
        .clone()
        .unwrap_or_else(|| PathBuf::from("/sys"));
    check_kubelet(&file, None, None, &topology)
}

/// [`check_kubelet`] without a drop-in directory.
pub fn check(file: &Config, kubelet_config: Option<&Path>, topology: &Path) -> Findings {
    check_kubelet(file, kubelet_config, None, topology)
}

/// Checks a parsed file: its own keys, then the kubelet fields (the file's own, else those of
/// the kubelet's file `kubelet_config` or `kubeletConfig`) resolved against the machine at
/// `topology`, then the kubelet's running configuration (that file with the drop-ins of
/// `kubelet_config_dir` or `kubeletConfigDir`) against numa-shim's settings.
pub fn check_kubelet(
    file: &Config,
    kubelet_config: Option<&Path>,
    kubelet_config_dir: Option<&Path>,
    topology: &Path,
) -> Findings {
    let mut findings = Findings {
        errors: file.validate().iter().map(ToString::to_string).collect(),
        warnings: file.warnings().iter().map(ToString::to_string).collect(),
    };
    let kubelet = match config::kubelet_fields(file, kubelet_config) {
        Ok(k) => k,
        Err(err) => {
            findings.errors.push(err.to_string());
            return findings;
        }
    };
    let machine = match Topology::load(topology) {
        Ok(m) => m,
        Err(err) => {
            findings
                .errors
                .push(format!("topology {}: {err}", topology.display()));
            return findings;
        }
    };
    match kubelet.resolve(&machine) {
        Ok(resolved) => {
            findings
                .warnings
                .extend(resolved.warnings.iter().map(ToString::to_string));
            // What `serve` does next: build the decision core (memory tables, CPU pools).
            match Node::new(machine.clone(), resolved.config.clone()) {
                Ok(node) => {
                    check_crio(file, &node.reserved_cpus(), &mut findings);
                    if !places(&resolved.config) {
                        return findings;
                    }
                    match config::kubelet_running(file, kubelet_config, kubelet_config_dir) {
                        Ok(Some(running)) => {
                            let reserved = node.reserved_cpus();
                            let conflicts = running.config.conflicts_with(
                                &resolved.config,
                                &reserved,
                                &machine,
                            );
                            for f in conflicts {
                                let line = format!("{f} (kubelet config {})", running.source);
                                match f.severity {
                                    Severity::Error => findings.errors.push(line),
                                    Severity::Warning => findings.warnings.push(line),
                                }
                            }
                        }
                        Ok(None) => {}
                        Err(err) => findings.errors.push(err.to_string()),
                    }
                }
                Err(err) => findings
                    .errors
                    .push(format!("resource manager settings: {err}")),
            }
        }
        Err(err) => findings.errors.push(err.to_string()),
    }
    findings
}

/// Whether numa-shim places anything with these settings (else it only relays, and the kubelet's
/// own managers are what places pods).
pub fn places(config: &Placement) -> bool {
    config.cpu_policy != CpuPolicy::None || config.memory_policy != MemoryPolicy::None
}

/// CRI-O's settings from `crioConfig`: each conflict is a warning (numa-shim still works, but
/// CRI-O changes what it applied); a file that cannot be read or parsed is an error.
fn check_crio(file: &Config, reserved: &CpuSet, findings: &mut Findings) {
    let Some(path) = &file.crio_config else {
        return;
    };
    match crio::load(path) {
        Ok(settings) => findings.warnings.extend(
            settings
                .conflicts(reserved)
                .iter()
                .map(|c| format!("crioConfig: {c}")),
        ),
        Err(err) => findings.errors.push(format!("crioConfig: {err}")),
    }
}

/// `OK` and warnings, or the errors (then the warnings).
pub fn render(findings: &Findings) -> String {
    let mut out = String::new();
    if findings.errors.is_empty() {
        out.push_str("OK\n");
    }
    for e in &findings.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    for w in &findings.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

//! `numa-shim check-config`: validates a configuration file the way `serve` would use it —
//! numa-shim's own keys, then the kubelet resource-manager fields resolved against the machine
//! (`--topology`, the file's `topology`, or /sys) — and prints `OK` with the warnings, or every
//! error (exit status 1). Reads files only; never binds a socket or talks to a runtime.

use std::path::{Path, PathBuf};

use crate::config::{self, Config};
use crate::placement::node::Node;
use crate::topology::Topology;

/// Arguments of `numa-shim check-config`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Configuration file (YAML or JSON) [default: only the other flags and defaults].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Take the resource-manager fields from this KubeletConfiguration file.
    #[arg(long)]
    pub kubelet_config: Option<PathBuf>,
    /// Topology JSON file or sysfs root to check against [default: the file's, else /sys].
    #[arg(long)]
    pub topology: Option<PathBuf>,
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

/// Loads the files named by `args` and checks them.
pub fn check_files(args: &Args) -> Findings {
    let file = match &args.config {
        Some(path) => match config::load(path) {
            Ok(file) => file,
            Err(err) => {
                return Findings {
                    errors: vec![err.to_string()],
                    warnings: Vec::new(),
                }
            }
        },
        None => Config::default(),
    };
    let topology = args
        .topology
        .clone()
        .or_else(|| file.topology.clone())
        .unwrap_or_else(|| PathBuf::from("/sys"));
    check(&file, args.kubelet_config.as_deref(), &topology)
}

/// Checks a parsed file: its own keys, then the kubelet fields (from `kubelet_config`, the
/// file's `kubeletConfig`, or the file itself) resolved against the machine at `topology`.
pub fn check(file: &Config, kubelet_config: Option<&Path>, topology: &Path) -> Findings {
    let mut findings = Findings {
        errors: file.validate().iter().map(ToString::to_string).collect(),
        warnings: Vec::new(),
    };
    let from_file = kubelet_config.or(file.kubelet_config.as_deref());
    if let Some(path) = from_file.filter(|_| file.has_kubelet_fields()) {
        findings.warnings.push(format!(
            "kubeletConfig: the resource-manager fields in this file are ignored; {} is used",
            path.display()
        ));
    }
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
            if let Err(err) = Node::new(machine, resolved.config) {
                findings
                    .errors
                    .push(format!("resource manager settings: {err}"));
            }
        }
        Err(err) => findings.errors.push(err.to_string()),
    }
    findings
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

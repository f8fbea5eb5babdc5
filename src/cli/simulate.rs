//! `numa-shim simulate SCENARIO [--output json|table|steps] [--check]`: runs a scenario file
//! through the decision core and prints the report (docs/simulate.md). Configuration warnings go
//! to stderr; with `--check` the scenario's `expect` block must match or the command fails.
//! `--output steps` prints kubelet-oracle's answer format instead (a snapshot after every step).

use std::path::PathBuf;

use crate::scenario::{expect, table, Scenario};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The report as JSON (stable, for scripts).
    Json,
    /// Pods and containers, then the NUMA map.
    Table,
    /// A snapshot after every step, in kubelet-oracle's answer format
    /// (integration/kubelet-oracle/PROTOCOL.md).
    Steps,
}

/// Arguments of `numa-shim simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (YAML or JSON); paths inside it are relative to it.
    pub scenario: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Json)]
    pub output: Output,
    /// Fail unless the scenario's `expect` block matches the report.
    #[arg(long)]
    pub check: bool,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), super::CliError> {
    if args.output == Output::Steps {
        if args.check {
            return Err("--check compares the end report: use it without --output steps".into());
        }
        let scenario = Scenario::load_keeping_refusals(&args.scenario)?;
        let report = scenario.run_steps()?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let scenario = Scenario::load(&args.scenario)?;
    let outcome = scenario.run()?;
    for w in &outcome.warnings {
        eprintln!("numa-shim: warning: {w}");
    }
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&outcome.report)?),
        Output::Table => print!("{}", table::render(&outcome.report, &scenario.topology)),
        Output::Steps => {}
    }
    if args.check {
        let Some(block) = &scenario.expect else {
            return Err(format!(
                "{}: --check: the scenario has no expect block",
                scenario.origin
            )
            .into());
        };
        let mismatches = expect::check(block, &serde_json::to_value(&outcome.report)?);
        if !mismatches.is_empty() {
            for m in &mismatches {
                eprintln!("numa-shim: mismatch: {m}");
            }
            return Err(format!(
                "{}: {} expectation(s) not met",
                scenario.origin,
                mismatches.len()
            )
            .into());
        }
    }
    Ok(())
}

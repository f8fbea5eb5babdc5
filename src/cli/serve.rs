//! `numa-shim serve` (skeleton: filled in by its owner).

/// Arguments of `numa-shim serve`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> Result<(), super::CliError> {
    Err("serve is not built yet".into())
}

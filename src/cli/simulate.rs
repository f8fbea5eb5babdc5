//! `numa-shim simulate` (skeleton: filled in by its owner).

/// Arguments of `numa-shim simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> Result<(), super::CliError> {
    Err("simulate is not built yet".into())
}

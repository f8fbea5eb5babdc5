//! `numa-shim topology` (skeleton: filled in by its owner).

/// Arguments of `numa-shim topology`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> Result<(), super::CliError> {
    Err("topology is not built yet".into())
}

//! `numa-shim inspect`: asks a running numa-shim (its metrics endpoint, `GET /placement`) for
//! the live placement and prints it as a table with the NUMA map, as JSON, or as an SVG.

use crate::inspect::{self, render_svg, render_table};
use crate::telemetry::DEFAULT_ADDRESS;

/// Output formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Pods, containers and the NUMA map for a terminal.
    #[default]
    Table,
    /// The view as `GET /placement` sends it.
    Json,
    /// A self-contained SVG of the NUMA map.
    Svg,
}

/// Arguments of `numa-shim inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// numa-shim's metrics endpoint (`metricsAddress`).
    #[arg(long, default_value_t = format!("http://{DEFAULT_ADDRESS}"))]
    pub endpoint: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), super::CliError> {
    let view = inspect::fetch(&args.endpoint)?;
    let text = match args.output {
        Output::Table => render_table(&view),
        Output::Json => format!("{}\n", view.to_json()),
        Output::Svg => render_svg(&view),
    };
    print!("{text}");
    Ok(())
}

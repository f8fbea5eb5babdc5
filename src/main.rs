use std::process::ExitCode;

use clap::{Parser, Subcommand};
use numa_shim::cli;

/// jemalloc instead of glibc's malloc: after a burst of large concurrent calls, glibc keeps the
/// freed heap (RSS stays at the peak); jemalloc's background thread hands pages that stayed
/// free for its decay time back to the system (docs/PERFORMANCE.md, "Memory after load").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// numa-shim: pod-level NUMA resource management as a CRI proxy.
#[derive(Debug, Parser)]
#[command(name = "numa-shim", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the CRI proxy between the kubelet and the runtime.
    Serve(Box<cli::serve::Args>),
    /// Decide where pods of a scenario would land, without a cluster.
    Simulate(cli::simulate::Args),
    /// Print the machine topology discovered from sysfs.
    Topology(cli::topology::Args),
    /// Validate a configuration file against a machine; prints OK and warnings, or the errors.
    CheckConfig(cli::check_config::Args),
    /// Show a running numa-shim's live placement: table, JSON or SVG.
    Inspect(cli::inspect::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cli::serve::run(*args),
        Command::Simulate(args) => cli::simulate::run(args),
        Command::Topology(args) => cli::topology::run(args),
        Command::CheckConfig(args) => cli::check_config::run(args),
        Command::Inspect(args) => cli::inspect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("numa-shim: {err}");
            ExitCode::FAILURE
        }
    }
}

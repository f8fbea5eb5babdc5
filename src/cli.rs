//! Command-line entry points. The only place that prints to stdout.

pub mod check_config;
pub mod flags;
pub mod inspect;
pub mod serve;
pub mod simulate;
pub mod topology;

/// The error every command returns to `main`, printed as one line.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

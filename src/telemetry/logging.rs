//! Process-wide `tracing` set-up: a filter (`logLevel`, else `RUST_LOG`, else `info`; replaceable
//! while running, for SIGHUP) and a text or JSON format (`logFormat`), written to stderr so
//! systemd's journal or the container log collects it.
//!
//! Owns the global subscriber. Must be called once, by the binary's entry point only; library code
//! only emits events.

use std::str::FromStr;
use std::sync::OnceLock;

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// The filter used when `RUST_LOG` is unset or empty.
pub const DEFAULT_FILTER: &str = "info";

/// `logFormat`: how each event is written.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Errors of logging set-up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` (or the given filter) does not parse.
    #[error("invalid log filter {value:?}: {source}")]
    Filter {
        value: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// `logFormat` is neither `text` nor `json`.
    #[error("unknown log format {0:?} (expected text or json)")]
    Format(String),
    /// A global subscriber was installed before.
    #[error("logging was already initialised")]
    AlreadyInitialised,
    /// The level was to be changed before logging was set up.
    #[error("logging is not initialised")]
    NotInitialised,
    /// The new filter could not be installed.
    #[error("log filter not changed: {0}")]
    Reload(String),
}

impl FromStr for LogFormat {
    type Err = LoggingError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(LoggingError::Format(other.to_owned())),
        }
    }
}

/// Replaces the filter of a subscriber built by [`subscriber`].
pub type LevelHandle = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// The installed subscriber's filter, for [`set_level`].
static LEVEL: OnceLock<LevelHandle> = OnceLock::new();

/// Installs the global subscriber writing `format` to stderr, filtered by `level` (a tracing
/// filter such as `info` or `info,numa_shim::relay=debug`), else by `RUST_LOG`, else `info`.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), LoggingError> {
    let filter = filter_from(level.or(std::env::var("RUST_LOG").ok().as_deref()))?;
    let (subscriber, handle) = subscriber(format, filter, std::io::stderr);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|_| LoggingError::AlreadyInitialised)?;
    let _ = LEVEL.set(handle);
    Ok(())
}

/// Changes the installed subscriber's filter while running (SIGHUP): `level` as in [`init`],
/// `None` going back to `RUST_LOG` or `info`.
pub fn set_level(level: Option<&str>) -> Result<(), LoggingError> {
    let filter = filter_from(level.or(std::env::var("RUST_LOG").ok().as_deref()))?;
    let handle = LEVEL.get().ok_or(LoggingError::NotInitialised)?;
    handle(filter).map_err(LoggingError::Reload)
}

/// The filter for a `RUST_LOG` value; `None` or blank gives [`DEFAULT_FILTER`].
pub fn filter_from(value: Option<&str>) -> Result<EnvFilter, LoggingError> {
    let value = value.map(str::trim).filter(|v| !v.is_empty());
    let value = value.unwrap_or(DEFAULT_FILTER);
    EnvFilter::try_new(value).map_err(|source| LoggingError::Filter {
        value: value.to_owned(),
        source,
    })
}

/// A subscriber writing `format` through `writer` and the handle that replaces its filter, for
/// `init` and for tests that capture output.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
) -> (Box<dyn Subscriber + Send + Sync>, LevelHandle)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(true);
    match format {
        LogFormat::Text => {
            let builder = builder.with_ansi(false).with_filter_reloading();
            let handle = builder.reload_handle();
            let reload: LevelHandle =
                Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()));
            (Box::new(builder.finish()), reload)
        }
        LogFormat::Json => {
            let builder = builder.json().flatten_event(true).with_filter_reloading();
            let handle = builder.reload_handle();
            let reload: LevelHandle =
                Box::new(move |f| handle.reload(f).map_err(|e| e.to_string()));
            (Box::new(builder.finish()), reload)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("buffer").clone()).expect("utf-8")
        }
    }

    fn capture(format: LogFormat, filter: Option<&str>) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let filter = filter_from(filter).expect("filter");
        let (subscriber, _) = subscriber(format, filter, move || writer.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(pod = "uid-1", cpus = "2-3", "allocated");
            tracing::debug!("hidden at info");
        });
        out.text()
    }

    #[test]
    fn json_lines_carry_level_fields_and_message() {
        let text = capture(LogFormat::Json, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "debug is filtered out at the default level: {text}"
        );
        let event: serde_json::Value = serde_json::from_str(lines[0]).expect("json line");
        assert_eq!(event["level"], "INFO");
        assert_eq!(event["message"], "allocated");
        assert_eq!(event["pod"], "uid-1");
        assert_eq!(event["cpus"], "2-3");
    }

    #[test]
    fn text_lines_and_the_filter() {
        let text = capture(LogFormat::Text, Some("debug"));
        assert!(
            text.contains("allocated") && text.contains("pod=\"uid-1\""),
            "{text}"
        );
        assert!(
            text.contains("hidden at info"),
            "debug passes a debug filter: {text}"
        );
        let quiet = capture(LogFormat::Text, Some("warn"));
        assert!(quiet.is_empty(), "{quiet}");
    }

    #[test]
    fn the_filter_is_replaced_while_running() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let out = Captured::default();
            let writer = out.clone();
            let (subscriber, handle) =
                subscriber(format, filter_from(None).expect("filter"), move || {
                    writer.clone()
                });
            tracing::subscriber::with_default(subscriber, || {
                tracing::debug!("first debug");
                handle(filter_from(Some("debug")).expect("debug")).expect("reload");
                tracing::debug!("second debug");
                handle(filter_from(Some("error")).expect("error")).expect("reload");
                tracing::warn!("a warning");
            });
            let text = out.text();
            assert!(!text.contains("first debug"), "{format:?}: {text}");
            assert!(text.contains("second debug"), "{format:?}: {text}");
            assert!(!text.contains("a warning"), "{format:?}: {text}");
        }
    }

    #[test]
    fn formats_and_filters_parse_or_name_the_input() {
        assert_eq!("json".parse::<LogFormat>().expect("json"), LogFormat::Json);
        assert_eq!("text".parse::<LogFormat>().expect("text"), LogFormat::Text);
        let err = "yaml".parse::<LogFormat>().expect_err("yaml");
        assert!(err.to_string().contains("\"yaml\""), "{err}");
        let format: LogFormat = serde_json::from_str("\"json\"").expect("serde");
        assert_eq!(format, LogFormat::Json);
        assert_eq!(filter_from(Some("  ")).expect("blank").to_string(), "info");
        let err = filter_from(Some("numa_shim=[")).expect_err("bad filter");
        assert!(err.to_string().contains("numa_shim=["), "{err}");
    }
}

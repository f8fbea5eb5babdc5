//! numa-shim's configuration file (YAML or JSON). For now it holds the `serve` settings; field
//! names follow the kubelet's where one exists (`containerRuntimeEndpoint`, `shutdownGracePeriod`,
//! `logging.format`). Parsing only: never touches sockets or the runtime.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The configuration file. Every field is optional; command-line flags override it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Where numa-shim listens, e.g. `unix:///run/numa-shim/cri.sock`.
    pub listen: Option<String>,
    /// The runtime's CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`.
    pub container_runtime_endpoint: Option<String>,
    /// Octal mode of the listening socket as a string, e.g. `"0660"`.
    pub socket_mode: Option<String>,
    /// Numeric group id given to the listening socket.
    pub socket_group: Option<u32>,
    /// How long in-flight calls may run after SIGTERM, kubelet duration format (`"10s"`).
    pub shutdown_grace_period: Option<String>,
    /// Log settings.
    pub logging: Option<Logging>,
}

/// Log settings (`logging:` in the file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Logging {
    /// `text` (default) or `json`.
    pub format: Option<LogFormat>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// A configuration file or value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML/JSON for this schema.
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A socket mode that is not an octal number up to 0777.
    #[error("invalid socket mode {0:?}: expected octal like 0660")]
    Mode(String),
    /// A duration not in the kubelet's format.
    #[error("invalid duration {0:?}: expected e.g. 10s, 500ms, 1m30s")]
    Duration(String),
}

/// Reads and parses the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses configuration text (YAML or JSON). An empty document is the default configuration.
pub fn parse(text: &str) -> Result<Config, serde_yaml_ng::Error> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    serde_yaml_ng::from_str(text)
}

/// Parses an octal file mode such as `0660` or `660`.
pub fn parse_mode(text: &str) -> Result<u32, ConfigError> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if !digits.is_empty() && mode <= 0o777 => Ok(mode),
        _ => Err(ConfigError::Mode(text.to_string())),
    }
}

/// Parses a duration in the kubelet's (Go) format restricted to `h`, `m`, `s`, `ms`, e.g. `1m30s`.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let bad = || ConfigError::Duration(text.to_string());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let units = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let part = match &rest[..units] {
            "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(bad)?),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
            "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = &rest[units..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file() {
        let text = r#"
listen: unix:///run/numa-shim/cri.sock
containerRuntimeEndpoint: unix:///run/crio/crio.sock
socketMode: "0600"
socketGroup: 990
shutdownGracePeriod: 1m30s
logging:
  format: json
"#;
        let c = parse(text).unwrap();
        assert_eq!(
            c.container_runtime_endpoint.as_deref(),
            Some("unix:///run/crio/crio.sock")
        );
        assert_eq!(c.socket_group, Some(990));
        assert_eq!(c.logging.and_then(|l| l.format), Some(LogFormat::Json));
        assert_eq!(
            parse_mode(c.socket_mode.as_deref().unwrap()).unwrap(),
            0o600
        );
        assert_eq!(
            parse_duration(c.shutdown_grace_period.as_deref().unwrap()).unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(parse("").unwrap(), Config::default());
        assert_eq!(
            parse(r#"{"listen": "/x.sock"}"#).unwrap().listen.as_deref(),
            Some("/x.sock")
        );
    }

    #[test]
    fn rejects_unknown_fields_and_bad_values() {
        let err = parse("listen: /x\nlisten_typo: 1\n").unwrap_err();
        assert!(err.to_string().contains("listen_typo"), "{err}");
        assert!(parse("logging: {format: xml}").is_err());
        for bad in ["", "8", "0999", "1777", "rw"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_mode("660").unwrap(), 0o660);
        for bad in ["", "10", "s", "1d", "5 s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn load_names_the_file() {
        let err = load(Path::new("/nonexistent/numa-shim.yaml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/numa-shim.yaml"));
    }
}

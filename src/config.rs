//! numa-shim's configuration file (YAML or JSON): its own settings plus the kubelet's
//! resource-manager fields, with the kubelet's names and value formats (`cpuManagerPolicy`,
//! `reservedSystemCPUs`, `topologyManagerScope`, ...). Parsing only: never touches sockets or the
//! runtime. Unknown keys are refused, naming the key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::k8s::kubelet_config::KubeletConfiguration;
use crate::k8s::RunningConfigError;

mod merge;
mod validate;

pub use validate::FieldError;

/// The configuration file. Every field is optional; command-line flags override it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// Where numa-shim listens, e.g. `unix:///run/numa-shim/cri.sock`.
    pub listen: Option<String>,
    /// The runtime's CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`
    /// (`containerRuntimeEndpoint` is accepted too, the kubelet's name).
    #[serde(alias = "containerRuntimeEndpoint")]
    pub runtime: Option<String>,
    /// Octal mode of the listening socket as a string, e.g. `"0660"`.
    pub socket_mode: Option<String>,
    /// Numeric group id given to the listening socket.
    pub socket_group: Option<u32>,
    /// How long in-flight calls may run after SIGTERM, kubelet duration format (`"10s"`).
    pub shutdown_grace_period: Option<String>,
    /// Log settings.
    pub logging: Option<Logging>,
    /// `text` or `json` (same as `logging.format`).
    pub log_format: Option<LogFormat>,
    /// A tracing filter, e.g. `info` or `info,numa_shim::relay=debug` (same as `logging.level`;
    /// unset: `RUST_LOG`, else `info`). Applied on SIGHUP.
    pub log_level: Option<String>,
    /// Where the checkpoint lives (default /var/lib/numa-shim).
    pub state_dir: Option<PathBuf>,
    /// A topology JSON file or a sysfs root to take the machine from (default /sys).
    pub topology: Option<PathBuf>,
    /// Where pod specs come from: `pods-api`, `apiserver` or `cri`.
    pub pod_knowledge: Option<PodKnowledge>,
    /// The kubelet Pods API socket (default /var/lib/kubelet/pods-api/pods-api.sock).
    pub pods_api_socket: Option<PathBuf>,
    /// The kubeconfig for `podKnowledge: apiserver` (absent: the in-cluster config).
    pub kubeconfig: Option<PathBuf>,
    /// This node's name in the API server (default: the hostname, lowercased).
    pub node_name: Option<String>,
    /// What numa-shim writes to the API server about pods it refuses: `none`, `events` or
    /// `events-and-status` (default: `events-and-status` with `podKnowledge: apiserver` or a
    /// `kubeconfig`, else `none`).
    pub refusal_reports: Option<crate::report::ReportMode>,
    /// Whether decisions read the pods' DRA claims from the API server and place the pod on
    /// its devices' NUMA nodes (default: on with `podKnowledge: apiserver` or a `kubeconfig`,
    /// else off; docs/devices.md, "DRA claims").
    pub dra_claims: Option<bool>,
    /// Device attributes naming a DRA device's NUMA node, looked at after the standard
    /// `resource.kubernetes.io/numaNode` (full names, `<driver domain>/<name>`, e.g.
    /// `gpu.example.com/numaNode`).
    pub dra_numa_attributes: Option<Vec<String>>,
    /// How long one pod's claims may take to read (pod, claims, slices) before numa-shim decides
    /// without them (default 10s).
    pub dra_claims_timeout: Option<String>,
    /// Where numa-shim serves PodResources v1 (default `<stateDir>/pod-resources/kubelet.sock`;
    /// `none` or an empty path turns the server off).
    pub pod_resources_socket: Option<PathBuf>,
    /// The kubelet's own PodResources socket, asked for devices and dynamic resources (default
    /// /var/lib/kubelet/pod-resources/kubelet.sock; `none` or an empty path never asks).
    pub kubelet_pod_resources_socket: Option<PathBuf>,
    /// PodResources rate limit: requests per second (default 100) and burst (default 10).
    pub pod_resources_qps: Option<u32>,
    pub pod_resources_burst: Option<u32>,
    /// Address of /metrics, /healthz, /readyz and /placement (off when unset).
    pub metrics_address: Option<String>,
    /// How often running containers' cpusets are checked against the kernel (`"10s"`).
    pub drift_period: Option<String>,
    /// The kubelet's configuration file. Its resource-manager fields are used when this file
    /// sets none; with `kubeletConfigDir` it is also what numa-shim checks the kubelet against.
    pub kubelet_config: Option<PathBuf>,
    /// The kubelet's drop-in directory (its `--config-dir`), merged over `kubeletConfig` as the
    /// kubelet merges it.
    pub kubelet_config_dir: Option<PathBuf>,
    /// CRI-O's configuration file (its drop-ins in `<file>.d` are read too) or drop-in
    /// directory, checked for settings that fight numa-shim over cpusets (`crate::crio`).
    pub crio_config: Option<PathBuf>,
    /// The device plugin front (docs/devices.md, "The device plugin front"): device plugins
    /// register with numa-shim, which registers each resource with the kubelet and chooses the
    /// devices the kubelet gives a pod. Off when absent.
    pub device_plugin_front: Option<DevicePluginFront>,
    /// The kubelet's resource-manager fields.
    #[serde(flatten)]
    pub kubelet: KubeletConfiguration,
}

/// `devicePluginFront`: where plugins register with numa-shim and how numa-shim registers with
/// the kubelet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevicePluginFront {
    /// The directory device plugins are pointed at (`kubelet.sock` there; default
    /// /var/lib/numa-shim/device-plugins).
    pub dir: Option<PathBuf>,
    /// The kubelet's device plugin directory numa-shim registers in (default
    /// /var/lib/kubelet/device-plugins).
    pub kubelet_dir: Option<PathBuf>,
    /// Register through the kubelet's plugin watcher in this directory (its
    /// `<root-dir>/plugins_registry`) instead of `kubeletDir`.
    pub plugins_registry: Option<PathBuf>,
}

/// Where pod specs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PodKnowledge {
    /// The kubelet Pods API.
    PodsApi,
    /// The Kubernetes API server: this node's pods, listed and watched.
    Apiserver,
    /// Inference from CRI requests alone.
    Cri,
}

/// Every key the file may hold: numa-shim's own and the kubelet fields it reads.
pub const KNOWN_KEYS: &[&str] = &[
    "listen",
    "runtime",
    "containerRuntimeEndpoint",
    "socketMode",
    "socketGroup",
    "shutdownGracePeriod",
    "logging",
    "logFormat",
    "logLevel",
    "stateDir",
    "topology",
    "podKnowledge",
    "podsApiSocket",
    "kubeconfig",
    "nodeName",
    "refusalReports",
    "draClaims",
    "draNumaAttributes",
    "draClaimsTimeout",
    "podResourcesSocket",
    "kubeletPodResourcesSocket",
    "podResourcesQps",
    "podResourcesBurst",
    "metricsAddress",
    "driftPeriod",
    "kubeletConfig",
    "kubeletConfigDir",
    "crioConfig",
    "devicePluginFront",
    "apiVersion",
    "kind",
    "featureGates",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "reservedSystemCPUs",
    "kubeReserved",
    "systemReserved",
    "evictionHard",
    "mergeDefaultEvictionSettings",
    "memoryManagerPolicy",
    "reservedMemory",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
];

/// Log settings (`logging:` in the file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Logging {
    /// `text` (default) or `json`.
    pub format: Option<LogFormat>,
    /// As `logLevel`.
    pub level: Option<String>,
}

pub use crate::telemetry::LogFormat;

/// Whether a socket setting means "off": `none` or an empty path.
pub fn is_off(path: &std::path::Path) -> bool {
    path.as_os_str().is_empty() || path == std::path::Path::new("none")
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
    /// The KubeletConfiguration file could not be read.
    #[error("cannot read kubelet config {path}: {source}")]
    ReadKubelet {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The KubeletConfiguration file holds no (or more than one) usable document.
    #[error("kubelet config {path}: {source}")]
    Kubelet {
        path: PathBuf,
        #[source]
        source: crate::k8s::DocumentError,
    },
    /// The kubelet's drop-in directory could not be listed or one of its files read.
    #[error("cannot read kubelet drop-in {path}: {source}")]
    ReadDropIn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The main file and drop-ins do not merge into a configuration.
    #[error("kubelet config {path} with drop-ins {dir}: {source}")]
    Running {
        path: PathBuf,
        dir: PathBuf,
        #[source]
        source: crate::k8s::RunningConfigError,
    },
}

/// The kubelet's configuration as it runs (main file plus drop-ins), and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletRunning {
    pub config: KubeletConfiguration,
    /// `FILE` or `FILE + DIR/*.conf`, for messages.
    pub source: String,
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

/// The kubelet resource-manager fields in force: the file's own when it has any, else those of
/// the kubelet's main file (`override_path`, i.e. `--kubelet-config`, else `kubeletConfig`) —
/// the settings the kubelet ran with before numa-shim took placement over — else the defaults.
pub fn kubelet_fields(
    config: &Config,
    override_path: Option<&Path>,
) -> Result<KubeletConfiguration, ConfigError> {
    let path = override_path.or(config.kubelet_config.as_deref());
    let Some(path) = path.filter(|_| !config.has_kubelet_fields()) else {
        return Ok(config.kubelet.clone());
    };
    let text = read_kubelet(path)?;
    KubeletConfiguration::from_yaml(&text).map_err(|source| ConfigError::Kubelet {
        path: path.to_path_buf(),
        source,
    })
}

/// The kubelet's configuration as the kubelet runs it, when numa-shim is told where it is: the
/// main file (`override_path`, else `kubeletConfig`) with the `*.conf` files of the drop-in
/// directory (`override_dir`, else `kubeletConfigDir`) merged over it in name order.
pub fn kubelet_running(
    config: &Config,
    override_path: Option<&Path>,
    override_dir: Option<&Path>,
) -> Result<Option<KubeletRunning>, ConfigError> {
    let Some(path) = override_path.or(config.kubelet_config.as_deref()) else {
        return Ok(None);
    };
    let main = read_kubelet(path)?;
    let dir = override_dir.or(config.kubelet_config_dir.as_deref());
    let drop_ins = match dir {
        Some(dir) => read_drop_ins(dir)?,
        None => Vec::new(),
    };
    let config = KubeletConfiguration::running(&main, &drop_ins).map_err(|err| match err {
        RunningConfigError::Document(source) => ConfigError::Kubelet {
            path: path.to_path_buf(),
            source,
        },
        source => ConfigError::Running {
            path: path.to_path_buf(),
            dir: dir.map(Path::to_path_buf).unwrap_or_default(),
            source,
        },
    })?;
    let source = match dir {
        Some(dir) => format!("{} + {}/*.conf", path.display(), dir.display()),
        None => path.display().to_string(),
    };
    Ok(Some(KubeletRunning { config, source }))
}

fn read_kubelet(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::ReadKubelet {
        path: path.to_path_buf(),
        source,
    })
}

/// The `*.conf` files of the kubelet's drop-in directory, by name (the kubelet's order).
fn read_drop_ins(dir: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ConfigError::ReadDropIn { path, source }
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err(dir))? {
        let entry = entry.map_err(err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".conf") && !entry.path().is_dir() {
            names.push(name);
        }
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let text = std::fs::read_to_string(&path).map_err(err(&path))?;
            Ok((path.display().to_string(), text))
        })
        .collect()
}

/// Parses configuration text (YAML or JSON). An empty document is the default configuration.
pub fn parse(text: &str) -> Result<Config, serde_yaml_ng::Error> {
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)?;
    if let serde_yaml_ng::Value::Mapping(map) = &value {
        for key in map.keys() {
            let name = key.as_str().unwrap_or_default();
            if !KNOWN_KEYS.contains(&name) {
                return Err(serde::de::Error::custom(format!("unknown field `{name}`")));
            }
        }
    }
    serde_yaml_ng::from_value(value.clone()).map_err(|err| name_the_key(&value).unwrap_or(err))
}

/// The first key whose value alone does not deserialize, as an error that starts with the key
/// (serde's messages name the expected type, not the key of a flattened struct).
fn name_the_key(value: &serde_yaml_ng::Value) -> Option<serde_yaml_ng::Error> {
    let serde_yaml_ng::Value::Mapping(map) = value else {
        return None;
    };
    map.iter().find_map(|(key, v)| {
        let mut single = serde_yaml_ng::Mapping::new();
        single.insert(key.clone(), v.clone());
        let err = serde_yaml_ng::from_value::<Config>(single.into()).err()?;
        let name = key.as_str().unwrap_or_default();
        Some(serde::de::Error::custom(format!("{name}: {err}")))
    })
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
        assert_eq!(c.runtime.as_deref(), Some("unix:///run/crio/crio.sock"));
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
    fn dra_keys_parse_and_validate() {
        let c = parse(
            "draClaims: true\ndraNumaAttributes: [gpu.example.com/numaNode, dra.net/numa_node]\n",
        )
        .unwrap();
        assert_eq!(c.dra_claims, Some(true));
        assert_eq!(
            c.dra_numa_attributes.as_deref(),
            Some(
                &[
                    "gpu.example.com/numaNode".to_string(),
                    "dra.net/numa_node".to_string()
                ][..]
            )
        );
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        for bad in [
            "numaNode",
            "/numaNode",
            "Gpu.Example.com/numaNode",
            "gpu.example.com/",
            "gpu.example.com/numa-node",
            "gpu.example.com/0numa",
        ] {
            let c = parse(&format!("draNumaAttributes: [\"{bad}\"]\n")).unwrap();
            let errors = c.validate();
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
            assert_eq!(errors[0].field, "draNumaAttributes");
            assert!(errors[0].reason.contains(bad), "{}", errors[0].reason);
        }
        assert!(parse("draClaims: maybe\n").is_err());
    }

    #[test]
    fn api_server_keys_parse_and_validate() {
        let c = parse(
            "podKnowledge: apiserver\nkubeconfig: /etc/kubernetes/kubelet.conf\nnodeName: node-1\n",
        )
        .unwrap();
        assert_eq!(c.pod_knowledge, Some(PodKnowledge::Apiserver));
        assert_eq!(
            c.kubeconfig,
            Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
        );
        assert_eq!(c.node_name.as_deref(), Some("node-1"));
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        let c = parse("nodeName: Node_1\nkubeconfig: ''\n").unwrap();
        let fields: Vec<_> = c.validate().iter().map(|e| e.field).collect();
        assert_eq!(fields, ["kubeconfig", "nodeName"]);
    }

    #[test]
    fn load_names_the_file() {
        let err = load(Path::new("/nonexistent/numa-shim.yaml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/numa-shim.yaml"));
    }
}

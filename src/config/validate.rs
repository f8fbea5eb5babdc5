//! Validation of numa-shim's own keys: every value is checked on its own and against the keys it
//! must agree with, and each problem names the key as written in the file and the reason. The
//! kubelet fields are validated by `KubeletConfiguration::resolve`, which needs the machine.
//! Never reads files or sockets: paths are checked for shape only.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::{parse_duration, parse_mode, Config};
use crate::transport;

/// The API version a flattened KubeletConfiguration may declare.
const KUBELET_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// One rejected value: the key as written in the file and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

impl Config {
    /// Every problem with numa-shim's own keys, in key order; empty when the file is usable.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut check = |field: &'static str, result: Result<(), String>| {
            if let Err(reason) = result {
                errors.push(FieldError { field, reason });
            }
        };
        let listen = self.listen.as_deref().map(endpoint);
        let runtime = self.runtime.as_deref().map(endpoint);
        check("listen", listen.clone().map_or(Ok(()), |r| r.map(drop)));
        check("runtime", runtime.clone().map_or(Ok(()), |r| r.map(drop)));
        if let (Some(Ok(l)), Some(Ok(r))) = (&listen, &runtime) {
            check(
                "runtime",
                (l != r)
                    .then_some(())
                    .ok_or_else(|| "is the same socket as listen".to_string()),
            );
        }
        check("socketMode", opt(self.socket_mode.as_deref(), socket_mode));
        check(
            "shutdownGracePeriod",
            opt(self.shutdown_grace_period.as_deref(), |t| {
                parse_duration(t).map(drop).map_err(|e| e.to_string())
            }),
        );
        check("driftPeriod", opt(self.drift_period.as_deref(), positive));
        check(
            "draClaimsTimeout",
            opt(self.dra_claims_timeout.as_deref(), positive),
        );
        check("logFormat", self.log_formats_agree());
        check("logLevel", self.log_levels_agree());
        check("logLevel", opt(self.log_level(), log_filter));
        check("stateDir", opt(self.state_dir.as_deref(), absolute));
        check("topology", opt(self.topology.as_deref(), not_empty));
        check(
            "podsApiSocket",
            opt(self.pods_api_socket.as_deref(), absolute),
        );
        check("kubeconfig", opt(self.kubeconfig.as_deref(), not_empty));
        check("crioConfig", opt(self.crio_config.as_deref(), absolute));
        check("nodeName", opt(self.node_name.as_deref(), node_name));
        check(
            "draNumaAttributes",
            opt(self.dra_numa_attributes.as_deref(), dra_attributes),
        );
        check(
            "podResourcesSocket",
            opt(self.pod_resources_socket.as_deref(), absolute_or_off),
        );
        check(
            "kubeletPodResourcesSocket",
            opt(
                self.kubelet_pod_resources_socket.as_deref(),
                absolute_or_off,
            ),
        );
        if let (Some(ours), Some(kubelet)) = (
            self.pod_resources_socket.as_deref(),
            self.kubelet_pod_resources_socket.as_deref(),
        ) {
            check("podResourcesSocket", not_the_kubelets(ours, kubelet));
        }
        check(
            "podResourcesQps",
            opt(self.pod_resources_qps.as_ref(), at_least_one),
        );
        check(
            "podResourcesBurst",
            opt(self.pod_resources_burst.as_ref(), at_least_one),
        );
        check(
            "metricsAddress",
            opt(self.metrics_address.as_deref(), metrics_address),
        );
        check(
            "kubeletConfig",
            opt(self.kubelet_config.as_deref(), not_empty),
        );
        check(
            "kubeletConfigDir",
            opt(self.kubelet_config_dir.as_deref(), |dir| {
                not_empty(dir)?;
                match self.kubelet_config {
                    Some(_) => Ok(()),
                    None => Err(
                        "needs kubeletConfig, the kubelet's main file it is merged over"
                            .to_string(),
                    ),
                }
            }),
        );
        if let Some(front) = &self.device_plugin_front {
            check("devicePluginFront.dir", opt(front.dir.as_deref(), absolute));
            check(
                "devicePluginFront.kubeletDir",
                opt(front.kubelet_dir.as_deref(), absolute),
            );
            check(
                "devicePluginFront.pluginsRegistry",
                opt(front.plugins_registry.as_deref(), absolute),
            );
            let dir = front
                .dir
                .as_deref()
                .unwrap_or(Path::new(crate::deviceplugin::DEFAULT_DIR));
            let kubelet = front
                .kubelet_dir
                .as_deref()
                .unwrap_or(Path::new(crate::deviceplugin::DEFAULT_KUBELET_DIR));
            check(
                "devicePluginFront.dir",
                (dir != kubelet && Some(dir) != front.plugins_registry.as_deref())
                    .then_some(())
                    .ok_or_else(|| {
                        "is the kubelet's directory: plugins must register with numa-shim, \
                         not with the kubelet"
                            .to_string()
                    }),
            );
            check(
                "devicePluginFront.pluginsRegistry",
                (front.plugins_registry.is_none() || front.kubelet_dir.is_none())
                    .then_some(())
                    .ok_or_else(|| {
                        "and kubeletDir are two ways to register with the kubelet: give one"
                            .to_string()
                    }),
            );
        }
        check(
            "apiVersion",
            opt(self.kubelet.api_version.as_deref(), |v| {
                expect(v, KUBELET_API_VERSION)
            }),
        );
        check(
            "kind",
            opt(self.kubelet.kind.as_deref(), |v| {
                expect(v, "KubeletConfiguration")
            }),
        );
        errors
    }

    /// What is allowed but deserves a word (`check-config` and `serve` show them): each names
    /// the key first, like the errors.
    pub fn warnings(&self) -> Vec<FieldError> {
        let mut warnings = Vec::new();
        let exposed = self
            .metrics_address
            .as_deref()
            .and_then(|t| t.parse::<SocketAddr>().ok())
            .filter(|a| !a.ip().is_loopback());
        if let Some(addr) = exposed {
            warnings.push(FieldError {
                field: "metricsAddress",
                reason: format!(
                    "{addr} is not loopback: /placement names every pod and container and \
                     /metrics counts them, without authentication, to anyone who can reach it"
                ),
            });
        }
        if self.device_plugin_front.is_some() {
            warnings.push(FieldError {
                field: "devicePluginFront",
                reason: "on: the kubelet sees fronted resources' devices without topology, so \
                         its topologyManagerPolicy no longer aligns them; numa-shim's decision \
                         (CPUs, memory and devices merged) chooses them. Point the device \
                         plugins at devicePluginFront.dir; a plugin that hard-codes the \
                         kubelet's socket path bypasses the front"
                    .to_string(),
            });
            if self.pod_knowledge == Some(super::PodKnowledge::Cri) {
                warnings.push(FieldError {
                    field: "devicePluginFront",
                    reason: "with podKnowledge: cri numa-shim cannot tell which pod the kubelet \
                             allocates devices for: the front answers the kubelet's own choice"
                        .to_string(),
                });
            }
        }
        warnings
    }

    /// Whether the file carries kubelet resource-manager fields of its own (besides
    /// `apiVersion`/`kind`); then `kubeletConfig`'s are not used.
    pub fn has_kubelet_fields(&self) -> bool {
        let mut own = self.kubelet.clone();
        own.api_version = None;
        own.kind = None;
        own != Default::default()
    }

    /// `logLevel`, else `logging.level`.
    pub fn log_level(&self) -> Option<&str> {
        self.log_level
            .as_deref()
            .or(self.logging.as_ref().and_then(|l| l.level.as_deref()))
    }

    fn log_levels_agree(&self) -> Result<(), String> {
        match (
            self.log_level.as_deref(),
            self.logging.as_ref().and_then(|l| l.level.as_deref()),
        ) {
            (Some(a), Some(b)) if a != b => Err(format!(
                "{a:?} disagrees with logging.level {b:?}; set one of them"
            )),
            _ => Ok(()),
        }
    }

    fn log_formats_agree(&self) -> Result<(), String> {
        match (
            self.log_format,
            self.logging.as_ref().and_then(|l| l.format),
        ) {
            (Some(a), Some(b)) if a != b => Err(format!(
                "{a:?} disagrees with logging.format {b:?}; set one of them"
            )
            .to_lowercase()),
            _ => Ok(()),
        }
    }
}

fn opt<T: ?Sized>(
    value: Option<&T>,
    check: impl FnOnce(&T) -> Result<(), String>,
) -> Result<(), String> {
    value.map_or(Ok(()), check)
}

/// A Node name: a DNS subdomain (lowercase letters, digits, `-`, `.`; at most 253).
fn node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    ok.then_some(()).ok_or_else(|| {
        format!("{name:?} is not a valid node name (lowercase DNS subdomain, e.g. node-1.example)")
    })
}

fn endpoint(text: &str) -> Result<std::path::PathBuf, String> {
    transport::parse_endpoint(text).map_err(|e| e.to_string())
}

fn socket_mode(text: &str) -> Result<(), String> {
    let mode = parse_mode(text).map_err(|e| e.to_string())?;
    if mode & 0o600 != 0o600 {
        return Err(format!(
            "mode {text:?} does not let numa-shim's user read and write its own socket"
        ));
    }
    if mode & 0o002 != 0 {
        return Err(format!(
            "mode {text:?} lets every local user write the CRI socket (and so run containers)"
        ));
    }
    Ok(())
}

/// A tracing filter (`info`, `warn,numa_shim=debug`); blank is refused rather than read as
/// the default.
fn log_filter(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("must not be empty (leave it out for RUST_LOG or info)".to_string());
    }
    crate::telemetry::logging::filter_from(Some(text))
        .map(drop)
        .map_err(|e| e.to_string())
}

fn positive(text: &str) -> Result<(), String> {
    match parse_duration(text) {
        Ok(Duration::ZERO) => Err(format!("{text:?} must be longer than 0")),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn absolute(path: &Path) -> Result<(), String> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(format!("{:?} must be an absolute path", path.display()))
    }
}

fn at_least_one(n: &u32) -> Result<(), String> {
    (*n >= 1)
        .then_some(())
        .ok_or_else(|| "must be at least 1".to_string())
}

/// numa-shim's PodResources socket must not be the kubelet's (unless it is off).
fn not_the_kubelets(ours: &Path, kubelet: &Path) -> Result<(), String> {
    if super::is_off(ours) || ours != kubelet {
        return Ok(());
    }
    Err(
        "is the kubelet's own socket (kubeletPodResourcesSocket); numa-shim must listen elsewhere"
            .to_string(),
    )
}

/// An absolute path, or `none` / empty for "off" (see [`super::is_off`]).
fn absolute_or_off(path: &Path) -> Result<(), String> {
    if super::is_off(path) {
        return Ok(());
    }
    absolute(path)
}

fn not_empty(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        Err("must not be empty".to_string())
    } else {
        Ok(())
    }
}

fn metrics_address(text: &str) -> Result<(), String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("{text:?} is not an IP:port address, e.g. 127.0.0.1:9464"))?;
    if addr.port() == 0 {
        return Err(format!("{text:?} needs a fixed port for scrapers to find"));
    }
    Ok(())
}

fn expect(value: &str, wanted: &str) -> Result<(), String> {
    if value == wanted {
        Ok(())
    } else {
        Err(format!("{value:?} is not {wanted:?}"))
    }
}

/// DRA device attribute names in full: `<domain>/<name>`, the domain a DNS subdomain and the name
/// a C identifier of at most 32 characters (the API server's rule for attribute names).
fn dra_attributes(names: &[String]) -> Result<(), String> {
    for full in names {
        let bad = |why: &str| Err(format!("{full:?}: {why}"));
        let Some((domain, name)) = full.split_once('/') else {
            return bad(
                "needs the driver's domain: <domain>/<name>, e.g. gpu.example.com/numaNode",
            );
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if domain.is_empty() || domain.len() > 63 || !domain.split('.').all(label_ok) {
            return bad("the domain is not a DNS subdomain of at most 63 characters");
        }
        let ident = !name.is_empty()
            && name.len() <= 32
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !ident {
            return bad("the name is not a C identifier of at most 32 characters");
        }
    }
    Ok(())
}

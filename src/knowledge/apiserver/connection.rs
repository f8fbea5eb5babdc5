//! How to reach the API server: a kubeconfig file (current-context → cluster and user) or the
//! in-cluster service-account config, turned into a base URL, a TLS client configuration
//! (`tls`, which follows rotated certificate files) and credentials. Reads files only; never
//! opens a connection.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls::pki_types::ServerName;

use super::ApiServerError;
use kubeconfig::{Kubeconfig, User};
use tls::{ClientTls, Part, Pem, Sources};

mod kubeconfig;
mod tls;

/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A resolved API server: base URL, TLS settings (for `https`) and credentials.
#[derive(Clone)]
pub struct Connection {
    /// The server URL without a trailing slash, e.g. `https://10.0.0.1:6443`.
    pub(super) server: String,
    pub(super) host: String,
    pub(super) port: u16,
    /// The path prefix of `server` (empty for most clusters).
    pub(super) prefix: String,
    pub(super) tls: Option<ClientTls>,
    pub(super) auth: Auth,
}

/// Credentials sent with every request.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Auth {
    None,
    Token(String),
    /// Re-read on every request, since the kubelet rotates projected tokens.
    TokenFile(PathBuf),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::None => "none".to_string(),
            Auth::Token(_) => "token".to_string(),
            Auth::TokenFile(path) => format!("token file {}", path.display()),
        };
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("tls", &self.tls.is_some())
            .field("auth", &auth)
            .finish()
    }
}

impl Connection {
    /// The server URL (for logs and errors).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The bearer token to send, if any.
    pub(super) fn token(&self) -> Result<Option<String>, ApiServerError> {
        match &self.auth {
            Auth::None => Ok(None),
            Auth::Token(token) => Ok(Some(token.clone())),
            Auth::TokenFile(path) => Ok(Some(read_text(path)?.trim().to_string())),
        }
    }

    /// The connection the kubeconfig file at `path` selects with its `current-context`.
    pub fn from_kubeconfig(path: &Path) -> Result<Self, ApiServerError> {
        let text = read_text(path)?;
        let bad = |field: String, reason: String| ApiServerError::Kubeconfig {
            path: path.to_path_buf(),
            field,
            reason,
        };
        let file: Kubeconfig =
            serde_yaml_ng::from_str(&text).map_err(|e| bad("(file)".into(), e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let current = file
            .current_context
            .filter(|c| !c.is_empty())
            .ok_or_else(|| bad("current-context".into(), "not set".into()))?;
        let context = find(&file.contexts, &current, |c| &c.name).ok_or_else(|| {
            bad(
                "current-context".into(),
                format!("no context named {current:?}"),
            )
        })?;
        let ctx_field = format!("contexts[{current}].context");
        let cluster_name = &context.context.cluster;
        let cluster = find(&file.clusters, cluster_name, |c| &c.name).ok_or_else(|| {
            bad(
                format!("{ctx_field}.cluster"),
                format!("no cluster named {cluster_name:?}"),
            )
        })?;
        let cf = format!("clusters[{cluster_name}].cluster");
        let c = &cluster.cluster;
        if c.insecure_skip_tls_verify {
            return Err(bad(
                format!("{cf}.insecure-skip-tls-verify"),
                "not supported; give certificate-authority(-data)".into(),
            ));
        }
        let server = c
            .server
            .clone()
            .ok_or_else(|| bad(format!("{cf}.server"), "not set".into()))?;
        let ca = pem_source(
            dir,
            c.certificate_authority.as_deref(),
            c.certificate_authority_data.as_deref(),
        )
        .map_err(|r| bad(format!("{cf}.certificate-authority-data"), r))?;
        let user = match context.context.user.as_deref().filter(|u| !u.is_empty()) {
            None => User::default(),
            Some(name) => find(&file.users, name, |u| &u.name)
                .map(|u| u.user.clone())
                .ok_or_else(|| {
                    bad(
                        format!("{ctx_field}.user"),
                        format!("no user named {name:?}"),
                    )
                })?,
        };
        let uf = format!(
            "users[{}].user",
            context.context.user.as_deref().unwrap_or("")
        );
        for (key, set) in [
            ("exec", user.exec.is_some()),
            ("auth-provider", user.auth_provider.is_some()),
        ] {
            if set {
                return Err(bad(
                    format!("{uf}.{key}"),
                    "not supported; use a token or client certificate".into(),
                ));
            }
        }
        let cert = pem_source(
            dir,
            user.client_certificate.as_deref(),
            user.client_certificate_data.as_deref(),
        )
        .map_err(|r| bad(format!("{uf}.client-certificate-data"), r))?;
        let key = pem_source(
            dir,
            user.client_key.as_deref(),
            user.client_key_data.as_deref(),
        )
        .map_err(|r| bad(format!("{uf}.client-key-data"), r))?;
        let auth = match (user.token.filter(|t| !t.is_empty()), user.token_file) {
            (Some(token), _) => Auth::Token(token),
            (None, Some(file)) => Auth::TokenFile(dir.join(file)),
            (None, None) => Auth::None,
        };
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad(
                    format!("{uf}.client-key"),
                    "required with client-certificate".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(bad(
                    format!("{uf}.client-certificate"),
                    "required with client-key".into(),
                ))
            }
        };
        let sources = Sources { ca, client };
        Self::build(&server, sources, c.tls_server_name.clone(), auth).map_err(|(f, r)| {
            let key = |base: &str, data: &Option<String>| match data {
                Some(d) if !d.is_empty() => format!("{base}-data"),
                _ => base.to_string(),
            };
            let field = match f {
                Part::Server => format!("{cf}.server"),
                Part::Ca => format!(
                    "{cf}.{}",
                    key("certificate-authority", &c.certificate_authority_data)
                ),
                Part::ClientCert => format!(
                    "{uf}.{}",
                    key("client-certificate", &user.client_certificate_data)
                ),
                Part::ClientKey => format!("{uf}.{}", key("client-key", &user.client_key_data)),
            };
            bad(field, r)
        })
    }

    /// The in-cluster connection: `KUBERNETES_SERVICE_HOST`/`PORT` from `env`, the token and
    /// CA bundle from `dir` (normally `SERVICE_ACCOUNT_DIR`).
    pub fn in_cluster(
        env: impl Fn(&str) -> Option<String>,
        dir: &Path,
    ) -> Result<Self, ApiServerError> {
        let var = |name: &str| {
            env(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| ApiServerError::InCluster {
                    reason: format!("{name} is not set (not running in a pod? give a kubeconfig)"),
                })
        };
        let host = var("KUBERNETES_SERVICE_HOST")?;
        let port = var("KUBERNETES_SERVICE_PORT")?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let token = dir.join("token");
        read_text(&token)?;
        let ca_path = dir.join("ca.crt");
        std::fs::metadata(&ca_path).map_err(|source| ApiServerError::Read {
            path: ca_path.clone(),
            source,
        })?;
        // The CA bundle (kube-root-ca.crt, projected) is read again for each connection too.
        let sources = Sources {
            ca: Some(Pem::File(ca_path.clone())),
            client: None,
        };
        Self::build(
            &format!("https://{host}:{port}"),
            sources,
            None,
            Auth::TokenFile(token),
        )
        .map_err(|(_, reason)| ApiServerError::InCluster {
            reason: format!("{}: {reason}", ca_path.display()),
        })
    }

    fn build(
        server: &str,
        sources: Sources,
        server_name: Option<String>,
        auth: Auth,
    ) -> Result<Self, (Part, String)> {
        let uri: http::Uri = server
            .parse()
            .map_err(|e| (Part::Server, format!("{server:?}: {e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err((
                    Part::Server,
                    format!("{server:?}: expected an http:// or https:// URL"),
                ))
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| (Part::Server, format!("{server:?}: no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let name = server_name.unwrap_or_else(|| host.clone());
            let name = ServerName::try_from(name.clone())
                .map_err(|e| (Part::Server, format!("{name:?}: {e}")))?;
            Some(ClientTls::new(name, sources)?)
        } else {
            None
        };
        Ok(Self {
            server: server.trim_end_matches('/').to_string(),
            host,
            port,
            prefix: uri.path().trim_end_matches('/').to_string(),
            tls,
            auth,
        })
    }
}

/// A `foo` / `foo-data` pair: the base64 data (which wins, as in client-go), or the file
/// (relative to the kubeconfig's directory), read when the TLS configuration is built and again
/// before each connection. The error is the reason the data is invalid.
fn pem_source(dir: &Path, file: Option<&Path>, data: Option<&str>) -> Result<Option<Pem>, String> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let compact: String = data.split_whitespace().collect();
        return base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map(|bytes| Some(Pem::Data(bytes)))
            .map_err(|e| format!("invalid base64: {e}"));
    }
    Ok(file
        .filter(|f| !f.as_os_str().is_empty())
        .map(|file| Pem::File(dir.join(file))))
}

fn read_text(path: &Path) -> Result<String, ApiServerError> {
    std::fs::read_to_string(path).map_err(|source| ApiServerError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn find<'a, T>(items: &'a [T], name: &str, key: impl Fn(&T) -> &String) -> Option<&'a T> {
    items.iter().find(|item| key(item) == name)
}

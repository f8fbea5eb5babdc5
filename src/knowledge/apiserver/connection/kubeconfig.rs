//! The kubeconfig file's schema (the parts numa-shim reads), as client-go writes it. Schema only:
//! resolving contexts and reading referenced files is `connection`'s job.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub(super) struct Kubeconfig {
    pub(super) current_context: Option<String>,
    pub(super) contexts: Vec<NamedContext>,
    pub(super) clusters: Vec<NamedCluster>,
    pub(super) users: Vec<NamedUser>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct NamedContext {
    pub(super) name: String,
    pub(super) context: Context,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Context {
    pub(super) cluster: String,
    pub(super) user: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct NamedCluster {
    pub(super) name: String,
    pub(super) cluster: Cluster,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub(super) struct Cluster {
    pub(super) server: Option<String>,
    pub(super) certificate_authority: Option<PathBuf>,
    pub(super) certificate_authority_data: Option<String>,
    pub(super) insecure_skip_tls_verify: bool,
    pub(super) tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct NamedUser {
    pub(super) name: String,
    pub(super) user: User,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub(super) struct User {
    pub(super) token: Option<String>,
    #[serde(rename = "tokenFile")]
    pub(super) token_file: Option<PathBuf>,
    pub(super) client_certificate: Option<PathBuf>,
    pub(super) client_certificate_data: Option<String>,
    pub(super) client_key: Option<PathBuf>,
    pub(super) client_key_data: Option<String>,
    pub(super) exec: Option<serde_yaml_ng::Value>,
    pub(super) auth_provider: Option<serde_yaml_ng::Value>,
}

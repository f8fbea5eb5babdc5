//! Kubernetes-facing inputs: v1 Pod manifests and the resource-manager part of a
//! KubeletConfiguration, with the API's defaulting and the kubelet's validation, turned into the
//! decision core's types (`placement::PodSpec`, `placement::Config`).
//!
//! `k8s` owns the field names, value formats and error texts of those two resources. It never
//! decides placement and never does I/O: callers hand it text or parsed documents (the scenario
//! loader and the shell read the files).

pub mod kubelet_config;
pub mod pod;

pub use kubelet_config::{
    ConfigWarning, KubeletConfigError, KubeletConfiguration, KubeletFinding, ResolvedConfig,
    RunningConfigError, Severity,
};
pub use pod::{Pod, PodError, ResourceRequirements};

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Why a YAML/JSON text could not be split into documents.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The text is not valid YAML (JSON is YAML), with the parser's position.
    #[error("document {index}: {source}")]
    Yaml {
        index: usize,
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// No document of the wanted kind.
    #[error("no {kind} document")]
    Missing { kind: &'static str },
    /// More than one document of a kind there must be one of.
    #[error("more than one {kind} document")]
    Several { kind: &'static str },
}

/// Deserializes every document of a (possibly multi-document) YAML or JSON text, skipping empty
/// documents (a leading `---`, a trailing separator, a comment-only document). Errors carry the
/// document index and the field path the parser was at.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, DocumentError> {
    let mut out = Vec::new();
    for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Option::<T>::deserialize(doc)
            .map_err(|source| DocumentError::Yaml { index, source })?;
        out.extend(value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_multi_document_yaml_and_skips_empty_ones() {
        let text = "---\nkind: Pod\nmetadata: {name: a}\n---\n# only a comment\n---\nkind: KubeletConfiguration\n";
        let docs: Vec<serde_json::Value> = documents(text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "Pod");
        assert_eq!(docs[1]["kind"], "KubeletConfiguration");
    }

    #[test]
    fn reads_json_as_yaml() {
        let docs: Vec<serde_json::Value> =
            documents(r#"{"kind": "Pod", "spec": {"containers": []}}"#).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["kind"], "Pod");
    }

    #[test]
    fn reports_the_failing_document() {
        let err = documents::<serde_json::Value>("kind: Pod\n---\nkind: [unclosed\n").unwrap_err();
        assert!(err.to_string().starts_with("document 1:"), "{err}");
    }
}

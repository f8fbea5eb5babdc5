//! The TLS client side of a connection: the CA bundle and the client certificate/key, each taken
//! from inline data or from a file. Files are read again before every new connection, and the
//! rustls configuration is rebuilt when their bytes changed, so a certificate the kubelet rotates
//! in place (kubelet-client-current.pem), a renewed CA bundle or a re-issued client certificate
//! is used without a restart. A set of files that does not load (a rotation caught half-way)
//! keeps the last good configuration. Never opens a connection.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tracing::{info, warn};

/// Where a PEM input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pem {
    /// `*-data` in a kubeconfig: fixed.
    Data(Vec<u8>),
    /// A file, read again before each connection.
    File(PathBuf),
}

impl Pem {
    fn read(&self) -> Result<Vec<u8>, String> {
        match self {
            Self::Data(bytes) => Ok(bytes.clone()),
            Self::File(path) => {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            }
        }
    }
}

/// Which input a build error concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Server,
    Ca,
    ClientCert,
    ClientKey,
}

/// The inputs of a TLS client configuration.
#[derive(Debug, Clone)]
pub(super) struct Sources {
    pub(super) ca: Option<Pem>,
    pub(super) client: Option<(Pem, Pem)>,
}

/// The bytes a configuration was built from.
#[derive(Clone, PartialEq, Eq)]
struct Inputs {
    ca: Vec<u8>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

struct Loaded {
    inputs: Inputs,
    config: Arc<rustls::ClientConfig>,
}

/// A TLS client configuration that follows its files. Clones share the loaded configuration.
#[derive(Clone)]
pub(crate) struct ClientTls {
    pub(crate) name: ServerName<'static>,
    sources: Sources,
    loaded: Arc<Mutex<Loaded>>,
}

impl ClientTls {
    /// Loads `sources` once; errors name the input at fault.
    pub(super) fn new(name: ServerName<'static>, sources: Sources) -> Result<Self, (Part, String)> {
        let inputs = read(&sources)?;
        let config = Arc::new(build(&inputs)?);
        Ok(Self {
            name,
            sources,
            loaded: Arc::new(Mutex::new(Loaded { inputs, config })),
        })
    }

    /// The configuration for the next connection: rebuilt first if a file changed.
    pub(crate) fn config(&self) -> Arc<rustls::ClientConfig> {
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match read(&self.sources) {
            Ok(inputs) if inputs == loaded.inputs => {}
            Ok(inputs) => match build(&inputs) {
                Ok(config) => {
                    info!(files = %self.files(), "api server credentials reloaded");
                    *loaded = Loaded {
                        inputs,
                        config: Arc::new(config),
                    };
                }
                Err((part, reason)) => {
                    warn!(?part, reason = %reason, "api server credentials changed but do not load; keeping the previous ones")
                }
            },
            Err((part, reason)) => {
                warn!(?part, reason = %reason, "api server credentials unreadable; keeping the previous ones")
            }
        }
        loaded.config.clone()
    }

    fn files(&self) -> String {
        let mut files = Vec::new();
        let mut add = |pem: &Pem| {
            if let Pem::File(path) = pem {
                files.push(path.display().to_string());
            }
        };
        if let Some(ca) = &self.sources.ca {
            add(ca);
        }
        if let Some((cert, key)) = &self.sources.client {
            add(cert);
            add(key);
        }
        files.dedup();
        files.join(",")
    }
}

fn read(sources: &Sources) -> Result<Inputs, (Part, String)> {
    let ca = sources
        .ca
        .as_ref()
        .ok_or((
            Part::Ca,
            "required for an https server (no system trust store is used)".to_string(),
        ))?
        .read()
        .map_err(|e| (Part::Ca, e))?;
    let client = match &sources.client {
        None => None,
        Some((cert, key)) => Some((
            cert.read().map_err(|e| (Part::ClientCert, e))?,
            key.read().map_err(|e| (Part::ClientKey, e))?,
        )),
    };
    Ok(Inputs { ca, client })
}

fn build(inputs: &Inputs) -> Result<rustls::ClientConfig, (Part, String)> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&inputs.ca) {
        let cert = cert.map_err(|e| (Part::Ca, format!("invalid PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| (Part::Ca, format!("invalid certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err((Part::Ca, "holds no PEM certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| (Part::Server, e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match &inputs.client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| (Part::ClientCert, format!("invalid PEM: {e}")))?;
            if chain.is_empty() {
                return Err((Part::ClientCert, "holds no PEM certificate".into()));
            }
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| (Part::ClientKey, format!("invalid PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| (Part::ClientKey, e.to_string()))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn changed_files_are_loaded_and_broken_ones_keep_the_last_good_config() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, _) = pem_pair("ca");
        let (cert, key) = pem_pair("client-1");
        let (ca_path, pem_path) = (dir.path().join("ca.crt"), dir.path().join("client.pem"));
        std::fs::write(&ca_path, &ca).unwrap();
        // Certificate and key in one file, named twice (the kubelet's layout).
        std::fs::write(&pem_path, format!("{cert}{key}")).unwrap();
        let sources = Sources {
            ca: Some(Pem::File(ca_path)),
            client: Some((Pem::File(pem_path.clone()), Pem::File(pem_path.clone()))),
        };
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let tls = ClientTls::new(name, sources).unwrap();
        let first = tls.config();
        assert!(
            Arc::ptr_eq(&first, &tls.config()),
            "unchanged files: same config"
        );

        let (cert, key) = pem_pair("client-2");
        std::fs::write(&pem_path, format!("{cert}{key}")).unwrap();
        let second = tls.config();
        assert!(
            !Arc::ptr_eq(&first, &second),
            "a rotated certificate is loaded"
        );

        std::fs::write(&pem_path, "half-written").unwrap();
        assert!(
            Arc::ptr_eq(&second, &tls.config()),
            "a broken file keeps the last good one"
        );
        std::fs::remove_file(&pem_path).unwrap();
        assert!(Arc::ptr_eq(&second, &tls.config()), "a missing file too");
        // Clones share what was loaded.
        let clone = tls.clone();
        std::fs::write(&pem_path, format!("{cert}{key}")).unwrap();
        assert!(Arc::ptr_eq(&second, &clone.config()));
    }

    #[test]
    fn the_first_load_names_the_input_at_fault() {
        let (cert, key) = pem_pair("c");
        let name = ServerName::try_from("localhost").unwrap();
        let sources = |ca: &str, key: &str| Sources {
            ca: Some(Pem::Data(ca.as_bytes().to_vec())),
            client: Some((
                Pem::Data(cert.as_bytes().to_vec()),
                Pem::Data(key.as_bytes().to_vec()),
            )),
        };
        let err = ClientTls::new(name.clone(), sources("x", &key))
            .err()
            .unwrap();
        assert_eq!(err.0, Part::Ca, "{err:?}");
        let err = ClientTls::new(name.clone(), sources(&cert, "x"))
            .err()
            .unwrap();
        assert_eq!(err.0, Part::ClientKey, "{err:?}");
        let missing = Sources {
            ca: Some(Pem::File("/nonexistent/ca.crt".into())),
            client: None,
        };
        let err = ClientTls::new(name, missing).err().unwrap();
        assert!(
            err.0 == Part::Ca && err.1.contains("/nonexistent/ca.crt"),
            "{err:?}"
        );
    }
}

//! Helpers for the tests against the real loopback control plane: kubectl as the admin, the
//! control-plane script (stop/start the API server, tokens), a namespace and a Node object per
//! test, a TCP link the test can cut between numa-shim and the API server, and certificates
//! signed by the control plane's CA.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::knowledge::apiserver::{self, Connection, WatchSettings, WatchStats};
use crate::knowledge::PodCache;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Disruptive tests (the API server stopped) must not overlap any other.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The control plane the stage script started (`NUMA_SHIM_IT_CP`, `NUMA_SHIM_IT_CONTROLPLANE`).
#[derive(Debug, Clone)]
pub struct Cp {
    pub dir: PathBuf,
    script: PathBuf,
}

impl Cp {
    pub fn get() -> Self {
        let var = |name: &str| {
            std::env::var(name)
                .unwrap_or_else(|_| panic!("{name} is not set: run integration/apiserver-tests.sh"))
        };
        Self {
            dir: PathBuf::from(var("NUMA_SHIM_IT_CP")),
            script: PathBuf::from(var("NUMA_SHIM_IT_CONTROLPLANE")),
        }
    }

    /// The API server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        read(&self.dir.join("apiserver.port"))
            .trim()
            .parse()
            .unwrap()
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// `controlplane.sh ARGS`, its stdout; panics with stderr on failure.
    pub fn script(&self, args: &[&str]) -> String {
        run(Command::new(&self.script).args(args), None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// kubectl as the admin; `Err` carries stderr.
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = Command::new(&self.script);
        cmd.arg("kubectl").args(args);
        run(&mut cmd, stdin)
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_kubectl(args, None)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    pub fn kubectl_in(&self, args: &[&str], stdin: &str) -> String {
        self.try_kubectl(args, Some(stdin))
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    /// `kubectl create` of the object `manifest` (JSON or YAML); returns its UID.
    pub fn create(&self, manifest: &str) -> String {
        self.kubectl_in(
            &["create", "-f", "-", "-o", "jsonpath={.metadata.uid}"],
            manifest,
        )
        .trim()
        .to_string()
    }

    /// Stops the API server; it starts again when the guard drops (also when the test fails).
    #[must_use]
    pub fn stop_apiserver(&self) -> Stopped {
        self.script(&["stop-apiserver"]);
        Stopped {
            cp: Some(self.clone()),
        }
    }

    pub fn start_apiserver(&self) {
        self.script(&["start-apiserver"]);
    }

    /// Bumps etcd's revision without the API server (a key outside /registry).
    pub fn bump_etcd_revision(&self) {
        // base64 of "/numa-shim-it/bump" and "x".
        self.script(&[
            "etcd",
            "/v3/kv/put",
            r#"{"key":"L251bWEtc2hpbS1pdC9idW1w","value":"eA=="}"#,
        ]);
    }
}

/// The API server is stopped while this lives.
pub struct Stopped {
    cp: Option<Cp>,
}

impl Stopped {
    pub fn start(mut self) {
        if let Some(cp) = self.cp.take() {
            cp.start_apiserver();
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(cp) = self.cp.take() {
            cp.start_apiserver();
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String, String> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A namespace and a Node object of the test's own (no kubelet behind it: its pods stay
/// Pending), removed on drop.
pub struct TestNode {
    pub cp: Cp,
    pub name: String,
    pub namespace: String,
}

impl TestNode {
    pub fn new(cp: &Cp, name: &str) -> Self {
        let node = format!("it-{name}");
        let namespace = format!("t-{name}");
        let _ = cp.try_kubectl(
            &[
                "delete",
                "namespace",
                &namespace,
                "--ignore-not-found",
                "--wait=true",
            ],
            None,
        );
        cp.kubectl(&["create", "namespace", &namespace]);
        // The controller-manager creates the namespace's default ServiceAccount, which the
        // ServiceAccount admission plugin requires of every pod.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cp
            .try_kubectl(
                &["-n", &namespace, "get", "serviceaccount", "default"],
                None,
            )
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {namespace}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        cp.kubectl_in(
            &["apply", "-f", "-"],
            &format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{node}\"}}}}"
            ),
        );
        Self {
            cp: cp.clone(),
            name: node,
            namespace,
        }
    }

    /// Creates a pod bound to this node with one container of `cpu` CPUs; returns its UID.
    pub fn create_pod(&self, name: &str, cpu: &str) -> String {
        let pod = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}"}},
              "spec":{{"nodeName":"{node}","containers":[{{"name":"app","image":"busybox",
              "resources":{{"requests":{{"cpu":"{cpu}","memory":"64Mi"}},
                            "limits":{{"cpu":"{cpu}","memory":"64Mi"}}}}}}]}}}}"#,
            ns = self.namespace,
            node = self.name
        );
        self.cp.create(&pod)
    }

    pub fn delete_pod(&self, name: &str) {
        self.cp.kubectl(&[
            "-n",
            &self.namespace,
            "delete",
            "pod",
            name,
            "--grace-period=0",
            "--force",
        ]);
    }

    pub fn label_pod(&self, name: &str, label: &str) {
        self.cp
            .kubectl(&["-n", &self.namespace, "label", "pod", name, label]);
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = self.cp.try_kubectl(
            &["delete", "namespace", &self.namespace, "--wait=false"],
            None,
        );
        let _ = self
            .cp
            .try_kubectl(&["delete", "node", &self.name, "--wait=false"], None);
    }
}

/// A kubeconfig in `dir` for `server` (the CA of the control plane) with these user lines.
pub fn kubeconfig(cp: &Cp, dir: &Path, server: &str, user: &[String]) -> PathBuf {
    let mut text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: t\n  cluster:\n    \
         server: {server}\n    certificate-authority: {}\ncontexts:\n- name: t\n  context: \
         {{cluster: t, user: t}}\nusers:\n- name: t\n  user:\n",
        cp.ca().display()
    );
    for line in user {
        text.push_str(&format!("    {line}\n"));
    }
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    path
}

/// A running `apiserver::watch_with` over `kubeconfig`, with its cache and counters.
pub struct Watched {
    pub cache: Arc<PodCache>,
    pub stats: Arc<WatchStats>,
    task: tokio::task::JoinHandle<()>,
}

impl Watched {
    pub fn start(kubeconfig: &Path, node: &str, timeout: Duration) -> Self {
        let conn = Connection::from_kubeconfig(kubeconfig).unwrap();
        let cache = Arc::new(PodCache::default());
        let stats = Arc::new(WatchStats::default());
        let settings = WatchSettings {
            timeout,
            stats: stats.clone(),
        };
        let task = tokio::spawn(apiserver::watch_with(
            conn,
            node.to_string(),
            cache.clone(),
            settings,
        ));
        Self { cache, stats, task }
    }

    pub fn count(&self, which: fn(&WatchStats) -> &std::sync::atomic::AtomicU64) -> u64 {
        which(&self.stats).load(Ordering::Relaxed)
    }

    pub fn summary(&self) -> String {
        let s = &self.stats;
        format!(
            "lists {} watches {} events {} bookmarks {} expired {} errors {} rv {:?} pods {}",
            s.lists.load(Ordering::Relaxed),
            s.watches.load(Ordering::Relaxed),
            s.events.load(Ordering::Relaxed),
            s.bookmarks.load(Ordering::Relaxed),
            s.expired.load(Ordering::Relaxed),
            s.errors.load(Ordering::Relaxed),
            s.resource_version(),
            self.cache.len()
        )
    }

    /// Waits up to `secs` for `check` on the cache; panics with the counters otherwise.
    pub async fn eventually(&self, what: &str, secs: u64, check: impl Fn(&PodCache) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if check(&self.cache) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out after {secs}s waiting for: {what} ({})",
            self.summary()
        );
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits up to `secs` for `check`.
pub async fn eventually(what: &str, secs: u64, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {secs}s waiting for: {what}");
}

/// A TCP forwarder on 127.0.0.1 in front of the API server. `cut` closes every open connection
/// and refuses new ones (as a broken network would) until `restore`.
pub struct Link {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut rx = state.subscribe();
                if !*rx.borrow() {
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = rx.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { addr, up, task }
    }

    pub fn server(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// A client certificate for `cn` in group `o`, signed by the control plane's CA, valid from a
/// minute ago until `valid_for` from now: cert and key PEM in one string (as the kubelet writes
/// kubelet-client-current.pem).
pub fn client_cert(cp: &Cp, cn: &str, o: &str, valid_for: Duration) -> String {
    let ca_key = rcgen::KeyPair::from_pem(&read(&cp.dir.join("pki/ca.key"))).unwrap();
    // The CA's subject as lib/pki.sh writes it, so the leaf's issuer names it byte for byte.
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "numa-shim-it-ca");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, o);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + valid_for).into();
    let cert = params.signed_by(&key, &issuer).unwrap();
    format!("{}{}", cert.pem(), key.serialize_pem())
}

/// Replaces `path` atomically with `text` (write a temporary file, rename).
pub fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

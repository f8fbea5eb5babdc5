//! The one launcher of a `numa-shim serve` process for the real-peer suites
//! (`tests/realruntime`, `tests/realkubelet`, `tests/cluster`): spawns the binary with its flags
//! and its log in a file, waits until it answers CRI `Version` on its socket, stops it as a
//! crash (SIGKILL) or cleanly (SIGTERM), starts it again with the same flags, and shows the
//! log's tail beside a failed test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proto::cri::v1 as cri;
use crate::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::transport::unix_channel;

/// How long a fresh process may take to answer on its socket.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The `numa-shim` binary cargo built for the test binary running now, beside it
/// (`target/<profile>/numa-shim`, what `CARGO_BIN_EXE_numa-shim` names in an integration test):
/// for support code in the library, where that variable is not set.
pub fn built_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/numa-shim
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/<profile>/deps");
    profile.join(format!("numa-shim{}", std::env::consts::EXE_SUFFIX))
}

/// `numa-shim serve` listening on `socket` in front of the runtime at `runtime`, then `flags`.
pub fn serve_args(socket: &Path, runtime: &Path, flags: &[&str]) -> Vec<String> {
    let mut args = vec![
        "serve".to_string(),
        "--listen".to_string(),
        format!("unix://{}", socket.display()),
        "--runtime".to_string(),
        format!("unix://{}", runtime.display()),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    args
}

/// A `numa-shim` process; SIGKILLed when dropped.
pub struct ShimProcess {
    bin: PathBuf,
    args: Vec<String>,
    socket: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl ShimProcess {
    /// Starts `bin` with `args` (which make it listen on `socket`), its stderr appended to `log`,
    /// and waits until it answers.
    pub async fn start(bin: &Path, args: Vec<String>, socket: &Path, log: &Path) -> Self {
        let mut process = Self {
            bin: bin.to_path_buf(),
            args,
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
            child: None,
        };
        process.spawn().await;
        process
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "numa-shim is still running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.bin)
            .args(&self.args)
            .env("RUST_LOG", "numa_shim=debug,info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + READY_WITHIN;
        while !self.answers().await {
            assert!(
                Instant::now() < deadline,
                "numa-shim did not answer; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it answers CRI `Version` on its socket.
    pub async fn answers(&self) -> bool {
        let mut client = RuntimeServiceClient::new(unix_channel(&self.socket));
        client.version(cri::VersionRequest::default()).await.is_ok()
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (numa-shim drains its calls and exits); waits for the exit.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Starts the process again with the same flags after [`Self::kill9`] or [`Self::terminate`].
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    /// SIGKILL and start again (same socket, state dir and settings), as a supervisor would.
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// Everything it logged so far (across restarts).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ShimProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            // What numa-shim decided, recovered and refused, beside the failed test's output.
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- the last lines of {}:", self.log.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

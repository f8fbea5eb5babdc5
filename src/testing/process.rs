//! The one launcher of a `numa-shim serve` process, for every test that runs the binary
//! (`tests/e2e`, `tests/apiserver` and the real-peer suites `tests/realruntime`,
//! `tests/realkubelet`, `tests/cluster`): spawns it with its flags and its log in a file, waits
//! until it answers CRI `Version` on its socket (or leaves a test of start-up to watch it),
//! signals it, stops it as a crash (SIGKILL) or cleanly (SIGTERM, with or without asserting its
//! exit), starts it again with the same flags, and shows the log's tail beside a failed test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::proto::cri::v1 as cri;
use crate::proto::cri::v1::runtime_service_client::RuntimeServiceClient;
use crate::transport::unix_channel;

/// How long a fresh process may take to answer on its socket ([`ShimProcess::start`]).
pub const READY_WITHIN: Duration = Duration::from_secs(30);

/// How long [`ShimProcess::stop`] gives a process to exit after SIGTERM.
const STOP_WITHIN: Duration = Duration::from_secs(10);

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
    /// and waits until it answers (within [`READY_WITHIN`]).
    pub async fn start(bin: &Path, args: Vec<String>, socket: &Path, log: &Path) -> Self {
        let mut process = Self::spawn(bin, args, socket, log);
        process.wait_answering(READY_WITHIN).await;
        process
    }

    /// Starts `bin` as [`Self::start`] does, without waiting for it to answer: for a test of
    /// start-up itself (a process that waits for its peers, or is to fail), or one that waits for
    /// something else or longer ([`Self::wait_answering`]).
    pub fn spawn(bin: &Path, args: Vec<String>, socket: &Path, log: &Path) -> Self {
        let mut process = Self {
            bin: bin.to_path_buf(),
            args,
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
            child: None,
        };
        process.launch();
        process
    }

    fn launch(&mut self) {
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
    }

    /// Waits until it answers on its socket; fails the test (with the log) when it exits first
    /// or has not answered within `within`.
    pub async fn wait_answering(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.answers().await {
            if let Some(status) = self.exited() {
                panic!(
                    "numa-shim exited ({status}) before it answered; log:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "numa-shim did not answer within {within:?}; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How it ended, once it has exited by itself; `None` while it runs (and after
    /// [`Self::kill9`], [`Self::terminate`] or [`Self::stop`]).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().unwrap())
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

    /// Sends `signal` (as `kill` names it: `HUP`, `TERM`, ...) to the running process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("numa-shim is not running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}: {status}");
    }

    /// SIGTERM (numa-shim drains its calls and exits); waits for the exit, whatever it is.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and a clean exit: fails the test (with the log) unless it exits with status 0
    /// within 10 s (then it is SIGKILLed when dropped).
    pub async fn stop(&mut self) {
        self.signal("TERM");
        let deadline = Instant::now() + STOP_WITHIN;
        loop {
            if let Some(status) = self.exited() {
                self.child = None;
                assert!(
                    status.success(),
                    "numa-shim exited with {status} on SIGTERM; log:\n{}",
                    self.log_text()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "numa-shim did not stop within {STOP_WITHIN:?} of SIGTERM; log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the process again with the same flags after [`Self::kill9`], [`Self::terminate`]
    /// or [`Self::stop`], and waits until it answers.
    pub async fn start_again(&mut self) {
        self.launch();
        self.wait_answering(READY_WITHIN).await;
    }

    /// SIGKILL and start again (same socket, state dir and settings), as a supervisor would.
    pub async fn restart(&mut self) {
        self.kill9();
        self.start_again().await;
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

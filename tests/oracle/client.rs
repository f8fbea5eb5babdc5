//! The oracle: one long-running `kubelet-oracle` child process, cases on its stdin and answers
//! on its stdout, one JSON object per line (integration/kubelet-oracle/PROTOCOL.md). Its
//! stderr goes to a log file. A case the oracle does not answer within the timeout (or that it
//! exits on) kills the child by its PID and starts a fresh one, so the run goes on.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use numa_shim::scenario::StepsReport;
use serde_json::Value;

/// The environment variable naming the kubelet-oracle binary.
pub const ENV: &str = "NUMA_SHIM_ORACLE";

/// What the oracle answered for one case.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The case ran (or the kubelet refused the settings: `config_error`).
    Ran(StepsReport),
    /// The oracle could not run the case (its `error`).
    Failed(String),
    /// No answer within the timeout: the oracle was killed and a fresh one started.
    TimedOut(Duration),
}

/// How long a case may take by default; `NUMA_SHIM_ORACLE_TIMEOUT` (seconds) sets another.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The timeout `NUMA_SHIM_ORACLE_TIMEOUT` asks for, else `DEFAULT_TIMEOUT`.
pub fn timeout_from_env() -> Duration {
    std::env::var("NUMA_SHIM_ORACLE_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
}

pub struct Oracle {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
    timeout: Duration,
    bin: PathBuf,
    log_dir: PathBuf,
    /// How many oracles were started (1 + restarts).
    pub started: u32,
    pub log: PathBuf,
}

impl Oracle {
    /// Starts the binary `NUMA_SHIM_ORACLE` names; `None` (with the reason) when unset or
    /// missing.
    pub fn from_env(log_dir: &Path) -> Result<Self, String> {
        Self::from_bin(
            std::env::var_os(ENV).map(PathBuf::from),
            log_dir,
            timeout_from_env(),
        )
    }

    /// Starts `bin` (the value of `NUMA_SHIM_ORACLE`) with that per-case timeout.
    pub fn from_bin(
        bin: Option<PathBuf>,
        log_dir: &Path,
        timeout: Duration,
    ) -> Result<Self, String> {
        let bin = bin.ok_or_else(|| {
            format!("{ENV} is not set: point it at a kubelet-oracle binary (integration/oracle.sh builds one)")
        })?;
        if !bin.is_file() {
            return Err(format!("{ENV}={}: no such file", bin.display()));
        }
        Self::spawn(&bin, log_dir, timeout, 1)
    }

    fn spawn(bin: &Path, log_dir: &Path, timeout: Duration, started: u32) -> Result<Self, String> {
        std::fs::create_dir_all(log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
        let log = log_dir.join("kubelet-oracle.stderr");
        // A restarted oracle appends to the log of the one before.
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(started > 1)
            .write(true)
            .truncate(started == 1)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let mut child = Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin,
            lines,
            timeout,
            bin: bin.to_path_buf(),
            log_dir: log_dir.to_path_buf(),
            started,
            log,
        })
    }

    /// Kills this oracle (by its PID, `Child::kill`) and puts a fresh one in its place.
    fn restart(&mut self) -> Result<(), String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Self::spawn(&self.bin, &self.log_dir, self.timeout, self.started + 1)?;
        Ok(())
    }

    /// Sends one case and waits for its answer.
    pub fn ask(&mut self, case: &Value) -> Result<Answer, String> {
        let line = serde_json::to_string(case).map_err(|e| e.to_string())?;
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("write to kubelet-oracle: {e} (see {})", self.log.display()))?;
        let answer = match self.lines.recv_timeout(self.timeout) {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                self.restart()?;
                return Err(format!("read from kubelet-oracle: {e}"));
            }
            Err(RecvTimeoutError::Timeout) => {
                self.restart()?;
                return Ok(Answer::TimedOut(self.timeout));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let log = self.log.display().to_string();
                self.restart()?;
                return Err(format!(
                    "kubelet-oracle exited without an answer (see {log})"
                ));
            }
        };
        let v: Value = serde_json::from_str(&answer)
            .map_err(|e| format!("kubelet-oracle answer is not JSON ({e}): {answer}"))?;
        if let Some(err) = v.get("error").and_then(Value::as_str) {
            // The kubelet's feature-gate code refusing the gates panics inside the oracle's
            // defaulting; a kubelet refuses to start with them: a configuration error.
            if err.contains("depends on features that are disabled") {
                return Ok(Answer::Ran(StepsReport {
                    id: v.get("id").and_then(Value::as_str).map(str::to_string),
                    config_error: Some(err.to_string()),
                    steps: Vec::new(),
                }));
            }
            return Ok(Answer::Failed(err.to_string()));
        }
        serde_json::from_value(v).map(Answer::Ran).map_err(|e| {
            format!("kubelet-oracle answer does not have the protocol's form ({e}): {answer}")
        })
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

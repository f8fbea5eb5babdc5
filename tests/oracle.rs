//! The differential suite: generated cases run through the kubelet's own CPU, Memory and
//! Topology Managers (k8s.io/kubernetes v1.37.2, driven by integration/kubelet-oracle) and through
//! numa-shim's decision core, compared after every step (tests/oracle/compare.rs says what). A
//! disagreement fails the test and prints its minimal scenario, which both
//! `numa-shim simulate --output steps FILE` and `kubelet-oracle FILE` run.
//!
//! The suites need the oracle binary: `NUMA_SHIM_ORACLE=/path/to/kubelet-oracle`, so they are
//! ignored by a plain `cargo test`:
//!
//! ```sh
//! NUMA_SHIM_ORACLE=... cargo test --test oracle -- --ignored
//! integration/oracle.sh --cases 10000 --seed 12345   # any number of cases, any seed
//! ```
//!
//! `NUMA_SHIM_ORACLE_CASES`, `NUMA_SHIM_ORACLE_SEED` and `NUMA_SHIM_ORACLE_FROM` (the first
//! case's index, default 0: `--from 4114 --cases 1` judges one case) set `configured_run`;
//! `NUMA_SHIM_ORACLE_TIMEOUT` (seconds, default 120) how long a case may take: a case the oracle
//! does not answer in time is counted as "oracle timed out" (its scenario written to
//! `target/oracle/<id>-timed-out.json`), the oracle is killed and a fresh one started, and the
//! run goes on (and fails at the end). tests/oracle/standin.rs runs the suite against stand-in
//! oracle scripts, without the kubelet-oracle binary.
//! Minimal scenarios and the run's summary go to `target/oracle/`.

/// The suite's support code (tests/oracle/): generator, oracle client, comparison, shrinker.
mod oracle {
    pub mod client;
    pub mod compare;
    pub mod gen;
    pub mod local;
    pub mod machine;
    pub mod prng;
    pub mod shrink;
    #[cfg(test)]
    mod standin;
    pub mod tally;
}

use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use numa_shim::cpuset::CpuSet;

use oracle::client::{Answer, Oracle};
use oracle::compare::{self, Difference, Verdict};
use oracle::gen::{Case, Generator};
use oracle::tally::Tally;
use oracle::{local, machine, shrink};

/// The fixed seed of the CI run.
const FIXED_SEED: u64 = 20_260_101;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn out_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| manifest_dir().join("target"), PathBuf::from)
        .join("oracle")
}

fn generator() -> Generator {
    let dir = manifest_dir().join("../shared/fixtures/topologies");
    let gen = Generator::new(machine::fixtures(&dir));
    // NUMA_SHIM_ORACLE_WIDE: "1" for 9-10 nodes, or a comma-separated list of node counts.
    match std::env::var("NUMA_SHIM_ORACLE_WIDE") {
        Ok(v) if v == "1" => gen.wide(),
        Ok(v) => {
            let counts: Vec<u32> = v.split(',').filter_map(|n| n.trim().parse().ok()).collect();
            gen.wide_with(&counts)
        }
        Err(_) => gen,
    }
}

fn fresh_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Printed whatever the test harness captures (the seed of a fresh run must show).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// One case's outcome, with the case as it was compared.
struct Outcome {
    case: Case,
    verdict: Result<Verdict, Trouble>,
}

/// Why a case got no verdict.
#[derive(Debug)]
enum Trouble {
    /// The oracle gave no answer within the timeout (it was killed and a fresh one started).
    TimedOut(Duration),
    /// Either side could not run the case.
    Error(String),
}

struct Suite {
    oracle: Oracle,
    /// Where minimal and timed-out scenarios go.
    out: PathBuf,
}

impl Suite {
    /// Runs one (repaired) case on both sides and compares.
    fn judge(&mut self, case: &Case) -> Result<Verdict, Trouble> {
        let ours =
            local::answer(&case.json).map_err(|e| Trouble::Error(format!("numa-shim: {e}")))?;
        let theirs = match self.oracle.ask(&case.json).map_err(Trouble::Error)? {
            Answer::Ran(r) => r,
            Answer::Failed(msg) => return self.oracle_failed(case, &msg),
            Answer::TimedOut(t) => return Err(Trouble::TimedOut(t)),
        };
        let reserved = case.json["kubelet"]["reservedSystemCPUs"]
            .as_str()
            .and_then(|s| CpuSet::parse(s).ok())
            .unwrap_or_default();
        let mut reproduced = || local::answer_reproducing_double_grants(&case.json).ok();
        Ok(compare::compare(
            &ours,
            &theirs,
            &mut reproduced,
            &reserved,
            &|name| name.starts_with("init-"),
        ))
    }

    /// The oracle could not play a step numa-shim played (say, it refused a pod numa-shim
    /// admitted and a later step starts it): the answers up to that step show the difference.
    fn oracle_failed(&mut self, case: &Case, msg: &str) -> Result<Verdict, Trouble> {
        let step = msg
            .strip_prefix("step ")
            .and_then(|s| s.split(':').next())
            .and_then(|n| n.parse::<usize>().ok());
        match step {
            Some(n) if n > 0 && n <= case.steps().len() => {
                let prefix = case.with_steps(case.steps()[..n].to_vec());
                match self.judge(&prefix)? {
                    Verdict::Agree => Ok(Verdict::Disagree(Difference {
                        step: Some(n),
                        path: "steps".into(),
                        ours: "played".into(),
                        theirs: msg.to_string(),
                    })),
                    other => Ok(other),
                }
            }
            _ => Err(Trouble::Error(format!(
                "kubelet-oracle could not run the case: {msg}"
            ))),
        }
    }

    fn run_case(&mut self, case: &Case) -> Outcome {
        let case = local::repair(case);
        let verdict = self.judge(&case);
        Outcome { case, verdict }
    }

    /// Shrinks a disagreeing case; writes and returns the minimal scenario.
    fn minimal(&mut self, case: &Case) -> (Case, PathBuf) {
        let small = shrink::shrink(case, 400, &mut |c| {
            let c = local::repair(c);
            matches!(self.judge(&c), Ok(Verdict::Disagree(_))).then_some(c)
        });
        let path = self.write(&small, "");
        (small, path)
    }

    /// Writes a case as a scenario file `<id><suffix>.json` in the run's directory.
    fn write(&self, case: &Case, suffix: &str) -> PathBuf {
        let name: String = case
            .id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self.out.join(format!("{name}{suffix}.json"));
        let text = serde_json::to_string_pretty(&case.json).unwrap_or_default();
        let _ = std::fs::create_dir_all(&self.out);
        let _ = std::fs::write(&path, text + "\n");
        path
    }
}

/// What a run found.
struct Report {
    summary: String,
    /// Disagreements, each with its minimal scenario (the first 20).
    failures: Vec<String>,
    /// Cases the oracle did not answer in time, each with its scenario file.
    timed_out: Vec<String>,
    /// Cases either side could not run.
    errors: Vec<String>,
}

/// Runs cases `cases` of `seed` against the oracle `NUMA_SHIM_ORACLE` names; panics listing
/// every disagreement with its minimal scenario, and every case without a verdict.
fn run(seed: u64, cases: Range<u64>) {
    run_gen(&generator(), seed, cases);
}

/// [`run`] with the cases of `gen`.
fn run_gen(gen: &Generator, seed: u64, cases: Range<u64>) {
    let oracle = Oracle::from_env(&out_dir()).unwrap_or_else(|e| panic!("{e}"));
    let report = run_with_gen(oracle, &out_dir(), gen, seed, cases);
    assert!(
        report.failures.is_empty() && report.errors.is_empty() && report.timed_out.is_empty(),
        "seed {seed}: {} disagreement(s), {} case(s) the oracle did not answer in time, {} case(s) that could not run\n\n{}\n\n{}\n\n{}",
        report.failures.len(),
        report.timed_out.len(),
        report.errors.len(),
        report.failures.join("\n\n"),
        report.timed_out.join("\n"),
        report.errors.join("\n")
    );
}

/// Runs cases `cases` of `seed` against `oracle`, writing scenarios and the summary to `out`.
fn run_with(oracle: Oracle, out: &Path, seed: u64, cases: Range<u64>) -> Report {
    run_with_gen(oracle, out, &generator(), seed, cases)
}

/// [`run_with`] with the cases of `gen`.
fn run_with_gen(
    oracle: Oracle,
    out: &Path,
    gen: &Generator,
    seed: u64,
    cases: Range<u64>,
) -> Report {
    say(&format!("oracle suite: seed {seed}, cases {cases:?}"));
    let started = Instant::now();
    let mut suite = Suite {
        oracle,
        out: out.to_path_buf(),
    };
    let mut timed_out = Vec::new();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let mut twice = Vec::new();
    let mut errors = Vec::new();
    let mut shrunk = 0;
    for i in cases {
        let out = suite.run_case(&gen.case(seed, i));
        match &out.verdict {
            Err(Trouble::Error(e)) => errors.push(format!("{}: {e}", out.case.id)),
            Err(Trouble::TimedOut(t)) => {
                let path = suite.write(&out.case, "-timed-out");
                let line = format!(
                    "{} ({}): oracle timed out after {t:?}; re-run: kubelet-oracle {}",
                    out.case.id,
                    out.case.machine.name,
                    path.display()
                );
                say(&line);
                timed_out.push(line);
            }
            Ok(v) => {
                tally.add(&out.case.features, v);
                match v {
                    Verdict::Agree => {}
                    Verdict::GrantedTwice { detail, .. } => {
                        twice.push(format!(
                            "{} ({}): {detail}",
                            out.case.id, out.case.machine.name
                        ));
                    }
                    Verdict::Disagree(d) => {
                        let report = if shrunk < 20 {
                            shrunk += 1;
                            let (small, path) = suite.minimal(&out.case);
                            let diff = suite
                                .judge(&small)
                                .ok()
                                .and_then(|v| match v {
                                    Verdict::Disagree(d) => Some(d.to_string()),
                                    _ => None,
                                })
                                .unwrap_or_else(|| d.to_string());
                            format!(
                                "{} ({}): {d}\n  minimal scenario {} ({diff}):\n{}\n  run: numa-shim simulate --output steps {0}; kubelet-oracle {0}",
                                out.case.id,
                                out.case.machine.name,
                                path.display(),
                                serde_json::to_string_pretty(&small.json).unwrap_or_default(),
                            )
                        } else {
                            format!("{} ({}): {d}", out.case.id, out.case.machine.name)
                        };
                        failures.push(report);
                    }
                }
            }
        }
    }
    let summary = format!(
        "oracle suite: seed {seed}: {} cases in {:.1?}: {} agree, {} disagree, {} in the documented divergence (the kubelet granted a CPU twice), {} oracle timed out, {} could not run ({} oracle(s) started)\n\n{}\ndisagreements by field: {:?}\n\ngranted twice by the kubelet:\n  {}\n\noracle timed out:\n  {}",
        tally.all.cases,
        started.elapsed(),
        tally.all.agree,
        tally.all.disagree,
        tally.all.granted_twice,
        timed_out.len(),
        errors.len(),
        suite.oracle.started,
        tally.table(),
        tally.by_field,
        twice.join("\n  "),
        timed_out.join("\n  ")
    );
    say(&summary);
    let _ = std::fs::create_dir_all(out);
    let _ = std::fs::write(out.join(format!("summary-{seed}.md")), &summary);
    Report {
        summary,
        failures,
        timed_out,
        errors,
    }
}

#[test]
#[ignore = "needs the kubelet-oracle binary (NUMA_SHIM_ORACLE)"]
fn five_hundred_cases_with_the_fixed_seed() {
    run(FIXED_SEED, 0..500);
}

#[test]
#[ignore = "needs the kubelet-oracle binary (NUMA_SHIM_ORACLE)"]
fn two_hundred_cases_with_a_fresh_seed() {
    run(fresh_seed(), 0..200);
}

/// Wide machines (9-10 NUMA nodes, `max-allowable-numa-nodes` raised) with a fresh seed: the
/// searched merge against the kubelet's own enumeration (`oracle.sh --fixed`).
#[test]
#[ignore = "needs the kubelet-oracle binary (NUMA_SHIM_ORACLE)"]
fn forty_wide_cases_with_a_fresh_seed() {
    say("wide machines (9-10 NUMA nodes, max-allowable-numa-nodes raised)");
    run_gen(&generator().wide(), fresh_seed(), 0..40);
}

/// `integration/oracle.sh --cases N --seed S` runs this one.
#[test]
#[ignore = "needs the kubelet-oracle binary (NUMA_SHIM_ORACLE); run by integration/oracle.sh"]
fn configured_run() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("NUMA_SHIM_ORACLE_SEED").unwrap_or_else(fresh_seed);
    let from = env("NUMA_SHIM_ORACLE_FROM").unwrap_or(0);
    let count = env("NUMA_SHIM_ORACLE_CASES").unwrap_or(1000);
    run(seed, from..from.saturating_add(count));
}

/// Without the oracle: every generated case is one numa-shim can load and play.
#[test]
fn generated_cases_play_in_numa_shim() {
    let gen = generator();
    for i in 0..150 {
        let case = local::repair(&gen.case(FIXED_SEED, i));
        if let Err(e) = local::answer(&case.json) {
            panic!("{}: {e}\n{}", case.id, case.json);
        }
    }
}

/// Writes cases `NUMA_SHIM_ORACLE_SEED` / `NUMA_SHIM_ORACLE_CASE` (`0..n` or one index) to
/// `target/oracle/` as scenario files, repaired as the suite plays them (to look at one).
#[test]
#[ignore = "a tool: writes generated cases to target/oracle/"]
fn write_cases() {
    let seed = std::env::var("NUMA_SHIM_ORACLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FIXED_SEED);
    let which = std::env::var("NUMA_SHIM_ORACLE_CASE").unwrap_or_else(|_| "0..10".into());
    let range = match which.split_once("..") {
        Some((a, b)) => a.parse().unwrap_or(0)..b.parse().unwrap_or(0),
        None => {
            let i = which.parse().unwrap_or(0);
            i..i + 1
        }
    };
    let gen = generator();
    let _ = std::fs::create_dir_all(out_dir());
    for i in range {
        let case = local::repair(&gen.case(seed, i));
        let path = out_dir().join(format!("case-{seed}-{i}.json"));
        let text = serde_json::to_string_pretty(&case.json).unwrap_or_default();
        std::fs::write(&path, text + "\n").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        say(&format!("{} ({})", path.display(), case.machine.name));
    }
}

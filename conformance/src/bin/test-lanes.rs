//! `test-lanes`: builds the workspace's tests and runs their binaries in two
//! lanes side by side ([`buzz_conformance::test_lanes`]; issue 30 item 7).
//! What `scripts/test.sh` runs in place of one serial `cargo test`.
//!
//! Each binary runs as cargo would run it: in its package's directory, with
//! `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME` set, its output in
//! `<target>/test-lanes/<label>.log`. When a binary ends, its output goes to
//! stdout whole, after cargo's own `Running` line, one binary's block at a
//! time: the suite's log reads as `cargo test`'s, with every test's line and
//! every `test result:`. A line per binary on stderr says how it ended and
//! how long it took; the failed ones are named again at the end.
//! Every binary runs (no fail-fast), then the doc tests; the exit code is
//! 1 when any of them failed. `test-lanes --plan` prints the two lanes
//! and runs nothing.
//!
//! With `BUZZ_TEST_LANES_JOBS` set (`scripts/test.sh` sets it to its jobs
//! directory), a binary that needs a late job
//! ([`buzz_conformance::test_lanes::LATE_JOBS`]) first waits for that job
//! to end and gets what it made in the job's variable; when the job failed,
//! the binary fails without running, naming the job. Unset, nothing is
//! waited for (a run by hand: the tests find the relay in its cache).

use buzz_conformance::test_lanes::{TestBinary, job_outcome, late_jobs, plan, read_sources, test_binaries};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from)
}

/// `cargo test --no-run` for the workspace: the test executables.
fn build() -> Result<Vec<TestBinary>, String> {
    let out = Command::new("cargo")
        .args([
            "test",
            "--workspace",
            "--locked",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo test --no-run failed ({})", out.status));
    }
    Ok(test_binaries(&String::from_utf8_lossy(&out.stdout)))
}

struct Ran {
    label: String,
    ok: bool,
    secs: f64,
    log: PathBuf,
    /// Tests passed, from the binary's `test result:` line.
    passed: u64,
}

/// Waits for the late jobs `b` needs to end; their variables, or why one
/// failed. Nothing to wait for without `BUZZ_TEST_LANES_JOBS`.
fn await_jobs(b: &TestBinary) -> Result<Vec<(&'static str, String)>, String> {
    let Some(dir) = std::env::var_os("BUZZ_TEST_LANES_JOBS").map(PathBuf::from) else {
        return Ok(Vec::new());
    };
    let mut env = Vec::new();
    for job in late_jobs(&read_sources(b)) {
        let began = Instant::now();
        let mut said = false;
        let made = loop {
            let rc = std::fs::read_to_string(dir.join(format!("{}.rc", job.job))).ok();
            let out = std::fs::read_to_string(dir.join(format!("{}.out", job.job))).unwrap_or_default();
            if let Some(outcome) = job_outcome(job, rc.as_deref(), &out) {
                break outcome?;
            }
            if !said {
                eprintln!(
                    "test-lanes: {} waits for the background job {}",
                    b.label(),
                    job.job
                );
                said = true;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        };
        if said {
            eprintln!(
                "test-lanes: {} waited {:.0} s for {}",
                b.label(),
                began.elapsed().as_secs_f64(),
                job.job
            );
        }
        env.push((job.env, made));
    }
    Ok(env)
}

fn run_one(b: &TestBinary, logs: &Path) -> Ran {
    let label = b.label();
    let log = logs.join(format!("{}.log", label.replace([' ', '(', ')', '/'], "_")));
    let jobs = await_jobs(b);
    let began = Instant::now();
    let ok = std::fs::File::create(&log)
        .and_then(|mut f| {
            let env = match &jobs {
                Ok(env) => env,
                Err(why) => {
                    writeln!(
                        f,
                        "test-lanes: not run: {why}; its log is in {}",
                        jobs_dir_shown()
                    )?;
                    return Ok(false);
                }
            };
            let err = f.try_clone()?;
            Command::new(&b.executable)
                .current_dir(&b.manifest_dir)
                .env("CARGO_MANIFEST_DIR", &b.manifest_dir)
                .env("CARGO_PKG_NAME", &b.package)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(f)
                .stderr(err)
                .status()
                .map(|s| s.success())
        })
        .unwrap_or(false);
    let secs = began.elapsed().as_secs_f64();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let passed = passed_in(&output);
    // The lock holds stdout for the whole block: the other lane's waits.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}\n{output}", b.running_line());
    let _ = out.flush();
    eprintln!(
        "{} {label}: {passed} passed ({secs:.0} s)",
        if ok { "ok    " } else { "FAILED" }
    );
    Ran {
        label,
        ok,
        secs,
        log,
        passed,
    }
}

fn jobs_dir_shown() -> String {
    std::env::var("BUZZ_TEST_LANES_JOBS").unwrap_or_default()
}

/// The tests a libtest output says passed.
fn passed_in(output: &str) -> u64 {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("test result: "))
        .filter_map(|l| l.split(". ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn run_lane(lane: Vec<TestBinary>, logs: PathBuf) -> Vec<Ran> {
    lane.iter().map(|b| run_one(b, &logs)).collect()
}

fn main() {
    let binaries = match build() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("test-lanes: {e}");
            std::process::exit(1);
        }
    };
    let logs = target_dir().join("test-lanes");
    if let Err(e) = std::fs::create_dir_all(&logs) {
        eprintln!("test-lanes: cannot create {}: {e}", logs.display());
        std::process::exit(1);
    }
    let [machine, rest] = plan(binaries, &read_sources);
    if std::env::args().nth(1).as_deref() == Some("--plan") {
        for (lane, bins) in [("machine", &machine), ("rest", &rest)] {
            for b in bins.iter() {
                println!("{lane}\t{}", b.label());
            }
        }
        return;
    }
    eprintln!(
        "test-lanes: {} binaries on the machine lane, {} beside it; logs in {}",
        machine.len(),
        rest.len(),
        logs.display()
    );
    let began = Instant::now();
    let (l1, l2) = (logs.clone(), logs.clone());
    let a = std::thread::spawn(move || run_lane(machine, l1));
    let b = std::thread::spawn(move || run_lane(rest, l2));
    let mut ran = a.join().unwrap_or_default();
    let machine_secs: f64 = ran.iter().map(|r| r.secs).sum();
    let rest_ran = b.join().unwrap_or_default();
    let rest_secs: f64 = rest_ran.iter().map(|r| r.secs).sum();
    ran.extend(rest_ran);
    let doc_began = Instant::now();
    let docs_ok = Command::new("cargo")
        .args(["test", "--workspace", "--locked", "--doc"])
        .status()
        .is_ok_and(|s| s.success());
    eprintln!(
        "test-lanes: machine lane {machine_secs:.0} s, the rest {rest_secs:.0} s, both {:.0} s; doc tests {:.0} s",
        began.elapsed().as_secs_f64() - doc_began.elapsed().as_secs_f64(),
        doc_began.elapsed().as_secs_f64()
    );
    let failed: Vec<&Ran> = ran.iter().filter(|r| !r.ok).collect();
    for r in &failed {
        eprintln!(
            "test-lanes: FAILED {} (its output above, and in {})",
            r.label,
            r.log.display()
        );
    }
    if !failed.is_empty() || !docs_ok {
        eprintln!(
            "test-lanes: {} of {} binaries failed{}",
            failed.len(),
            ran.len(),
            if docs_ok { "" } else { "; the doc tests failed" }
        );
        std::process::exit(1);
    }
    eprintln!(
        "test-lanes: all {} binaries ({} tests) and the doc tests passed",
        ran.len(),
        ran.iter().map(|r| r.passed).sum::<u64>()
    );
}

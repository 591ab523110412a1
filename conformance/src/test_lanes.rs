//! The suite's test binaries in two lanes that run side by side (issue 30
//! item 7: the suite's wall time). `cargo test` runs one test binary after
//! another, and most of them spend their time waiting on real processes (a
//! kubelet, an agent, a browser) with a core idle. Two lanes halve that:
//!
//! - **the machine lane**: binaries that take one of the machine's single
//!   resources: the real node (one per machine, [`crate::testenv::real_node`]),
//!   podman and its storage, the container node. They run one after
//!   another, as before.
//! - **the rest**, everything else, one after another beside it. Tests in a
//!   binary already run side by side on their own threads; what each uses
//!   is its own (temp dirs, loopback ports of its own).
//!
//! A binary's lane is read from its source ([`MACHINE_MARKERS`]), so a new
//! test that starts the real node lands in the machine lane without a list
//! to keep. Pure: cargo's JSON messages and the sources in, the plan out.
//! The runner is `src/bin/test-lanes.rs`.
//!
//! **Late jobs.** A background build of `scripts/test.sh` that only a few
//! binaries need ([`LATE_JOBS`]: nostr-rs-relay, a cold release build of
//! some 800 CPU seconds) is not waited for before the lanes start. It runs
//! at the lowest priority from the suite's start, so it takes the cycles the
//! builds and then the lanes leave idle, and the binaries that need it run
//! last in their lane, each once the job has ended ([`job_outcome`]). On 2
//! cores the build phase is CPU-bound to its end, so every CPU second taken
//! out of it is wall time saved (issue 30 item 7).

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Words in a test's source that put it in the machine lane.
pub const MACHINE_MARKERS: &[&str] = &[
    "RealNode",
    "real_node_support",
    "testenv::real_node",
    "local-cluster",
    "podman",
    "ContainerNode",
];

/// A background job of `scripts/test.sh` that some test binaries need.
#[derive(Debug, PartialEq, Eq)]
pub struct LateJob {
    /// Words in a test's source that say it needs the job: the helper
    /// module's name and the helpers that start it for a test.
    pub markers: &'static [&'static str],
    /// The job's name in `scripts/test.sh`: it writes `<jobs dir>/<job>.rc`
    /// (`<exit code> <seconds> <CPU ticks>`) when the job ends, and the job's stdout to
    /// `<jobs dir>/<job>.out`, whose last line is what it made.
    pub job: &'static str,
    /// The variable that last line reaches the binary in.
    pub env: &'static str,
}

/// The jobs some binaries wait for, and the rest do not.
pub const LATE_JOBS: &[LateJob] = &[LateJob {
    markers: &["nostr_rs_relay", "on_production_relay", "AnyRelay::production"],
    job: "nostr-rs-relay",
    env: "BUZZ_NOSTR_RS_RELAY",
}];

/// The late jobs a binary whose sources read `source` needs.
pub fn late_jobs(source: &str) -> Vec<&'static LateJob> {
    LATE_JOBS
        .iter()
        .filter(|j| j.markers.iter().any(|m| source.contains(m)))
        .collect()
}

/// A late job's outcome from its files: `None` while it runs (no `.rc`
/// yet, or one not yet whole), `Ok(last line of its stdout)` when it
/// succeeded, `Err(why)` when it failed or made nothing.
pub fn job_outcome(job: &LateJob, rc_file: Option<&str>, out_file: &str) -> Option<Result<String, String>> {
    let rc: i32 = rc_file?.split_whitespace().next()?.parse().ok()?;
    if rc != 0 {
        return Some(Err(format!("the background job {} failed (exit {rc})", job.job)));
    }
    Some(match out_file.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(made) => Ok(made.trim().to_string()),
        None => Err(format!(
            "the background job {} ended and printed nothing",
            job.job
        )),
    })
}

/// One test executable cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    pub package: String,
    /// The target's name (`e2e_real_node`; the package's own for unit tests).
    pub target: String,
    /// `lib`, `bin` or `test`.
    pub kind: String,
    pub executable: PathBuf,
    /// The package's directory: cargo runs each test binary there.
    pub manifest_dir: PathBuf,
    /// The target's root source file.
    pub src_path: PathBuf,
}

impl TestBinary {
    /// `package target`, as the runner prints it; unique in a workspace
    /// (a package has one lib but may have many bins).
    pub fn label(&self) -> String {
        match self.kind.as_str() {
            "test" => format!("{} {}", self.package, self.target),
            "bin" => format!("{} (bin {})", self.package, self.target),
            kind => format!("{} ({kind})", self.package),
        }
    }

    /// The line cargo prints before it runs this binary
    /// (`     Running tests/e2e.rs (/t/debug/deps/e2e-1)`), so that the
    /// suite's log reads as `cargo test`'s does.
    pub fn running_line(&self) -> String {
        let src = self
            .src_path
            .strip_prefix(&self.manifest_dir)
            .unwrap_or(&self.src_path)
            .display();
        let unit = if self.kind == "test" { "" } else { "unittests " };
        format!("     Running {unit}{src} ({})", self.executable.display())
    }
}

/// The test executables in cargo's `--message-format json` output.
pub fn test_binaries(json_lines: &str) -> Vec<TestBinary> {
    let mut out = Vec::new();
    for line in json_lines.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else {
            continue;
        };
        let manifest = v["manifest_path"].as_str().map(PathBuf::from).unwrap_or_default();
        let kind = v["target"]["kind"][0].as_str().unwrap_or_default().to_string();
        out.push(TestBinary {
            package: package_name(v["package_id"].as_str().unwrap_or_default()),
            target: v["target"]["name"].as_str().unwrap_or_default().to_string(),
            kind,
            executable: PathBuf::from(exe),
            manifest_dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
            src_path: v["target"]["src_path"]
                .as_str()
                .map(PathBuf::from)
                .unwrap_or_default(),
        });
    }
    out
}

/// The package name of a cargo package id (`path+file:///…/conformance#buzz-conformance@0.1.0`
/// or the older `buzz-conformance 0.1.0 (path+file://…)`).
fn package_name(id: &str) -> String {
    if let Some((url, rest)) = id.rsplit_once('#') {
        return match rest.split_once('@') {
            Some((name, _)) => name.to_string(),
            // `…/buzz-acp#0.1.0`: the name is the directory's.
            None => url.rsplit('/').next().unwrap_or(url).to_string(),
        };
    }
    id.split_whitespace().next().unwrap_or(id).to_string()
}

/// Whether a binary whose sources read `source` belongs in the machine lane.
pub fn needs_the_machine(source: &str) -> bool {
    MACHINE_MARKERS.iter().any(|m| source.contains(m))
}

/// The two lanes: the machine's, then the rest's; each in the order given,
/// but for the binaries that need a late job, which come last in their lane.
pub fn plan(binaries: Vec<TestBinary>, source_of: &dyn Fn(&TestBinary) -> String) -> [Vec<TestBinary>; 2] {
    let (mut machine, mut rest) = (Vec::new(), Vec::new());
    let (mut machine_late, mut rest_late) = (Vec::new(), Vec::new());
    for b in binaries {
        // Unit tests (lib, bin) start nothing of the machine's and need no job.
        let source = if b.kind == "test" {
            source_of(&b)
        } else {
            String::new()
        };
        match (needs_the_machine(&source), late_jobs(&source).is_empty()) {
            (true, true) => machine.push(b),
            (true, false) => machine_late.push(b),
            (false, true) => rest.push(b),
            (false, false) => rest_late.push(b),
        }
    }
    machine.append(&mut machine_late);
    rest.append(&mut rest_late);
    [machine, rest]
}

/// The source a lane is read from: a test's root file, or every `.rs` file
/// of its directory when it is a `tests/<name>/main.rs`.
pub fn read_sources(b: &TestBinary) -> String {
    let mut text = std::fs::read_to_string(&b.src_path).unwrap_or_default();
    if b.src_path.file_name().is_some_and(|n| n == "main.rs")
        && let Some(dir) = b.src_path.parent()
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "rs") {
                text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lines as cargo 1.95 writes them (`cargo test --no-run
    /// --message-format json`), and one that is no test.
    const CARGO_JSON: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/conformance#buzz-conformance@0.1.0","manifest_path":"/w/conformance/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"e2e_real_node","src_path":"/w/conformance/tests/e2e_real_node.rs","edition":"2024","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/debug/deps/e2e_real_node-1"],"executable":"/t/debug/deps/e2e_real_node-1","fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/buzz-acp#0.1.0","manifest_path":"/w/buzz-acp/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"buzz_acp","src_path":"/w/buzz-acp/src/lib.rs","edition":"2024","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/t/debug/deps/buzz_acp-2"],"executable":"/t/debug/deps/buzz_acp-2","fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/buzz-acp#0.1.0","manifest_path":"/w/buzz-acp/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"buzz-acp","src_path":"/w/buzz-acp/src/main.rs","edition":"2024","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/t/debug/buzz-acp"],"executable":"/t/debug/buzz-acp","fresh":true}
{"reason":"build-finished","success":true}"#;

    #[test]
    fn cargo_s_test_executables_are_read_with_their_package_and_directory() {
        let b = test_binaries(CARGO_JSON);
        assert_eq!(b.len(), 2, "the plain binary is no test: {b:?}");
        assert_eq!(b[0].package, "buzz-conformance");
        assert_eq!(b[0].target, "e2e_real_node");
        assert_eq!(b[0].manifest_dir, PathBuf::from("/w/conformance"));
        assert_eq!(b[0].executable, PathBuf::from("/t/debug/deps/e2e_real_node-1"));
        assert_eq!(
            b[1].package, "buzz-acp",
            "an id without a name after # names the directory's package"
        );
        assert_eq!(b[1].kind, "lib");
        assert_eq!(
            b[0].running_line(),
            "     Running tests/e2e_real_node.rs (/t/debug/deps/e2e_real_node-1)"
        );
        assert_eq!(
            b[1].running_line(),
            "     Running unittests src/lib.rs (/t/debug/deps/buzz_acp-2)"
        );
    }

    #[test]
    fn two_bins_of_one_package_have_labels_of_their_own() {
        let bin = |target: &str| TestBinary {
            package: "buzz-conformance".into(),
            target: target.into(),
            kind: "bin".into(),
            executable: PathBuf::from("/t/x"),
            manifest_dir: PathBuf::from("/w"),
            src_path: PathBuf::from("/w/src/bin/x.rs"),
        };
        assert_ne!(bin("bench").label(), bin("local-cluster").label());
        assert_eq!(bin("bench").label(), "buzz-conformance (bin bench)");
    }

    #[test]
    fn a_test_that_starts_the_real_node_or_podman_runs_in_the_machine_lane() {
        let b = test_binaries(CARGO_JSON);
        let [machine, rest] = plan(b, &|b| {
            if b.target == "e2e_real_node" {
                "let node = RealNode::shared().await;".into()
            } else {
                "fn unit() {}".into()
            }
        });
        assert_eq!(
            machine.iter().map(|b| b.target.as_str()).collect::<Vec<_>>(),
            ["e2e_real_node"]
        );
        assert_eq!(rest.len(), 1);
        assert!(needs_the_machine("Command::new(\"podman\")"));
        // The node's own binary, started as a user would start it.
        assert!(needs_the_machine("env!(\"CARGO_BIN_EXE_local-cluster\")"));
        assert!(!needs_the_machine("TestEnv::start()"));
    }

    #[test]
    fn a_binary_that_needs_a_late_job_runs_last_in_its_lane() {
        let t = |target: &str| TestBinary {
            package: "buzz-conformance".into(),
            target: target.into(),
            kind: "test".into(),
            executable: PathBuf::from(format!("/t/{target}")),
            manifest_dir: PathBuf::from("/w"),
            src_path: PathBuf::from(format!("/w/tests/{target}.rs")),
        };
        let sources = |b: &TestBinary| match b.target.as_str() {
            "relay_node" => "RealNode::shared(); nostr_rs_relay::NostrRsRelay::start(ip)".to_string(),
            "relay" => "harness_support::nostr_rs_relay::NostrRsRelay".to_string(),
            "node" => "RealNode::shared()".to_string(),
            _ => "fn plain() {}".to_string(),
        };
        let bins = ["relay_node", "relay", "node", "a", "b"].map(t).to_vec();
        let [machine, rest] = plan(bins, &sources);
        let names = |l: &[TestBinary]| l.iter().map(|b| b.target.clone()).collect::<Vec<_>>();
        assert_eq!(names(&machine), ["node", "relay_node"]);
        assert_eq!(names(&rest), ["a", "b", "relay"]);
        assert_eq!(
            late_jobs("NostrRsRelay::start").len(),
            0,
            "a marker is the module's name"
        );
        assert_eq!(late_jobs("Scenario::on_production_relay(\"p\")").len(), 1);
        assert_eq!(late_jobs(&sources(&t("relay")))[0].env, "BUZZ_NOSTR_RS_RELAY");
    }

    #[test]
    fn a_late_job_is_running_until_its_exit_code_is_whole() {
        let job = &LATE_JOBS[0];
        assert_eq!(job_outcome(job, None, ""), None, "no .rc yet: running");
        assert_eq!(
            job_outcome(job, Some(""), ""),
            None,
            "an .rc being written: running"
        );
        assert_eq!(
            job_outcome(job, Some("0 512\n"), "building\n/c/bin/nostr-rs-relay\n\n"),
            Some(Ok("/c/bin/nostr-rs-relay".into()))
        );
        let failed = job_outcome(job, Some("101 30\n"), "").unwrap().unwrap_err();
        assert!(failed.contains("nostr-rs-relay failed (exit 101)"), "{failed}");
        assert!(
            job_outcome(job, Some("0 1"), "").unwrap().is_err(),
            "success that made nothing"
        );
    }
}

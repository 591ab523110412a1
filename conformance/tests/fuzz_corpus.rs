//! Every fuzz target's checks, on stable, in the suite (issue 47 item 2).
//!
//! A fuzz target is a `check(data)` function in `<crate>/fuzz/fuzz_targets/`
//! (`scripts/fuzz.sh` runs it under `cargo fuzz`, with libFuzzer, ASan and
//! coverage, for the fuzzing runs docs/benchmarks.md records). This test
//! compiles the same files as modules and feeds each `check`:
//!
//! 1. every committed corpus input (`fuzz/corpus/<target>/`);
//! 2. every crash input a local fuzz run left (`fuzz/artifacts/<target>/`,
//!    not committed: a finding is fixed, then its input is committed to the
//!    corpus);
//! 3. [`MUTATIONS`] inputs mutated from the corpus by a seeded generator
//!    ([`Mutator`]): the same inputs on every run, so a failure reproduces.
//!
//! A failing input is written to the temp dir and named, with the command
//! that runs it under the fuzzer. A target the table below does not name, a
//! target whose file is not the `check` form, or a target that uses a crate
//! its fuzz project does not depend on, fails [`every_fuzz_target_is_replayed`]:
//! the suite no longer builds the nightly fuzz projects, so this is what keeps
//! them buildable and in step.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../buzz-acp/fuzz/fuzz_targets/config.rs"]
mod acp_config;
#[path = "../../buzz-acp/fuzz/fuzz_targets/inbound.rs"]
mod acp_inbound;
#[path = "../../buzz-acp/fuzz/fuzz_targets/nip_oa.rs"]
mod acp_nip_oa;
#[path = "../../images/runtime-agent/fuzz/fuzz_targets/readers.rs"]
mod agent_readers;
#[path = "../../images/runtime-agent/fuzz/fuzz_targets/spooled.rs"]
mod agent_spooled;
#[path = "../../images/runtime-ingest/fuzz/fuzz_targets/ingest.rs"]
mod ingest_ingest;
#[path = "../../buzz-backend-kubernetes/fuzz/fuzz_targets/image_ref.rs"]
mod k8s_image_ref;
#[path = "../../buzz-backend-kubernetes/fuzz/fuzz_targets/quantity.rs"]
mod k8s_quantity;
#[path = "../../buzz-backend-kubernetes/fuzz/fuzz_targets/request.rs"]
mod k8s_request;
#[path = "../../desktop-launcher/fuzz/fuzz_targets/provider_response.rs"]
mod launcher_provider_response;
#[path = "../../desktop-launcher/fuzz/fuzz_targets/records.rs"]
mod launcher_records;
#[path = "../../desktop-launcher/fuzz/fuzz_targets/redactor.rs"]
mod launcher_redactor;
#[path = "../../desktop-launcher/fuzz/fuzz_targets/ui_form.rs"]
mod launcher_ui_form;

/// Mutated inputs per target. Each check takes well under a millisecond in
/// the test profile, so a target's replay takes about a second.
const MUTATIONS: u32 = 3_000;

/// A fuzz target: its crate directory (relative to the repository), its
/// name, and its check.
struct Target {
    crate_dir: &'static str,
    name: &'static str,
    check: fn(&[u8]),
}

const TARGETS: &[Target] = &[
    Target {
        crate_dir: "buzz-acp",
        name: "config",
        check: acp_config::check,
    },
    Target {
        crate_dir: "buzz-acp",
        name: "inbound",
        check: acp_inbound::check,
    },
    Target {
        crate_dir: "buzz-acp",
        name: "nip_oa",
        check: acp_nip_oa::check,
    },
    Target {
        crate_dir: "buzz-backend-kubernetes",
        name: "image_ref",
        check: k8s_image_ref::check,
    },
    Target {
        crate_dir: "buzz-backend-kubernetes",
        name: "quantity",
        check: k8s_quantity::check,
    },
    Target {
        crate_dir: "buzz-backend-kubernetes",
        name: "request",
        check: k8s_request::check,
    },
    Target {
        crate_dir: "desktop-launcher",
        name: "provider_response",
        check: launcher_provider_response::check,
    },
    Target {
        crate_dir: "desktop-launcher",
        name: "records",
        check: launcher_records::check,
    },
    Target {
        crate_dir: "desktop-launcher",
        name: "redactor",
        check: launcher_redactor::check,
    },
    Target {
        crate_dir: "desktop-launcher",
        name: "ui_form",
        check: launcher_ui_form::check,
    },
    Target {
        crate_dir: "images/runtime-agent",
        name: "readers",
        check: agent_readers::check,
    },
    Target {
        crate_dir: "images/runtime-agent",
        name: "spooled",
        check: agent_spooled::check,
    },
    Target {
        crate_dir: "images/runtime-ingest",
        name: "ingest",
        check: ingest_ingest::check,
    },
];

/// The repository root (the test runs in the conformance package's directory).
fn repo() -> PathBuf {
    buzz_conformance::package_dir().join("..")
}

/// The entries of a directory that `keep` takes, sorted by name; none when
/// it does not exist.
fn entries(dir: &Path, keep: fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| keep(p))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The files of a directory, sorted by name.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    entries(dir, Path::is_file)
}

/// A seeded generator of inputs near the corpus: one to four edits of a
/// corpus input (bit flips, bytes that matter to the parsers, insertions,
/// deletions, repeats, and splices of another input). The same seed gives
/// the same inputs on every machine.
struct Mutator {
    state: u64,
}

/// Bytes the targets' formats give meaning to (JSON, tags, key=value files).
const INTERESTING: &[u8] = b"\0\x01\x7f\xff\"\\{}[],:=- \n\t0189aefnx";

impl Mutator {
    fn new(seed: &str) -> Self {
        // FNV-1a of the seed: any nonzero start will do.
        let state = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Self { state: state | 1 }
    }

    /// xorshift64*.
    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn mutate(&mut self, corpus: &[Vec<u8>]) -> Vec<u8> {
        let mut data = corpus[self.below(corpus.len())].clone();
        for _ in 0..=self.below(4) {
            let at = self.below(data.len() + 1);
            match self.below(7) {
                0 if at < data.len() => data[at] ^= 1 << self.below(8),
                1 if at < data.len() => data[at] = INTERESTING[self.below(INTERESTING.len())],
                2 => data.insert(at, INTERESTING[self.below(INTERESTING.len())]),
                3 => {
                    let end = (at + 1 + self.below(16)).min(data.len());
                    data.drain(at.min(end)..end);
                }
                4 => {
                    let end = (at + 1 + self.below(32)).min(data.len());
                    let piece = data[at.min(end)..end].to_vec();
                    data.splice(at..at, piece);
                }
                5 => {
                    let other = &corpus[self.below(corpus.len())];
                    let from = self.below(other.len() + 1);
                    let end = (from + 1 + self.below(64)).min(other.len());
                    data.splice(at..at, other[from.min(end)..end].iter().copied());
                }
                _ => data.truncate(at),
            }
        }
        data
    }
}

/// Every input of one target through its check; the first failure is
/// written out and named.
fn replay(target: &Target) {
    let fuzz = repo().join(target.crate_dir).join("fuzz");
    let committed = files_in(&fuzz.join("corpus").join(target.name));
    assert!(
        !committed.is_empty(),
        "{}:{} has no committed corpus in {}: commit at least one seed",
        target.crate_dir,
        target.name,
        fuzz.join("corpus").join(target.name).display()
    );
    let read = |p: &PathBuf| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let corpus: Vec<Vec<u8>> = committed.iter().map(read).collect();
    let mut inputs: Vec<(String, Vec<u8>)> = committed
        .iter()
        .map(|p| (p.display().to_string(), read(p)))
        .collect();
    let artifacts = files_in(&fuzz.join("artifacts").join(target.name));
    inputs.extend(artifacts.iter().map(|p| (p.display().to_string(), read(p))));
    let mut mutator = Mutator::new(&format!("{}:{}", target.crate_dir, target.name));
    inputs.extend((0..MUTATIONS).map(|i| (format!("mutation {i} of the corpus"), mutator.mutate(&corpus))));

    for (origin, data) in &inputs {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (target.check)(data))) {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            let out = std::env::temp_dir().join(format!(
                "buzz-fuzz-replay-{}-{}.bin",
                target.crate_dir.replace('/', "-"),
                target.name
            ));
            let _ = std::fs::write(&out, data);
            panic!(
                "{}:{}: {origin} failed: {message}\n  the input ({} bytes) is in {}\n  \
                 under the fuzzer: cd {} && cargo +nightly fuzz run {} {}\n  once fixed, commit it to fuzz/corpus/{}/",
                target.crate_dir,
                target.name,
                data.len(),
                out.display(),
                target.crate_dir,
                target.name,
                out.display(),
                target.name
            );
        }
    }
    eprintln!(
        "{}:{}: {} corpus, {} crash and {MUTATIONS} mutated inputs, no finding",
        target.crate_dir,
        target.name,
        committed.len(),
        artifacts.len()
    );
}

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a target of the table")
}

macro_rules! replays {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(#[test]
        fn $test() {
            replay(target($name));
        })*
    };
}

replays! {
    acp_config_replays => "config",
    acp_inbound_replays => "inbound",
    acp_nip_oa_replays => "nip_oa",
    k8s_image_ref_replays => "image_ref",
    k8s_quantity_replays => "quantity",
    k8s_request_replays => "request",
    launcher_provider_response_replays => "provider_response",
    launcher_records_replays => "records",
    launcher_redactor_replays => "redactor",
    launcher_ui_form_replays => "ui_form",
    agent_readers_replays => "readers",
    agent_spooled_replays => "spooled",
    ingest_ingest_replays => "ingest",
}

/// The crate roots a target's source names (`use x::…` and `x::…` paths),
/// without the language's own; comments are not read.
fn crates_used(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = source
        .lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n");
    let source = code.as_str();
    let bytes = source.as_bytes();
    for (i, _) in source.match_indices("::") {
        let start = source[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        let word = &source[start..i];
        let path_start = start == 0 || !matches!(bytes[start - 1], b':' | b'>' | b'.');
        let lower = word.chars().next().is_some_and(|c| c.is_ascii_lowercase());
        // The language's own roots, and the primitive types (`str::from_utf8`).
        let own = matches!(
            word,
            "std" | "core" | "alloc" | "crate" | "self" | "super" | "str" | "bool" | "char" | "f32" | "f64"
        ) || word
            .strip_prefix(['u', 'i'])
            .is_some_and(|n| matches!(n, "8" | "16" | "32" | "64" | "128" | "size"));
        if path_start && lower && !own {
            out.insert(word.to_string());
        }
    }
    out
}

/// The dependency names of a fuzz project's Cargo.toml, with `-` as `_`.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && let Some((name, _)) = line.split_once('=') {
            out.insert(name.trim().replace('-', "_"));
        }
    }
    out
}

/// The directories (relative to the repository) one or two levels down
/// that hold a `fuzz/Cargo.toml`, as `scripts/fuzz.sh` finds them.
fn fuzz_projects(root: &Path) -> Vec<String> {
    let dirs = |d: &Path| entries(d, Path::is_dir);
    let skip = |p: &Path| {
        matches!(
            p.file_name().and_then(|n| n.to_str()),
            Some("target" | ".git" | "node_modules")
        )
    };
    let mut out = Vec::new();
    for top in dirs(root).into_iter().filter(|p| !skip(p)) {
        for dir in std::iter::once(top.clone()).chain(dirs(&top)) {
            if dir.join("fuzz/Cargo.toml").is_file() {
                out.push(dir.strip_prefix(root).unwrap().to_string_lossy().to_string());
            }
        }
    }
    out
}

/// Every fuzz target of the repository is in [`TARGETS`], in the `check`
/// form, with a `[[bin]]` in its project and every crate it names among the
/// project's dependencies; and [`crates_used`] sees what it must.
#[test]
fn every_fuzz_target_is_replayed() {
    let root = repo();
    let mut found = BTreeSet::new();
    for crate_dir in fuzz_projects(&root) {
        let fuzz = root.join(&crate_dir).join("fuzz");
        let Ok(manifest) = std::fs::read_to_string(fuzz.join("Cargo.toml")) else {
            continue;
        };
        let deps = dependencies(&manifest);
        assert!(
            deps.contains("libfuzzer_sys"),
            "{crate_dir}/fuzz: not a cargo-fuzz project?"
        );
        for file in files_in(&fuzz.join("fuzz_targets")) {
            let name = file.file_stem().unwrap().to_string_lossy().to_string();
            let source = std::fs::read_to_string(&file).unwrap();
            let at = format!("{crate_dir}/fuzz/fuzz_targets/{name}.rs");
            assert!(
                source.contains("#![cfg_attr(fuzzing, no_main)]")
                    && source.contains("pub fn check(data: &[u8]) {")
                    && source
                        .contains("#[cfg(fuzzing)]\nlibfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));"),
                "{at}: a target is `pub fn check(data: &[u8])` with the fuzzer's entry \
                 `#[cfg(fuzzing)] libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));` \
                 and `#![cfg_attr(fuzzing, no_main)]`, so that the suite replays what the fuzzer runs"
            );
            assert!(
                manifest.contains(&format!("path = \"fuzz_targets/{name}.rs\"")),
                "{at}: no [[bin]] for it in {crate_dir}/fuzz/Cargo.toml"
            );
            let missing: Vec<_> = crates_used(&source).difference(&deps).cloned().collect();
            assert!(
                missing.is_empty(),
                "{at} names {missing:?}, which {crate_dir}/fuzz/Cargo.toml does not depend on: \
                 the fuzz build would fail"
            );
            found.insert((crate_dir.clone(), name));
        }
    }
    let table: BTreeSet<_> = TARGETS
        .iter()
        .map(|t| (t.crate_dir.to_string(), t.name.to_string()))
        .collect();
    assert_eq!(
        found, table,
        "the fuzz targets on disk and the replay table differ: add the new one to TARGETS"
    );

    // The crate scan sees a crate in a `use`, in an inline path and in a
    // nested group, and not a type's associated item or a module's own name.
    let seen = crates_used(
        "use serde_json::Value;\nlet x = flate2::write::GzEncoder::new(a::b);\nQuantity::parse(s);\n",
    );
    assert_eq!(seen, ["a", "flate2", "serde_json"].map(String::from).into());
}

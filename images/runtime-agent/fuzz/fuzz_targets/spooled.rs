//! The strict spool-file parser on arbitrary bytes (collector-design.md §5: damaged
//! files are skipped, counted and kept — never shipped, never a crash). The input is
//! offered under every name shape the spool uses; a file that parses must parse as
//! the kind its name promises, and its records must belong to the given pod.
#![cfg_attr(fuzzing, no_main)]

use runtime_agent::payload::{Kind, Spooled, parse_spooled, usage_key_of};

const POD: &str = "0d9f6a52-1111-2222-3333-444455556666";

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    for name in [
        "usage-1786010400-3600.snapshot.json",
        "usage-1786010400-3600.json",
        "peaks.json",
        "coverage.json",
        "oom-1786000000-2.json",
    ] {
        let Ok(parsed) = parse_spooled(name, data, POD) else {
            continue;
        };
        match (&parsed, usage_key_of(name)) {
            (Spooled::Usage(p), Some((kind, _, _))) => {
                assert_eq!(p.kind, kind);
                assert!(p.records.iter().all(|r| r.identity.pod_uid == POD));
            }
            (Spooled::Peaks(p), None) => {
                assert_eq!(name, "peaks.json");
                assert!(p.records.iter().all(|r| r.identity.pod_uid == POD));
            }
            (Spooled::Coverage(p), None) => {
                assert_eq!(name, "coverage.json");
                assert_eq!(p.identity.pod_uid, POD);
            }
            (Spooled::Oom(p), None) => {
                assert_eq!(parsed.kind(), Kind::OomObserved);
                assert_eq!(p.event.identity.pod_uid, POD);
            }
            other => panic!("{name} parsed as {other:?}"),
        }
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

//! Every cgroup and /proc text parser on arbitrary bytes (collector-design.md §2: the
//! readers parse kernel files by key and must never panic on what they find). The
//! same input is given to each parser; invariants checked beside "no panic":
//! parsed keys come from the input, CPU lists count at least one CPU, a PSI total
//! needs a `some` line with `total=`,
//! v1 limits below the unlimited mark stay values, mountinfo fields hold no spaces.
#![cfg_attr(fuzzing, no_main)]

use runtime_agent::cgroup::{
    Limit, V1_UNLIMITED_FROM, parse_cpu_max, parse_flat_keyed, parse_max_or_u64, parse_mountinfo,
    parse_pressure_some_total, parse_proc_cgroup, parse_u64, parse_v1_cpu_limit, parse_v1_memory_limit,
};
use runtime_agent::procfs::{
    count_cpu_list, parse_btime, parse_cpu_ticks, parse_open_files_limit, parse_smaps_rollup,
    parse_starttime_ticks, parse_status,
};

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for (key, _) in parse_flat_keyed(text) {
        assert!(text.contains(key));
    }
    if parse_pressure_some_total(text).is_some() {
        assert!(text.contains("some") && text.contains("total="));
    }
    let _ = parse_u64(text);
    let _ = parse_max_or_u64(text);
    if let Some(Limit::Value(v)) = parse_v1_memory_limit(text) {
        assert!(v < V1_UNLIMITED_FROM);
    }
    let _ = parse_cpu_max(text);
    if let Some((a, b)) = text.split_at_checked(text.len() / 2) {
        let _ = parse_v1_cpu_limit(a, b);
    }
    for m in parse_mountinfo(text) {
        assert!(!m.fstype.contains(' '));
    }
    for m in parse_proc_cgroup(text) {
        assert!(m.controllers.iter().all(|c| !c.is_empty() && !c.contains(',')));
    }
    let _ = parse_status(text);
    if let Some(n) = count_cpu_list(text.trim()) {
        assert!(n >= 1);
    }
    let _ = parse_smaps_rollup(text);
    let _ = parse_open_files_limit(text);
    let _ = parse_starttime_ticks(text);
    let _ = parse_cpu_ticks(text);
    let _ = parse_btime(text);
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

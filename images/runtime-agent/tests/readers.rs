//! The cgroup and /proc readers against fixture trees (collector-design.md §2
//! "Fixtures"): v2, hybrid, v1, one tree recorded from a real hybrid host, and
//! variants made in a temp dir.

use std::fs;
use std::path::{Path, PathBuf};

use runtime_agent::cgroup::{self, CgroupSample, Layout, Limit, Roots};
use runtime_agent::payload::{CgroupMode, Signal};
use runtime_agent::procfs;

fn fixture(name: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn roots(base: &Path) -> Roots {
    Roots {
        proc: base.join("proc"),
        cgroup: base.join("cgroup"),
    }
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn temp_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture(name), dir.path());
    dir
}

fn read(base: &Path) -> (Layout, CgroupSample) {
    let layout = cgroup::discover(&roots(base));
    let sample = cgroup::read(&layout);
    (layout, sample)
}

fn signals(s: &CgroupSample) -> Vec<Signal> {
    s.signals().into_iter().collect()
}

const V2_PATH: &str = "kubepods.slice/kubepods-pod0d9f6a52.slice/cri-containerd-abc.scope";

#[test]
fn v2_full() {
    let base = fixture("v2");
    let (layout, s) = read(&base);
    assert_eq!(layout.mode, CgroupMode::V2);
    assert_eq!(layout.unified, Some(base.join("cgroup").join(V2_PATH)));
    assert_eq!(s.cpu_usage_ns, Some(12_500_000_000));
    assert_eq!((s.cpu_periods, s.cpu_throttled_periods), (Some(200), Some(12)));
    assert_eq!(s.cpu_throttled_ns, Some(340_000_000));
    assert_eq!(s.cpu_limit_milli, Limit::Value(1500));
    assert_eq!(s.cpu_psi_ns, Some(4_000_000), "PSI µs ×1000");
    assert_eq!(s.memory_psi_ns, Some(500_000));
    assert_eq!(s.working_set_bytes(), Some(104_857_600 - 8_388_608));
    assert_eq!(s.memory_limit_bytes, Limit::Value(4_294_967_296));
    assert_eq!(s.memory_peak_bytes, Some(1_210_056_704));
    assert_eq!(s.oom_kill, Some(1));
    assert_eq!(s.oom_group, Some(true));
    assert_eq!(s.psi_enabled, Some(true));
    assert!(s.missing_files.is_empty(), "{:?}", s.missing_files);
    assert_eq!(
        signals(&s),
        vec![Signal::Cpu, Signal::Memory, Signal::Psi, Signal::Throttling]
    );
    assert!(!s.failed());
}

#[test]
fn v2_without_the_cpu_controller_has_no_throttling() {
    let dir = temp_copy("v2");
    let cg = dir.path().join("cgroup").join(V2_PATH);
    fs::write(
        cg.join("cpu.stat"),
        "usage_usec 100\nuser_usec 60\nsystem_usec 40\n",
    )
    .unwrap();
    fs::remove_file(cg.join("cpu.max")).unwrap();
    let (_, s) = read(dir.path());
    assert_eq!(s.cpu_usage_ns, Some(100_000));
    assert_eq!((s.cpu_periods, s.cpu_throttled_periods), (None, None));
    assert_eq!(s.cpu_limit_milli, Limit::Unread);
    assert_eq!(s.missing_files.iter().collect::<Vec<_>>(), vec!["cpu.max"]);
    assert_eq!(signals(&s), vec![Signal::Cpu, Signal::Memory, Signal::Psi]);
}

#[test]
fn v2_with_psi_off_has_no_pressure_signal_and_misses_nothing() {
    let dir = temp_copy("v2");
    let cg = dir.path().join("cgroup").join(V2_PATH);
    fs::write(cg.join("cgroup.pressure"), "0\n").unwrap();
    let (_, s) = read(dir.path());
    assert_eq!(
        (s.cpu_psi_ns, s.memory_psi_ns, s.psi_enabled),
        (None, None, Some(false))
    );
    assert!(s.missing_files.is_empty());
    assert_eq!(signals(&s), vec![Signal::Cpu, Signal::Memory, Signal::Throttling]);
}

#[test]
fn v2_without_memory_peak_reports_it_missing() {
    let dir = temp_copy("v2");
    let cg = dir.path().join("cgroup").join(V2_PATH);
    fs::remove_file(cg.join("memory.peak")).unwrap();
    fs::write(cg.join("memory.events"), "low 0\nhigh 0\nmax 0\noom 0\n").unwrap();
    let (_, s) = read(dir.path());
    assert_eq!(s.memory_peak_bytes, None);
    assert_eq!(s.oom_kill, None);
    assert_eq!(
        s.missing_files.iter().collect::<Vec<_>>(),
        vec!["memory.events", "memory.peak"]
    );
    assert!(!s.failed(), "peak and events are not core reads");
}

#[test]
fn v2_at_the_wrong_cgroup_reports_memory_unavailable() {
    // Our path does not exist under the mount (a wrong guess): no host-wide fallback.
    let dir = temp_copy("v2");
    fs::write(dir.path().join("proc/self/cgroup"), "0::/elsewhere\n").unwrap();
    let (_, s) = read(dir.path());
    assert_eq!((s.cpu_usage_ns, s.working_set_bytes()), (None, None));
    assert!(s.failed());
    assert!(s.missing_files.contains("memory.current"));
    assert!(s.missing_files.contains("cpu.stat"));
}

#[test]
fn hybrid_reads_cpu_from_unified_and_the_rest_from_v1() {
    let base = fixture("hybrid");
    let (layout, s) = read(&base);
    assert_eq!(layout.mode, CgroupMode::Hybrid);
    let path = "kubepods/burstable/pod0d9f6a52/abc";
    assert_eq!(layout.unified, Some(base.join("cgroup/unified").join(path)));
    assert_eq!(layout.cpu, Some(base.join("cgroup/cpu,cpuacct").join(path)));
    assert_eq!(layout.memory, Some(base.join("cgroup/memory").join(path)));
    assert_eq!(
        s.cpu_usage_ns,
        Some(7_000_000_000),
        "from unified/cpu.stat, not cpuacct.usage"
    );
    assert_eq!(
        (s.cpu_periods, s.cpu_throttled_periods, s.cpu_throttled_ns),
        (Some(500), Some(40), Some(900_000_000))
    );
    assert_eq!(s.cpu_limit_milli, Limit::Value(500));
    assert_eq!((s.cpu_psi_ns, s.memory_psi_ns), (Some(3_000_000), Some(70_000)));
    assert_eq!(
        s.working_set_bytes(),
        Some(73_400_320 - 6_291_456),
        "total_inactive_file, not inactive_file"
    );
    assert_eq!(s.memory_limit_bytes, Limit::Value(536_870_912));
    assert_eq!(s.memory_peak_bytes, Some(90_177_536));
    assert_eq!(s.oom_kill, Some(2));
    assert_eq!(s.oom_group, None);
    assert!(s.missing_files.is_empty(), "{:?}", s.missing_files);
    assert_eq!(
        signals(&s),
        vec![Signal::Cpu, Signal::Memory, Signal::Psi, Signal::Throttling]
    );
}

#[test]
fn hybrid_is_found_by_probing_without_mountinfo() {
    let dir = temp_copy("hybrid");
    fs::remove_file(dir.path().join("proc/self/mountinfo")).unwrap();
    let (layout, s) = read(dir.path());
    assert_eq!(layout.mode, CgroupMode::Hybrid);
    assert_eq!(s.cpu_usage_ns, Some(7_000_000_000));
    assert_eq!(s.working_set_bytes(), Some(73_400_320 - 6_291_456));
}

#[test]
fn hybrid_without_unified_cpu_stat_falls_back_to_cpuacct() {
    let dir = temp_copy("hybrid");
    fs::remove_file(
        dir.path()
            .join("cgroup/unified/kubepods/burstable/pod0d9f6a52/abc/cpu.stat"),
    )
    .unwrap();
    let (_, s) = read(dir.path());
    assert_eq!(s.cpu_usage_ns, Some(6_999_999_000));
    assert_eq!(
        s.missing_files.iter().collect::<Vec<_>>(),
        vec!["unified/cpu.stat"]
    );
}

#[test]
fn v1_resolves_paths_against_the_mount_root() {
    let base = fixture("v1");
    let (layout, s) = read(&base);
    assert_eq!(layout.mode, CgroupMode::V1);
    assert_eq!(layout.memory, Some(base.join("cgroup/memory")));
    assert_eq!(layout.cpuacct, Some(base.join("cgroup/cpuacct")));
    assert_eq!(layout.unified, None);
    assert_eq!(s.cpu_usage_ns, Some(123_456_789));
    assert_eq!(
        (s.cpu_periods, s.cpu_throttled_periods, s.cpu_throttled_ns),
        (Some(10), Some(1), Some(5_000_000))
    );
    assert_eq!(s.cpu_limit_milli, Limit::Unlimited);
    assert_eq!(s.working_set_bytes(), Some(33_554_432 - 2_097_152));
    assert_eq!(s.memory_limit_bytes, Limit::Unlimited, "≈2^63 means no limit");
    assert_eq!(s.memory_peak_bytes, Some(41_943_040));
    assert_eq!(s.oom_kill, None, "no oom_kill before 4.13: absent, not 0");
    assert_eq!(
        s.missing_files.iter().collect::<Vec<_>>(),
        vec!["memory.oom_control"]
    );
    assert_eq!((s.cpu_psi_ns, s.memory_psi_ns), (None, None));
    assert_eq!(signals(&s), vec![Signal::Cpu, Signal::Memory, Signal::Throttling]);
}

#[test]
fn no_cgroup_at_all_is_mode_none_and_a_failed_poll() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("proc/self")).unwrap();
    fs::create_dir_all(dir.path().join("cgroup")).unwrap();
    let (layout, s) = read(dir.path());
    assert_eq!(layout.mode, CgroupMode::None);
    assert!(s.failed());
    assert!(s.signals().is_empty());
}

#[test]
fn recorded_hybrid_host() {
    let base = fixture("recorded-hybrid");
    let (layout, s) = read(&base);
    assert_eq!(layout.mode, CgroupMode::Hybrid);
    assert_eq!(layout.unified, Some(base.join("cgroup/unified")));
    assert_eq!(layout.cpu, Some(base.join("cgroup/cpu")));
    assert_eq!(layout.cpuacct, Some(base.join("cgroup/cpuacct")));
    assert_eq!(
        layout.memory,
        Some(base.join("cgroup/memory/process_api/0e73d94d64916d7bf24c33b88361324e"))
    );
    assert_eq!(s.cpu_usage_ns, Some(5_257_700_352_000));
    assert_eq!(
        (s.cpu_periods, s.cpu_throttled_periods),
        (Some(0), Some(0)),
        "v1 cpu.stat"
    );
    assert_eq!(s.cpu_limit_milli, Limit::Unlimited);
    assert_eq!(s.cpu_psi_ns, Some(2_263_872_172_000));
    assert_eq!(s.memory_psi_ns, Some(574_803_000));
    assert_eq!(s.working_set_bytes(), Some(115_007_488 - 62_017_536));
    assert_eq!(s.memory_limit_bytes, Limit::Unlimited);
    assert_eq!(s.memory_peak_bytes, Some(336_044_032));
    assert_eq!(s.oom_kill, Some(0));
    assert!(s.missing_files.is_empty(), "{:?}", s.missing_files);

    let scan = procfs::scan(&base.join("proc"));
    assert_eq!(scan.processes.len(), 1);
    let p = &scan.processes[0];
    assert_eq!(p.pid, 1);
    assert_eq!(p.vm_hwm_bytes, Some(14_696 * 1024));
    assert_eq!(
        (p.rss_anon_bytes, p.rss_file_bytes),
        (Some(8_144 * 1024), Some(8 * 1024))
    );
    assert_eq!((p.threads, p.cpus_allowed), (Some(11), Some(2)));
    assert_eq!(p.open_files_limit, Some(32_768));
    assert_eq!(
        (p.pss_bytes, p.private_dirty_bytes, p.open_files),
        (None, None, None),
        "unreadable: absent"
    );
    assert_eq!(
        procfs::container_started_at(&base.join("proc"), 100),
        Some(1_795_964_614)
    );
}

#[test]
fn v2_processes_and_peaks() {
    let base = fixture("v2");
    let scan = procfs::scan(&base.join("proc"));
    let pids: Vec<u32> = scan.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![1, 42]);
    assert_eq!(scan.processes[0].pss_bytes, Some(634_880 * 1024));
    assert_eq!(scan.processes[0].private_dirty_bytes, Some(584_704 * 1024));
    assert_eq!(scan.processes[0].open_files, Some(3));
    assert_eq!(scan.processes[1].open_files, Some(4));
    assert_eq!(scan.processes[1].pss_bytes, None);
    let mut acc = procfs::PeaksAccumulator::default();
    acc.observe(1_786_010_410, &scan, Some(1_210_056_704));
    let (peaks, at) = acc.current().unwrap();
    assert_eq!(at, 1_786_010_410);
    assert_eq!(peaks.peak_rss_bytes, Some(716_800 * 1024));
    assert_eq!(peaks.processes, 2);
    assert_eq!(
        (
            peaks.threads_max,
            peaks.open_files_max,
            peaks.open_files_limit_min
        ),
        (Some(57), Some(4), Some(1_048_576))
    );
    assert_eq!(
        (peaks.cpus_allowed_min, peaks.cpus_allowed_max),
        (Some(16), Some(16))
    );
    assert_eq!(
        procfs::container_started_at(&base.join("proc"), 100),
        Some(1_786_000_000 + 2_500)
    );
}

#[test]
fn a_vanished_process_is_skipped_and_counted() {
    let dir = temp_copy("v2");
    // The pid directory is listed but its files are gone (the process exited).
    fs::create_dir_all(dir.path().join("proc/77")).unwrap();
    let scan = procfs::scan(&dir.path().join("proc"));
    assert_eq!(scan.vanished, 1);
    assert_eq!(
        scan.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![1, 42]
    );
}

#[test]
fn the_readers_never_open_environ_or_cmdline() {
    // Canary files in every process directory; the scan's result carries no text of
    // any file, and no reader takes these names.
    let dir = temp_copy("v2");
    for pid in ["1", "42"] {
        fs::write(
            dir.path().join("proc").join(pid).join("environ"),
            "BUZZ_PRIVATE_KEY=canary-c4n4ry\0",
        )
        .unwrap();
        fs::write(
            dir.path().join("proc").join(pid).join("cmdline"),
            "canary-c4n4ry\0",
        )
        .unwrap();
    }
    let scan = procfs::scan(&dir.path().join("proc"));
    assert!(!format!("{scan:?}").contains("canary"));
    let source = include_str!("../src/procfs.rs");
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    assert!(!code.contains("\"environ\"") && !code.contains("\"cmdline\""));
}

use super::*;

const RUN: &str = "/run/buzz-real-node/n-1";

fn cmdline(args: &[&str]) -> Vec<u8> {
    let mut v = args.join("\0").into_bytes();
    v.push(0);
    v
}

/// A `/proc`-shaped dir: `<pid>/cmdline` per process.
fn fake_proc(procs: &[(i32, &[&str])]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (pid, args) in procs {
        let p = d.path().join(pid.to_string());
        fs::create_dir(&p).unwrap();
        fs::write(p.join("cmdline"), cmdline(args)).unwrap();
    }
    fs::create_dir(d.path().join("self")).unwrap();
    fs::write(d.path().join("self/cmdline"), cmdline(&["containerd", RUN])).unwrap();
    d
}

fn dirs(root: &Path, rels: &[&str]) {
    for r in rels {
        fs::create_dir_all(root.join(r)).unwrap();
    }
}

#[test]
fn a_run_dir_is_named_only_as_a_whole_path_component() {
    let run = RUN.as_bytes();
    for yes in [
        RUN,
        "/run/buzz-real-node/n-1/run/s",
        "--root-dir=/run/buzz-real-node/n-1/kubelet",
        "unix:///run/buzz-real-node/n-1/run/containerd/containerd.sock",
    ] {
        assert!(names_dir(yes.as_bytes(), run), "{yes}");
    }
    for no in [
        "/run/buzz-real-node/n-12",
        "/run/buzz-real-node/n-12/log",
        "/run/buzz-real-node/n-1.log",
        "/run/buzz-real-node/n-",
        "",
        "n-1",
    ] {
        assert!(!names_dir(no.as_bytes(), run), "{no}");
    }
    assert!(!names_dir(b"anything", b""));
}

#[test]
fn only_the_nodes_own_programs_naming_the_run_dir_are_the_nodes() {
    let run = Path::new(RUN);
    let shim = cmdline(&[
        "/cache/bin/containerd-shim-runc-v2",
        "-namespace",
        "k8s.io",
        "-id",
        "abc",
        "-address",
        "/run/buzz-real-node/n-1/run/containerd/containerd.sock",
    ]);
    assert!(is_node_process(&shim, run));
    assert!(is_node_process(
        &cmdline(&[
            "/usr/sbin/runc",
            "--root",
            "/run/buzz-real-node/n-1/run/runc",
            "kill"
        ]),
        run
    ));
    assert!(is_node_process(
        &cmdline(&["kubelet", "--root-dir=/run/buzz-real-node/n-1/kubelet"]),
        run
    ));
    // Another node's shim (a prefix of this run dir's name is not this run dir).
    assert!(!is_node_process(
        &cmdline(&[
            "/cache/bin/containerd-shim-runc-v2",
            "-address",
            "/run/buzz-real-node/n-12/run/containerd/containerd.sock"
        ]),
        run
    ));
    // A user's processes that name the run dir are not the node's.
    assert!(!is_node_process(
        &cmdline(&["tail", "-f", "/run/buzz-real-node/n-1/kubelet.log"]),
        run
    ));
    assert!(!is_node_process(
        &cmdline(&["/usr/bin/vim", "/run/buzz-real-node/n-1/etc/kubelet.yaml"]),
        run
    ));
    assert!(!is_node_process(
        &cmdline(&["/usr/bin/kubelet-wrapper", "/run/buzz-real-node/n-1"]),
        run
    ));
    assert!(!is_node_process(b"", run));
    assert!(!is_node_process(&cmdline(&["containerd"]), run));
}

#[test]
fn leftovers_are_the_nodes_processes_and_its_cgroups_never_a_neighbour() {
    let proc = fake_proc(&[
        (1, &["containerd", RUN]),
        (10, &["sleep", "60", "/run/buzz-real-node/n-12"]),
        (11, &["tail", "-f", "/run/buzz-real-node/n-1/log"]),
        (
            12,
            &[
                "/bin/containerd-shim-runc-v2",
                "-address",
                "/run/buzz-real-node/n-1/run/containerd/containerd.sock",
            ],
        ),
        (
            13,
            &[
                "/bin/containerd-shim-runc-v2",
                "-address",
                "/run/buzz-real-node/n-12/run/containerd/containerd.sock",
            ],
        ),
        (
            14,
            &[
                "/usr/bin/docker-registry",
                "serve",
                "/run/buzz-real-node/n-1/registry/config.yml",
            ],
        ),
        (
            99,
            &[
                "/bin/containerd",
                "--config",
                "/run/buzz-real-node/n-1/etc/containerd.toml",
            ],
        ),
    ]);
    let cg = tempfile::tempdir().unwrap();
    dirs(
        cg.path(),
        &["memory/kubepods/besteffort/pod1/c1", "memory/user.slice"],
    );
    fs::write(
        cg.path().join("memory/kubepods/besteffort/pod1/c1/cgroup.procs"),
        "40\n41\n",
    )
    .unwrap();
    fs::write(
        cg.path().join("memory/kubepods/besteffort/pod1/cgroup.procs"),
        "39\n",
    )
    .unwrap();
    fs::write(cg.path().join("memory/user.slice/cgroup.procs"), "50\n").unwrap();
    // 99 is the caller itself; 1 is never signalled.
    assert_eq!(
        leftover_pids_in(cg.path(), proc.path(), Path::new(RUN), 99),
        vec![12, 14, 39, 40, 41]
    );
}

#[test]
fn kubepods_is_found_in_the_v1_and_the_unified_layout() {
    // cgroup v1 (this machine: a tmpfs of controllers, `unified/` on a hybrid host).
    let v1 = tempfile::tempdir().unwrap();
    dirs(
        v1.path(),
        &[
            "memory/kubepods/burstable",
            "cpu,cpuacct/kubepods",
            "pids/system.slice",
            "unified/kubepods",
        ],
    );
    fs::write(v1.path().join("cgroup.stray"), "").unwrap();
    let p = v1.path();
    assert_eq!(
        kubepods_roots_in(p),
        vec![
            p.join("cpu,cpuacct/kubepods"),
            p.join("memory/kubepods"),
            p.join("unified/kubepods")
        ]
    );
    assert_eq!(kubelet_cgroup_in(p), Some(p.join("cpu,cpuacct/kubepods")));

    // cgroup v2: one hierarchy, the cgroupfs driver's root at its top.
    let v2 = tempfile::tempdir().unwrap();
    let p = v2.path();
    fs::write(p.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    dirs(
        p,
        &[
            "kubepods/burstable/pod1",
            "system.slice/ssh.service",
            "user.slice",
        ],
    );
    assert_eq!(kubepods_roots_in(p), vec![p.join("kubepods")]);
    assert_eq!(kubelet_cgroup_in(p), Some(p.join("kubepods")));
    fs::write(p.join("kubepods/burstable/pod1/cgroup.procs"), "77\n").unwrap();
    let proc = fake_proc(&[]);
    assert_eq!(leftover_pids_in(p, proc.path(), Path::new(RUN), 2), vec![77]);

    // A systemd-driver kubelet (`kubepods.slice`) is foreign too, in both layouts.
    let sd = tempfile::tempdir().unwrap();
    fs::write(sd.path().join("cgroup.controllers"), "").unwrap();
    dirs(sd.path(), &["kubepods.slice"]);
    assert_eq!(
        kubelet_cgroup_in(sd.path()),
        Some(sd.path().join("kubepods.slice"))
    );
    assert!(
        kubepods_roots_in(sd.path()).is_empty(),
        "never removed: not this node's"
    );

    let empty = tempfile::tempdir().unwrap();
    assert_eq!(kubelet_cgroup_in(empty.path()), None);
    assert!(kubepods_roots_in(empty.path()).is_empty());
}

#[test]
fn an_emptied_kubepods_tree_is_removed_deepest_first() {
    let cg = tempfile::tempdir().unwrap();
    let p = cg.path();
    dirs(
        p,
        &[
            "kubepods/besteffort/pod1/c1",
            "kubepods/burstable",
            "system.slice",
        ],
    );
    let mut errors = Vec::new();
    remove_kubepods_cgroups(p, &mut errors);
    assert_eq!(errors, Vec::<String>::new());
    assert!(!p.join("kubepods").exists());
    assert!(p.join("system.slice").exists());
}

#[test]
fn mount_points_are_unescaped() {
    assert_eq!(unescape_mount("/tmp/a\\040b"), PathBuf::from("/tmp/a b"));
    assert_eq!(unescape_mount("/tmp/plain"), PathBuf::from("/tmp/plain"));
}

//! Extending the product image with dpkg (review 9b395e0 finding 8;
//! `docs/image.md`, "Extend it"). The trim (`images/sprig/rootfs-trim.sh`)
//! purges perl, debconf, GNU coreutils and a few more after install. A
//! package that needs one of them must be refused at its dependency check,
//! before any of its maintainer scripts runs; nothing in the image may claim
//! to provide what is not there (a stand-in that did let such a package
//! unpack and then fail in its postinst, half-configured).
//!
//! Offline, with no package index: each case is a `.deb` built here with the
//! host's `dpkg-deb`, whose control file depends on one purged package and
//! whose postinst leaves a marker before it uses that package. The image's
//! own dpkg installs it, as root, with no network. A control case that
//! depends on what the image has (bash, git) shows the same path installs and
//! runs its postinst. (The offline image has no apt: `apt-get` in a derived
//! image is "not found"; the docs say so.)

use buzz_conformance::container::{Podman, ULIMITS, sprig_image};
use std::path::Path;
use std::process::Command;

/// (package name, its Depends, the postinst line that needs the dependency).
const NEEDS_OMITTED: [(&str, &str, &str); 4] = [
    ("buzz-test-needs-perl", "perl (>= 5.36)", "perl -e 'exit 0'"),
    (
        "buzz-test-needs-debconf",
        "debconf (>= 0.5) | debconf-2.0",
        ". /usr/share/debconf/confmodule",
    ),
    ("buzz-test-needs-coreutils", "coreutils (>= 8.0)", "nohup true"),
    (
        "buzz-test-needs-git-man",
        "git-man",
        "test -d /usr/share/man/man1",
    ),
];
const CONTROL: (&str, &str, &str) = ("buzz-test-needs-bash", "bash, git", "git --version");

/// Builds `NAME_1_all.deb` in `dir`: Depends `depends`, a postinst that
/// touches /var/tmp/NAME.postinst-ran and then runs `uses`.
fn build_deb(dir: &Path, (name, depends, uses): (&str, &str, &str)) {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: 1\nArchitecture: all\nMaintainer: buzz tests <noreply@localhost>\n\
             Depends: {depends}\nDescription: image suite case (conformance/tests/image/dpkg.rs)\n"
        ),
    )
    .unwrap();
    let postinst = root.join("DEBIAN/postinst");
    std::fs::write(
        &postinst,
        format!("#!/bin/sh\nset -e\ntouch /var/tmp/{name}.postinst-ran\n{uses}\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&postinst, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(&root)
        .arg(dir.join(format!("{name}_1_all.deb")))
        .output()
        .expect("dpkg-deb runs (Debian's dpkg on the host)");
    assert!(
        out.status.success(),
        "dpkg-deb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One case's outcome, as the image's dpkg left it.
#[derive(Debug)]
struct Outcome {
    exit: String,
    status: String,
    postinst_ran: bool,
    output: String,
}

/// `dpkg -i` of each package's .deb in one container (root, no network), one
/// after another; the outcomes in order.
fn install_in_image(debs: &Path, names: &[&str]) -> Vec<Outcome> {
    let mut script = String::from("export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
    for n in names {
        script.push_str(&format!(
            "dpkg -i /debs/{n}_1_all.deb >/tmp/{n}.out 2>&1 && rc=0 || rc=$?\n\
             echo \"== {n}\"; echo \"exit $rc\"\n\
             echo \"status $(dpkg-query -W -f='${{Status}}' {n} 2>/dev/null)\"\n\
             if [ -e /var/tmp/{n}.postinst-ran ]; then echo ran; else echo not-ran; fi\n\
             sed 's/^/| /' /tmp/{n}.out\n"
        ));
    }
    let podman = Podman::from_env();
    let out = podman
        .command()
        .args(["run", "--rm", "--network=none", "--user", "0"])
        .args(ULIMITS)
        .arg("-v")
        .arg(format!("{}:/debs:ro", debs.display()))
        .args([
            "--entrypoint",
            "/bin/bash",
            &sprig_image().reference,
            "-c",
            &script,
        ])
        .output()
        .expect("podman runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the script failed in the image: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.split("== ")
        .skip(1)
        .map(|block| {
            let mut lines = block.lines().skip(1);
            let exit = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("exit ")
                .to_string();
            let status = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("status ")
                .to_string();
            let postinst_ran = lines.next() == Some("ran");
            let output = lines.collect::<Vec<_>>().join("\n");
            Outcome {
                exit,
                status,
                postinst_ran,
                output,
            }
        })
        .collect()
}

#[test]
fn a_deb_needing_a_purged_package_is_refused_before_its_scripts_run() {
    let tmp = tempfile::tempdir().unwrap();
    let debs = tmp.path();
    let mut names = Vec::new();
    for case in NEEDS_OMITTED.into_iter().chain([CONTROL]) {
        build_deb(debs, case);
        names.push(case.0);
    }
    let outcomes = install_in_image(debs, &names);
    assert_eq!(
        outcomes.len(),
        names.len(),
        "one outcome per package: {outcomes:?}"
    );

    for ((name, depends, _), o) in NEEDS_OMITTED.iter().zip(&outcomes) {
        let needed = depends.split([' ', '|']).next().unwrap();
        assert!(
            !o.postinst_ran,
            "{name} (Depends: {depends}): its postinst ran, so dpkg took `{needed}` as present; dpkg said:\n{}",
            o.output
        );
        assert_ne!(
            o.exit, "0",
            "{name}: dpkg -i succeeded without {needed}:\n{}",
            o.output
        );
        assert_eq!(
            o.status, "install ok unpacked",
            "{name}: left unconfigured by the dependency check (not half-configured by a failed script):\n{}",
            o.output
        );
        assert!(
            o.output.contains("dependency problems") && o.output.contains(needed),
            "{name}: dpkg names the missing {needed}:\n{}",
            o.output
        );
    }
    let control = outcomes.last().unwrap();
    assert_eq!(
        (
            control.exit.as_str(),
            control.status.as_str(),
            control.postinst_ran
        ),
        ("0", "install ok installed", true),
        "a package whose dependencies the image has installs and runs its postinst:\n{}",
        control.output
    );
}

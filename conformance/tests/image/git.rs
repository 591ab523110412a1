//! git in the product image (issue 22 part 1, spec §Image: bash, git, CA
//! certificates): the image as built, not the test layer, run by podman as
//! the pod runs it — uid 10001, every capability dropped, no-new-privileges,
//! HOME=/home/agent on a fresh volume — against a repository the host serves
//! on loopback over HTTPS ([`super::git_server`]). Each step is checked on
//! real output: the commit the image pushed is the served branch's head on
//! the host side, and what the host pushed next is what the image fetches,
//! logs and diffs.
//!
//! The image is trimmed (no perl, no git-man, no server-side git commands,
//! gettext's `envsubst` in place of git's own): these tests are what says the
//! git an agent uses still works.

use super::git_server::{GitServer, host_git, seeded_repo};
use buzz_conformance::container::{Podman, ULIMITS, prepare_volume, sprig_image};
use std::path::Path;

/// What one `bash -c` in the image printed, and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(self, what: &str) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "{what} failed in the image:\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self.stdout
    }
}

/// Runs `script` under bash in the product image as uid 10001 with HOME on
/// `home` (mounted at /home/agent), on the host network (the server listens
/// on the host's loopback).
async fn in_image(home: &Path, script: &str) -> Ran {
    in_image_as(home, "10001:10001", script).await
}

/// [`in_image`] as `user` (`uid:gid`).
async fn in_image_as(home: &Path, user: &str, script: &str) -> Ran {
    let podman = Podman::from_env();
    let mut c = podman.tokio_command();
    c.args(["run", "--rm", "--network=host", "--cap-drop", "ALL"])
        .args(["--security-opt", "no-new-privileges", "--user", user])
        .args(ULIMITS)
        .arg("-v")
        .arg(format!("{}:/home/agent", home.display()))
        .args([
            "-w",
            "/home/agent",
            "--env",
            "HOME=/home/agent",
            "--env",
            "LC_ALL=C.UTF-8",
        ])
        .args([
            "--entrypoint",
            "/bin/bash",
            &sprig_image().reference,
            "-c",
            script,
        ]);
    let out = c.output().await.expect("podman runs");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fresh workspace volume owned by the pod's user.
fn workspace(tmp: &Path) -> std::path::PathBuf {
    let home = tmp.join("home");
    prepare_volume(&home, 10001, 10001).unwrap();
    home
}

/// The image's git settings for the test: an identity for commits, the test
/// CA as the only extra trust, and a stall bound so a hung transfer fails.
const GIT_SETUP: &str = r#"set -euo pipefail
git config --global user.name "Sprig Agent"
git config --global user.email agent@example.invalid
git config --global http.lowSpeedLimit 1
git config --global http.lowSpeedTime 30
"#;

/// A seeded repository the host serves over HTTPS on loopback, and the
/// image's home with the server's CA in it (`ca.pem`).
struct Served {
    tmp: tempfile::TempDir,
    /// The served repository on the host.
    served: std::path::PathBuf,
    /// Its `main` as seeded.
    seed: String,
    server: GitServer,
    home: std::path::PathBuf,
    /// The clone URL.
    url: String,
}

impl Served {
    async fn start() -> Served {
        let tmp = tempfile::tempdir().unwrap();
        let repos = tmp.path().join("repos");
        let served = seeded_repo(&repos, "served");
        let seed = host_git(&served, &["rev-parse", "main"]);
        let server = GitServer::start(&repos).await;
        let home = workspace(tmp.path());
        std::fs::write(home.join("ca.pem"), &server.ca_pem).unwrap();
        let url = format!("{}/served.git", server.url);
        Served {
            tmp,
            served,
            seed,
            server,
            home,
            url,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_commits_pushes_fetches_logs_and_diffs_over_https_as_uid_10001() {
    let Served {
        tmp,
        served,
        seed,
        server,
        home,
        url,
    } = Served::start().await;

    // 1. clone, commit, push.
    let script = format!(
        r#"{GIT_SETUP}git config --global http.sslCAInfo "$HOME/ca.pem"
git clone -q "{url}" work
cd work
test "$(git rev-parse HEAD)" = "{seed}"
printf 'written in the image\n' > notes.txt
git add notes.txt
git commit -q -m "commit from the image"
git push -q origin main
git rev-parse HEAD
"#
    );
    let out = in_image(&home, &script).await.ok("clone, commit, push");
    let pushed = out.lines().last().unwrap_or_default().to_string();
    assert_eq!(pushed.len(), 40, "no commit hash printed: {out:?}");
    assert_ne!(pushed, seed);
    // The push landed: the served branch is the image's commit, by its author,
    // on top of the seed, with the file's content.
    assert_eq!(host_git(&served, &["rev-parse", "main"]), pushed);
    assert_eq!(
        host_git(&served, &["log", "-1", "--format=%an <%ae>%n%s%n%P", "main"]),
        format!("Sprig Agent <agent@example.invalid>\ncommit from the image\n{seed}")
    );
    assert_eq!(
        host_git(&served, &["show", "main:notes.txt"]),
        "written in the image"
    );

    // 2. The host moves the branch on.
    let host_work = tmp.path().join("host-work");
    host_git(
        tmp.path(),
        &[
            "clone",
            "-q",
            served.to_str().unwrap(),
            host_work.to_str().unwrap(),
        ],
    );
    std::fs::write(
        host_work.join("README"),
        "seeded on the host\nchanged on the host\n",
    )
    .unwrap();
    host_git(&host_work, &["commit", "-q", "-a", "-m", "host change"]);
    host_git(&host_work, &["push", "-q", "origin", "main"]);
    let moved = host_git(&served, &["rev-parse", "main"]);
    assert_ne!(moved, pushed);

    // 3. fetch, log, diff.
    let script = r#"set -euo pipefail
cd work
git fetch -q origin
git log --format='%H %s' origin/main
echo '--- diff'
git diff HEAD origin/main
"#;
    let out = in_image(&home, script).await.ok("fetch, log, diff");
    let (log, diff) = out.split_once("--- diff\n").expect("both parts printed");
    let log: Vec<&str> = log.lines().collect();
    assert_eq!(
        log,
        vec![
            format!("{moved} host change").as_str(),
            format!("{pushed} commit from the image").as_str(),
            format!("{seed} seed").as_str(),
        ],
        "the fetched history, newest first"
    );
    assert!(diff.contains("diff --git a/README b/README"), "{diff}");
    assert!(diff.lines().any(|l| l == "+changed on the host"), "{diff}");
    assert!(
        !diff.lines().any(|l| l.starts_with('-') && !l.starts_with("---")),
        "only an added line: {diff}"
    );

    // Every transfer went over the smart protocol of this server: the push
    // through receive-pack, the clone and the fetch through upload-pack.
    let posts: Vec<String> = server
        .served()
        .into_iter()
        .filter(|s| s.method == "POST" && s.status == 200)
        .map(|s| s.target)
        .collect();
    assert!(
        posts.iter().any(|t| t == "/served.git/git-receive-pack"),
        "{posts:?}"
    );
    assert!(
        posts
            .iter()
            .filter(|t| *t == "/served.git/git-upload-pack")
            .count()
            >= 2,
        "{posts:?}"
    );
}

/// The image verifies TLS against its own CA bundle: a server whose CA is not
/// in it is refused; the bundle holds Debian's CAs; and once the server's CA
/// is appended to the bundle (as root with the pod's group, which reads the
/// volume, in a throwaway container) the same request goes through, so the
/// bundle is what git trusts by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_trusts_the_images_ca_bundle_and_nothing_else() {
    let Served {
        tmp: _tmp,
        served: _,
        seed,
        server,
        home,
        url,
    } = Served::start().await;
    let script = format!(
        r#"{GIT_SETUP}grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt
git ls-remote "{url}"
"#
    );
    let ran = in_image(&home, &script).await;
    assert_eq!(
        ran.code,
        Some(128),
        "stdout {:?}, stderr {:?}",
        ran.stdout,
        ran.stderr
    );
    let cas: u32 = ran.stdout.trim().parse().unwrap_or(0);
    assert!(cas >= 100, "the CA bundle holds {cas} certificates");
    assert!(
        ran.stderr.contains("server certificate verification failed"),
        "refused for its certificate: {}",
        ran.stderr
    );
    assert!(
        server.served().is_empty(),
        "no request got past the handshake: {:?}",
        server.served()
    );
    let script = format!(
        r#"set -euo pipefail
cat "$HOME/ca.pem" >> /etc/ssl/certs/ca-certificates.crt
git ls-remote "{url}"
"#
    );
    let out = in_image_as(&home, "0:10001", &script)
        .await
        .ok("ls-remote with the CA in the bundle");
    assert!(
        out.lines().any(|l| l == format!("{seed}\trefs/heads/main")),
        "{out}"
    );
}

/// git's shell-script commands run in the image: `git submodule` sources
/// git-sh-setup and git-sh-i18n, whose messages go through gettext's
/// `envsubst` (the image drops git's own copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_shell_script_commands_run_and_their_messages_are_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let home = workspace(tmp.path());
    let script = r#"set -uo pipefail
git --exec-path
git init -q --bare bare.git
cd bare.git
git submodule status
echo "exit $?"
"#;
    let ran = in_image(&home, script).await;
    assert_eq!(
        ran.code,
        Some(0),
        "stdout {:?}, stderr {:?}",
        ran.stdout,
        ran.stderr
    );
    assert!(ran.stdout.starts_with("/usr/lib/git-core\n"), "{}", ran.stdout);
    assert!(ran.stdout.ends_with("exit 1\n"), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains("fatal: /usr/lib/git-core/git-submodule cannot be used without a working tree."),
        "the message is substituted whole: {:?}",
        ran.stderr
    );
}

/// The agent-facing tools the spec's image lists beside git (§Image): `tree`
/// (rg is not in the image: README, "Known gaps of the image").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_lists_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let home = workspace(tmp.path());
    let script = r#"set -euo pipefail
mkdir -p t/src/deep t/docs
: > t/src/deep/main.rs
: > t/docs/README
tree -a -f -i --noreport t
"#;
    let out = in_image(&home, script).await.ok("tree");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![
            "t",
            "t/docs",
            "t/docs/README",
            "t/src",
            "t/src/deep",
            "t/src/deep/main.rs"
        ]
    );
}

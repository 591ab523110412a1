//! Real OCI containers for the suites (spec §Image, §Entrypoint and launch
//! ABI, [L3] item 3): podman with the settings measured for this machine kind
//! (`containers.md`: runc with the cgroupfs manager, default ulimits off, a
//! storage root private to the project), the sprig image built by
//! `scripts/image-build.sh`, and a test-only layer on top of it.
//!
//! - [`Podman`]: one podman invocation per call, always with the project's
//!   storage and runtime flags.
//! - [`sprig_image`]: the product image (built on first use when the env does
//!   not name one, like the control-plane binaries).
//! - [`test_image`]: the product image plus the scripted ACP test agent and a
//!   test sidecar. Never the product image itself.
//! - [`host`]: reading the container's processes from the host's `/proc`
//!   (their environment, state and parentage), so that no `podman exec` —
//!   whose process would inherit the container's environment — skews a check.

pub mod agent_images;
pub mod entrypoint;
pub mod host;
mod images;

pub use images::{SprigImage, sprig_image, test_image};

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Errors while driving podman.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// podman could not be started.
    #[error("podman: {0}")]
    Io(#[from] std::io::Error),
    /// podman ran and failed.
    #[error("podman {args}: exit {code:?}: {stderr}")]
    Failed {
        args: String,
        code: Option<i32>,
        stderr: String,
    },
    /// The image build script failed or printed nothing usable.
    #[error("image build: {0}")]
    Build(String),
    /// `podman inspect` printed something unexpected.
    #[error("podman inspect: unexpected output {0:?}")]
    Inspect(String),
    /// A run spec podman cannot be given.
    #[error("container spec: {0}")]
    Spec(String),
}

type Result<T, E = ContainerError> = std::result::Result<T, E>;

/// The hard limits podman may set inside containers (containers.md: the VM
/// lacks CAP_SYS_RESOURCE, so limits above the hard ones fail).
pub const ULIMITS: [&str; 4] = ["--ulimit", "nofile=10000:10000", "--ulimit", "nproc=10000:10000"];

/// podman with the project's storage root and runtime settings.
#[derive(Debug, Clone)]
pub struct Podman {
    root: PathBuf,
    runroot: PathBuf,
    conf: PathBuf,
}

/// The cache root of the image scripts (`BUZZ_IMAGE_CACHE`).
pub fn image_cache() -> PathBuf {
    if let Some(d) = std::env::var_os("BUZZ_IMAGE_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    base.join("buzz-image")
}

impl Podman {
    /// The settings of `scripts/podman-env.sh`: `BUZZ_PODMAN_ROOT`,
    /// `BUZZ_PODMAN_RUNROOT` and `CONTAINERS_CONF`, defaulting to the image cache.
    pub fn from_env() -> Podman {
        let cache = image_cache();
        let var = |name: &str, default: PathBuf| std::env::var_os(name).map(PathBuf::from).unwrap_or(default);
        Podman {
            root: var("BUZZ_PODMAN_ROOT", cache.join("storage")),
            runroot: var("BUZZ_PODMAN_RUNROOT", cache.join("run")),
            conf: var("CONTAINERS_CONF", cache.join("containers.conf")),
        }
    }

    fn global_args(&self) -> Vec<&OsStr> {
        vec![
            OsStr::new("--root"),
            self.root.as_os_str(),
            OsStr::new("--runroot"),
            self.runroot.as_os_str(),
            OsStr::new("--storage-driver"),
            OsStr::new("overlay"),
            OsStr::new("--runtime"),
            OsStr::new("runc"),
            OsStr::new("--cgroup-manager"),
            OsStr::new("cgroupfs"),
        ]
    }

    /// A `podman` command with the global flags and a minimal environment
    /// (no test secrets leak into podman through inheritance).
    pub fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
            )
            .env("HOME", std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .env("CONTAINERS_CONF", &self.conf)
            .args(self.global_args())
            .stdin(Stdio::null());
        c
    }

    /// The same as a tokio command (for waits that must not block a runtime).
    pub fn tokio_command(&self) -> tokio::process::Command {
        tokio::process::Command::from(self.command())
    }

    /// Runs `podman args…`; stdout on success, a typed error otherwise.
    pub fn run<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = self.command();
        c.args(args);
        output_of(&mut c)
    }

    /// `podman save` of `image` as an OCI archive at `to` (its layers
    /// gzip-compressed, as image-build.sh writes the product image's).
    pub fn save_oci_archive(&self, image: &str, to: &Path) -> Result<()> {
        let args: [&OsStr; 7] = [
            "save".as_ref(),
            "--quiet".as_ref(),
            "--format".as_ref(),
            "oci-archive".as_ref(),
            "-o".as_ref(),
            to.as_os_str(),
            image.as_ref(),
        ];
        self.run(args).map(|_| ())
    }

    /// True when `image` is in the project's storage.
    pub fn image_exists(&self, image: &str) -> bool {
        self.command()
            .args(["image", "exists", image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `podman inspect --format FORMAT ID`, trimmed.
    pub fn inspect(&self, id: &str, format: &str) -> Result<String> {
        Ok(self.run(["inspect", "--format", format, id])?.trim().to_string())
    }

    /// The container's state as a node reports it.
    pub fn state(&self, id: &str) -> Result<ContainerState> {
        let f = "{{.State.Status}}|{{.State.Running}}|{{.State.ExitCode}}|{{.State.Pid}}|\
                 {{.State.StartedAt.UTC.Format \"2006-01-02T15:04:05Z\"}}|\
                 {{.State.FinishedAt.UTC.Format \"2006-01-02T15:04:05Z\"}}|{{.State.OOMKilled}}";
        let out = self.inspect(id, f)?;
        let p: Vec<&str> = out.split('|').collect();
        if p.len() != 7 {
            return Err(ContainerError::Inspect(out));
        }
        let num = |s: &str| s.parse::<i32>().map_err(|_| ContainerError::Inspect(out.clone()));
        Ok(ContainerState {
            status: p[0].to_string(),
            running: p[1] == "true",
            exit_code: num(p[2])?,
            pid: num(p[3])?,
            started_at: p[4].to_string(),
            finished_at: p[5].to_string(),
            oom_killed: p[6] == "true",
        })
    }

    /// `podman rm -f` (errors ignored: cleanup).
    pub fn remove(&self, id: &str) {
        let _ = self
            .command()
            .args(["rm", "-f", "-t", "0", id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// The container's output so far (stdout and stderr interleaved as podman kept them).
    pub fn logs(&self, id: &str) -> String {
        let mut c = self.command();
        c.args(["logs", id]);
        match c.output() {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("<podman logs failed: {e}>"),
        }
    }
}

/// What `podman inspect` says about a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    /// `created`, `running`, `exited`, …
    pub status: String,
    /// True while the container runs.
    pub running: bool,
    /// The real exit code (meaningful once exited).
    pub exit_code: i32,
    /// Host pid of the container's PID 1 (0 when not running).
    pub pid: i32,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// RFC 3339, UTC.
    pub finished_at: String,
    /// The kernel OOM-killed it.
    pub oom_killed: bool,
}

fn output_of(c: &mut Command) -> Result<String> {
    let out: Output = c.stderr(Stdio::piped()).stdout(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(ContainerError::Failed {
            args: format!("{:?}", c.get_args().skip(10).collect::<Vec<_>>()),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr)
                .trim()
                .chars()
                .take(2000)
                .collect(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// How to run one container the way a pod's container runs (spec §Pod shape
/// hardening: non-root, all capabilities dropped, no privilege escalation,
/// the default seccomp profile, HOME on a writable volume).
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Image reference in the project's storage.
    pub image: String,
    /// Container name.
    pub name: String,
    /// uid:gid.
    pub user: (u32, u32),
    /// Environment, passed to podman through its own environment and named
    /// with `--env NAME`, so values never appear in podman's argv and may hold
    /// any byte but NUL (newlines included, unlike an env file).
    pub env: Vec<(String, String)>,
    /// A `KEY=VALUE` env file (the Secret-shaped file of the image tests).
    pub env_file: Option<PathBuf>,
    /// Host directory mounted at `mount_at` (the pod's workspace emptyDir).
    pub volume: PathBuf,
    /// Where the volume is mounted (`/home/agent`).
    pub mount_at: String,
    /// Working directory.
    pub workdir: Option<String>,
    /// Seconds `podman stop` waits before SIGKILL (the grace period).
    pub stop_timeout: u32,
    /// Extra labels.
    pub labels: Vec<(String, String)>,
}

impl RunSpec {
    /// Starts the container detached; returns its id.
    pub fn start(&self, podman: &Podman) -> Result<String> {
        self.start_as(podman, None, None)
    }

    /// Starts the container detached with a pod container's `command` (it
    /// replaces the image's entrypoint) and `args` (they replace its cmd),
    /// as a kubelet does; returns its id.
    pub fn start_as(
        &self,
        podman: &Podman,
        command: Option<&[String]>,
        args: Option<&[String]>,
    ) -> Result<String> {
        let mut c = podman.command();
        c.args(["run", "-d", "--network=host", "--cap-drop", "ALL"])
            .args(["--security-opt", "no-new-privileges"])
            .arg("--user")
            .arg(format!("{}:{}", self.user.0, self.user.1))
            .args(ULIMITS)
            .arg("--name")
            .arg(&self.name)
            .arg("--stop-timeout")
            .arg(self.stop_timeout.to_string())
            .arg("-v")
            .arg(format!("{}:{}", self.volume.display(), self.mount_at));
        if let Some(w) = &self.workdir {
            c.arg("-w").arg(w);
        }
        if let Some(f) = &self.env_file {
            c.arg("--env-file").arg(f);
        }
        for (k, v) in &self.env {
            c.arg("--env").arg(k).env(k, v);
        }
        for (k, v) in &self.labels {
            c.arg("--label").arg(format!("{k}={v}"));
        }
        if let Some(command) = command {
            // A JSON array: each element one argv word, nothing re-split.
            let json = serde_json::to_string(command).map_err(|e| ContainerError::Spec(e.to_string()))?;
            c.arg("--entrypoint").arg(json);
        }
        c.arg(&self.image);
        if let Some(args) = args {
            c.args(args);
        }
        Ok(output_of(&mut c)?.trim().to_string())
    }
}

/// Makes `dir` the pod's workspace: owned by `uid:gid`, group-writable, as an
/// emptyDir with `fsGroup` is.
pub fn prepare_volume(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2770))
}

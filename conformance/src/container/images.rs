//! The images the container suites run: the product image from
//! `scripts/image-build.sh`, and a test-only layer on top of it
//! (`conformance/images/sprig-test/`) that adds the scripted ACP test agent
//! and a test sidecar. The product image never carries test code.

use super::{ContainerError, Podman, image_cache};
use sha2::{Digest, Sha256};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

type Result<T, E = ContainerError> = std::result::Result<T, E>;

/// The product image as `scripts/image-build.sh` reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SprigImage {
    /// `localhost/buzz-sprig:<content tag>`.
    pub reference: String,
    /// The image ID.
    pub id: String,
    /// The manifest digest, `sha256:<64 hex>`.
    pub digest: String,
    /// The OCI archive written for pushing.
    pub archive: PathBuf,
}

impl SprigImage {
    /// The digest-pinned reference, `localhost/buzz-sprig@sha256:…`.
    pub fn pinned(&self) -> String {
        pinned(&self.reference, &self.digest)
    }
}

/// `reference` with its tag swapped for `digest` (`REPO:TAG` → `REPO@DIGEST`).
pub(super) fn pinned(reference: &str, digest: &str) -> String {
    let repo = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
    format!("{repo}@{digest}")
}

/// `KEY=VALUE` lines, in order; other lines are skipped.
pub(super) fn parse_env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn from_vars(get: impl Fn(&str) -> Option<String>) -> Option<SprigImage> {
    Some(SprigImage {
        reference: get("BUZZ_SPRIG_IMAGE")?,
        id: get("BUZZ_SPRIG_IMAGE_ID")?,
        digest: get("BUZZ_SPRIG_IMAGE_DIGEST")?,
        archive: PathBuf::from(get("BUZZ_SPRIG_IMAGE_ARCHIVE")?),
    })
}

fn locate() -> Result<SprigImage> {
    if let Some(img) = from_vars(|k| std::env::var(k).ok()) {
        return Ok(img);
    }
    // Not named by the environment: build (or reuse) it with the script, as
    // the control-plane binaries are built on first use.
    let script = crate::package_dir().join("../scripts/image-build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| ContainerError::Build(format!("{}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(ContainerError::Build(format!(
            "{} failed ({}); run it by hand to see why",
            script.display(),
            out.status
        )));
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| ContainerError::Build(format!("{path}: {e}")))?;
    let vars = parse_env_file(&text);
    from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        .ok_or_else(|| ContainerError::Build(format!("{path} does not name the image")))
}

/// The product image, located once per test binary. Panics with the reason
/// when it cannot be built: every caller is a test that needs it.
pub fn sprig_image() -> &'static SprigImage {
    static IMG: OnceLock<SprigImage> = OnceLock::new();
    IMG.get_or_init(|| match locate() {
        Ok(i) => i,
        Err(e) => panic!("the sprig image is not available: {e}"),
    })
}

/// An exclusive lock on a file, released on drop (two test binaries may build
/// the same test layer at once).
struct FileLock(std::fs::File);

impl FileLock {
    fn take(path: &Path) -> std::io::Result<FileLock> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        // SAFETY: flock on an fd we own; blocks until the lock is ours.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock(f))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // SAFETY: unlocking the fd we locked.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// The test layer: `base` plus `agent_bin` as `/usr/local/bin/acp-test-agent`
/// and the test sidecar. Keyed by its inputs, so a rebuilt agent makes a new
/// tag and an unchanged one reuses the stored image.
pub fn test_image(podman: &Podman, base: &SprigImage, agent_bin: &Path) -> Result<String> {
    let src = crate::package_dir().join("images/sprig-test");
    let files = ["Containerfile", "test-sidecar.sh"];
    let mut h = Sha256::new();
    h.update(base.id.as_bytes());
    h.update(std::fs::read(agent_bin)?);
    for f in files {
        h.update(std::fs::read(src.join(f))?);
    }
    let tag = hex::encode(&h.finalize()[..6]);
    let reference = format!("localhost/buzz-sprig-test:{tag}");
    let _lock = FileLock::take(&image_cache().join("test-image.lock"))?;
    if podman.image_exists(&reference) {
        return Ok(reference);
    }
    let ctx = tempfile::tempdir()?;
    for f in files {
        std::fs::copy(src.join(f), ctx.path().join(f))?;
    }
    std::fs::copy(agent_bin, ctx.path().join("acp-test-agent"))?;
    let containerfile = ctx.path().join("Containerfile");
    let args: Vec<std::ffi::OsString> = vec![
        "build".into(),
        "--quiet".into(),
        "--isolation".into(),
        "chroot".into(),
        "--pull=never".into(),
        "--build-arg".into(),
        format!("BASE={}", base.reference).into(),
        "-t".into(),
        reference.clone().into(),
        "-f".into(),
        containerfile.into(),
        ctx.path().into(),
    ];
    podman.run(args)?;
    Ok(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_reference_swaps_the_tag_for_the_digest() {
        let img = SprigImage {
            reference: "localhost/buzz-sprig:0123abcd".into(),
            id: "x".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            archive: PathBuf::new(),
        };
        assert_eq!(
            img.pinned(),
            format!("localhost/buzz-sprig@sha256:{}", "a".repeat(64))
        );
    }

    #[test]
    fn env_file_lines_are_split_at_the_first_equals_sign() {
        let v = parse_env_file("A=1\nB=x=y\n\nnoise\n");
        assert_eq!(v, vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]);
    }
}

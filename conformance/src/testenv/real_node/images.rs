//! Images on the real node, the two ways a cluster gets them
//! (`../shared/kubelet.md`, "Errors hit" 2 and "Optional: local registry"):
//!
//! - **Imported** into containerd's `k8s.io` namespace from an OCI archive.
//!   `ctr import --digests` names the image by the digest of the archive's
//!   `index.json`, which is not the manifest digest a pod pins; so the
//!   manifest-digest name is added with `ctr images tag`, and a pod that
//!   asks for `repo@<manifest digest>` starts with no pull.
//! - **Pulled** by digest from Debian's `docker-registry` on 127.0.0.1, into
//!   which the archive was pushed with `skopeo copy --preserve-digests`: the
//!   registry then serves exactly the archive's manifest digest (a push that
//!   would change it fails instead).
//!
//! The manifest digest of an OCI archive is read from its `index.json`; it is
//! the one digest every pull path agrees on.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of image import, push and inspection.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image I/O on {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{archive}: {what}")]
    Archive { archive: PathBuf, what: String },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("the local registry did not answer on {addr} within {waited:?}; log tail:\n{log}")]
    Registry {
        addr: String,
        waited: Duration,
        log: String,
    },
    #[error(
        "the registry serves {served} for {reference}, but the archive's manifest is {expected}: \
         a pull by the archive's digest would fail"
    )]
    DigestMismatch {
        reference: String,
        served: String,
        expected: String,
    },
}

type Result<T, E = ImageError> = std::result::Result<T, E>;

/// The two digests of a one-image OCI archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveDigests {
    /// `sha256:…` of the image manifest: what a pod pins and a registry serves.
    pub manifest: String,
    /// `sha256:…` of `index.json` itself: what `ctr import --digests` names.
    pub index: String,
}

/// Reads an archive's `index.json` (with the system's `tar`).
pub fn archive_digests(archive: &Path) -> Result<ArchiveDigests> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg("index.json")
        .output()
        .map_err(|source| ImageError::Io {
            path: archive.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(ImageError::Archive {
            archive: archive.to_path_buf(),
            what: format!("no index.json: {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    digests_of_index(&out.stdout).map_err(|what| ImageError::Archive {
        archive: archive.to_path_buf(),
        what,
    })
}

/// The digests of an OCI `index.json` holding one image manifest.
pub fn digests_of_index(index: &[u8]) -> std::result::Result<ArchiveDigests, String> {
    let v: serde_json::Value = serde_json::from_slice(index).map_err(|e| format!("index.json: {e}"))?;
    let manifests = v["manifests"].as_array().ok_or("index.json has no manifests")?;
    let [only] = manifests.as_slice() else {
        return Err(format!(
            "index.json lists {} manifests, expected one image",
            manifests.len()
        ));
    };
    let manifest = only["digest"].as_str().unwrap_or_default();
    let hex = manifest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "index.json's manifest digest {manifest:?} is not sha256:<64 hex>"
        ));
    }
    Ok(ArchiveDigests {
        manifest: manifest.to_string(),
        index: format!("sha256:{}", hex::encode(Sha256::digest(index))),
    })
}

/// `ctr` against one containerd, in the CRI's `k8s.io` namespace.
#[derive(Clone, Debug)]
pub struct Ctr {
    pub bin: PathBuf,
    pub socket: PathBuf,
}

impl Ctr {
    fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.bin)
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ImageError::Io {
                path: self.bin.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ImageError::Command {
                command: format!("ctr {}", args.join(" ")),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports `archive` as `repo` and names it `repo@<manifest digest>`;
    /// returns that pinned reference.
    pub fn import(&self, archive: &Path, repo: &str) -> Result<String> {
        let d = archive_digests(archive)?;
        let path = archive.display().to_string();
        self.run(&["images", "import", "--base-name", repo, "--digests", &path])?;
        let pinned = format!("{repo}@{}", d.manifest);
        self.run(&[
            "images",
            "tag",
            "--force",
            &format!("{repo}@{}", d.index),
            &pinned,
        ])?;
        Ok(pinned)
    }

    /// Every image name containerd holds.
    pub fn image_names(&self) -> Result<Vec<String>> {
        let text = self.run(&["images", "ls", "-q"])?;
        Ok(text
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// Removes images by name (a no-op for names it does not hold).
    pub fn remove(&self, names: &[&str]) -> Result<()> {
        let mut args = vec!["images", "rm"];
        args.extend_from_slice(names);
        self.run(&args).map(|_| ())
    }

    /// Removes images by name and waits for containerd's garbage collection,
    /// so their layers are gone too and the next use pulls every byte (a
    /// cold Start). Layers a live container still uses stay.
    pub fn remove_with_content(&self, names: &[&str]) -> Result<()> {
        let mut args = vec!["images", "rm", "--sync"];
        args.extend_from_slice(names);
        self.run(&args).map(|_| ())
    }
}

/// Debian's `docker-registry`, serving plain HTTP on 127.0.0.1 only.
pub struct LocalRegistry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl LocalRegistry {
    /// Starts it with its storage under `dir` and waits for `/v2/`.
    pub fn start(bin: &Path, dir: &Path, port: u16) -> Result<LocalRegistry> {
        let addr = format!("127.0.0.1:{port}");
        let data = dir.join("data");
        let conf = dir.join("registry.yml");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ImageError::Io { path, source }
        };
        std::fs::create_dir_all(&data).map_err(io(&data))?;
        super::host::write_new(&conf, super::config::registry_yml(&data, &addr).as_bytes(), 0o600)
            .map_err(io(&conf))?;
        let log_path = dir.join("registry.log");
        let log = std::fs::File::create(&log_path).map_err(io(&log_path))?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io(&log_path))?)
            .stderr(log);
        let child = crate::testenv::process::spawn_owned(cmd).map_err(io(bin))?;
        let reg = LocalRegistry { child, addr };
        let waited = Duration::from_secs(20);
        let end = Instant::now() + waited;
        while Instant::now() < end {
            if http_status(&reg.addr, "GET", "/v2/", &[]).is_ok_and(|(s, _)| s == 200) {
                return Ok(reg);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(ImageError::Registry {
            addr: reg.addr.clone(),
            waited,
            log: std::fs::read_to_string(&log_path).unwrap_or_default(),
        })
    }

    /// Pushes an OCI archive as `<addr>/<repo>:<tag>` keeping its manifest
    /// byte for byte, and returns `<addr>/<repo>@<manifest digest>`.
    pub fn push_archive(&self, archive: &Path, repo: &str, tag: &str) -> Result<String> {
        let d = archive_digests(archive)?;
        let dest = format!("docker://{}/{repo}:{tag}", self.addr);
        let out = Command::new("skopeo")
            .args(["copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false"])
            .arg(format!("oci-archive:{}", archive.display()))
            .arg(&dest)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ImageError::Io {
                path: "skopeo".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(ImageError::Command {
                command: format!("skopeo copy oci-archive:{} {dest}", archive.display()),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let reference = format!("{}/{repo}@{}", self.addr, d.manifest);
        let served = self.served_digest(repo, tag)?;
        if served != d.manifest {
            return Err(ImageError::DigestMismatch {
                reference,
                served,
                expected: d.manifest,
            });
        }
        Ok(reference)
    }

    /// The `Docker-Content-Digest` the registry answers for `repo:reference`.
    pub fn served_digest(&self, repo: &str, reference: &str) -> Result<String> {
        let accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json";
        let (status, headers) = http_status(
            &self.addr,
            "HEAD",
            &format!("/v2/{repo}/manifests/{reference}"),
            &[("Accept", accept)],
        )
        .map_err(|source| ImageError::Io {
            path: PathBuf::from(&self.addr),
            source,
        })?;
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("docker-content-digest"))
            .map(|(_, v)| v.clone())
            .filter(|_| status == 200)
            .ok_or_else(|| ImageError::Command {
                command: format!("HEAD /v2/{repo}/manifests/{reference}"),
                stderr: format!("status {status}, no Docker-Content-Digest"),
            })
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        crate::testenv::process::kill_owned(&mut self.child);
    }
}

/// A minimal HTTP/1.1 request on loopback: the status and headers.
fn http_status(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, Vec<(String, String)>)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status from {addr}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_digest_comes_from_the_index_and_the_index_digest_from_its_bytes() {
        let m = format!("sha256:{}", "ab".repeat(32));
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":1}}]}}"#
        );
        let d = digests_of_index(index.as_bytes()).unwrap();
        assert_eq!(d.manifest, m);
        assert_eq!(
            d.index,
            format!("sha256:{}", hex::encode(Sha256::digest(index.as_bytes())))
        );
        assert_ne!(d.index, d.manifest);
    }

    #[test]
    fn an_index_without_exactly_one_sound_manifest_is_refused() {
        assert!(
            digests_of_index(br#"{"manifests":[]}"#)
                .unwrap_err()
                .contains("0 manifests")
        );
        assert!(digests_of_index(br#"{"manifests":[{"digest":"sha256:XYZ"}]}"#).is_err());
        assert!(digests_of_index(b"not json").is_err());
    }
}

//! The harness binary the deploy installs on the host (issue 51 item 2):
//! `provider_config.harness_path`, else `$BUZZ_ACP_BIN` (the launcher hands
//! its provider the harness it runs itself: a staged provider has no
//! directory of its own), else `buzz-acp` beside this provider's binary,
//! else on `PATH`.
//! Its SHA-256 decides whether the host's copy is current, and its ELF
//! header the machine it runs on (`uname -m` on the host must match).
//!
//! A static build (`scripts/static-build.sh`) runs on any Linux of its
//! architecture; a dynamically linked one needs the host's glibc to be at
//! least the one it was built against.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The binary found, with what the host must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Harness {
    pub path: PathBuf,
    /// SHA-256, lowercase hex.
    pub digest: String,
    /// `uname -m` of a machine it runs on (`x86_64`, `aarch64`).
    pub arch: String,
}

/// The binary's name.
pub const NAME: &str = "buzz-acp";
/// The variable naming the harness the launcher runs itself.
pub const BIN_ENV: &str = "BUZZ_ACP_BIN";

/// Where the harness is looked for, in order.
pub fn candidates(configured: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = configured {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        out.push(PathBuf::from(p));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        out.push(dir.join(NAME));
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join(NAME)));
    }
    out
}

/// The machine an ELF header names, as `uname -m` says it.
pub fn elf_arch(head: &[u8]) -> Option<&'static str> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let machine = match head[5] {
        1 => u16::from_le_bytes([head[18], head[19]]),
        _ => u16::from_be_bytes([head[18], head[19]]),
    };
    match machine {
        62 => Some("x86_64"),
        183 => Some("aarch64"),
        _ => None,
    }
}

/// The first readable Linux binary among the candidates.
pub fn locate(configured: Option<&Path>) -> Result<Harness, String> {
    let tried = candidates(configured);
    for path in &tried {
        let Ok(mut f) = std::fs::File::open(path) else {
            continue;
        };
        let mut bytes = Vec::new();
        if f.read_to_end(&mut bytes).is_err() {
            continue;
        }
        let Some(arch) = elf_arch(&bytes) else {
            return Err(format!(
                "{} is not a Linux binary of a known machine (x86_64, aarch64); set harness_path to a buzz-acp built for the host",
                path.display()
            ));
        };
        return Ok(Harness {
            path: path.clone(),
            digest: hex::encode(Sha256::digest(&bytes)),
            arch: arch.into(),
        });
    }
    Err(match configured {
        Some(p) => format!("provider_config.harness_path {} cannot be read", p.display()),
        None => "no buzz-acp binary to install on the host: none beside this provider or on PATH. fix: set provider_config.harness_path to a buzz-acp for the host (a static build: scripts/static-build.sh)".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_elf_header_names_the_machine() {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[5] = 1;
        h[18] = 62;
        assert_eq!(elf_arch(&h), Some("x86_64"));
        h[18] = 183;
        assert_eq!(elf_arch(&h), Some("aarch64"));
        h[18] = 40;
        assert_eq!(elf_arch(&h), None);
        assert_eq!(elf_arch(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn this_test_binary_is_found_with_its_digest_and_arch() {
        let me = std::env::current_exe().unwrap();
        let h = locate(Some(&me)).unwrap();
        assert_eq!(h.arch, std::env::consts::ARCH);
        assert_eq!(h.digest.len(), 64);
        assert!(locate(Some(Path::new("/nonexistent/buzz-acp"))).is_err());
    }
}

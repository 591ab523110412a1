//! The container's termination message (issue 30 item 3; Kubernetes
//! `terminationMessagePath`, default `/dev/termination-log`): why a harness
//! that fails to start, or stops on a failure, ended. The provider reads it
//! from the pod's container status and answers the Start with it, so a
//! deploy whose agent cannot run says why instead of reading as a success.
//!
//! Written only where the file already exists: Kubernetes creates it for
//! every container, and a harness on a laptop or a VPS never creates files
//! under `/dev`. At most [`MAX_BYTES`] (the kubelet keeps 4096), cut on a
//! character boundary, secret shapes scrubbed.

use std::io::Write;
use std::path::Path;

/// The kubelet's limit on one container's termination message.
pub const MAX_BYTES: usize = 4096;

/// The text written: `reason`, scrubbed of secret shapes and bounded.
pub fn message(reason: &str) -> String {
    let clean = buzz_contract::redact::scrub_tokens(reason.trim());
    let mut end = clean.len().min(MAX_BYTES);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    clean[..end].to_string()
}

/// Writes `reason` to the termination log at `path` if that file exists;
/// true when written. Never creates the file, never follows a missing path.
pub fn write(path: &Path, reason: &str) -> bool {
    let Ok(mut f) = std::fs::OpenOptions::new().write(true).truncate(true).open(path) else {
        return false;
    };
    f.write_all(message(reason).as_bytes()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_only_where_the_file_exists_bounded_and_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("termination-log");
        assert!(!write(&missing, "why"), "never created");
        assert!(!missing.exists());
        std::fs::write(&missing, "old text that is longer").unwrap();
        assert!(write(&missing, "  the agent command `x` is not installed here  "));
        assert_eq!(
            std::fs::read_to_string(&missing).unwrap(),
            "the agent command `x` is not installed here"
        );
        let long = format!("nsec1{} {}", "q".repeat(58), "é".repeat(MAX_BYTES));
        let m = message(&long);
        assert!(m.len() <= MAX_BYTES && !m.contains("nsec1qqq"), "{}", &m[..40]);
    }
}

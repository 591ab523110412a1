//! The host, through the system's OpenSSH client (issue 51 item 1): the
//! user's `~/.ssh/config`, agent, `ProxyJump` and known hosts work as they
//! do for them. Every call runs `ssh` with:
//! - `BatchMode=yes`: never a password or passphrase prompt (a provider
//!   has no terminal); a key the agent does not hold fails in-band;
//! - `StrictHostKeyChecking=yes`: an unknown or changed host key is
//!   refused, whatever the user's config says, and the error says how to
//!   check and add the key ([`classify`]);
//! - the config's `ssh_config` (`-F`), `identity_file` (`-i`, with
//!   `IdentitiesOnly`), `known_hosts_file` and port, and `ConnectTimeout`;
//! - `--` before the host, so nothing from the config is read as an option.
//!
//! A script goes on stdin to `sh -s` ([`crate::script`]); its secrets never
//! appear in an argument. [`classify`] is pure: ssh's exit status and
//! stderr in, what went wrong and its fix out.

use crate::config::SshConfig;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one ssh call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// ssh's exit status (`None`: killed at the deadline).
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// ssh's own exit status for a failure of ssh (not of the remote command).
pub const SSH_FAILED: i32 = 255;
/// The most bytes kept of either stream.
const KEEP: usize = 64 * 1024;

/// The arguments of `ssh` for `cfg`, then `remote` as the command.
pub fn argv(cfg: &SshConfig, remote: &str) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "StrictHostKeyChecking=yes".into(),
        "-o".into(),
        format!("ConnectTimeout={}", cfg.connect_timeout_seconds),
        "-o".into(),
        "ServerAliveInterval=15".into(),
        "-o".into(),
        "ServerAliveCountMax=4".into(),
        "-T".into(),
    ];
    if let Some(f) = &cfg.ssh_config {
        a.extend(["-F".into(), f.display().to_string()]);
    }
    if let Some(f) = &cfg.identity_file {
        a.extend([
            "-i".into(),
            f.display().to_string(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
        ]);
    }
    if let Some(f) = &cfg.known_hosts_file {
        a.extend(["-o".into(), format!("UserKnownHostsFile={}", f.display())]);
    }
    if let Some(p) = cfg.host.port {
        a.extend(["-p".into(), p.to_string()]);
    }
    if let Some(u) = &cfg.host.user {
        a.extend(["-l".into(), u.clone()]);
    }
    a.extend(["--".into(), cfg.host.host.clone(), remote.into()]);
    a
}

/// Runs `ssh` with `argv`, `input` on its stdin, until `deadline`.
pub fn run(args: &[String], input: &[u8], deadline: Instant) -> std::io::Result<Output> {
    let mut child = Command::new("ssh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&input);
        }
        drop(stdin);
    });
    let read = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.by_ref().take(KEEP as u64).read_to_end(&mut buf);
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = read(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = read(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Why ssh itself failed, with what fixes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshFailure {
    #[error(
        "{host}'s host key is not known, and an unknown host is never trusted blindly. fix: check its fingerprint with the server's owner, then add it: `ssh-keyscan{port_opt} {name} >> ~/.ssh/known_hosts` (or log in once with ssh and answer yes)"
    )]
    HostKeyUnknown {
        host: String,
        name: String,
        port_opt: String,
    },
    #[error(
        "{host}'s host key CHANGED since it was recorded in your known hosts: the server was reinstalled, or someone is in the middle. Nothing was run. fix: if you know why it changed, remove the old key with `ssh-keygen -R {known_as}` and add the new one after checking its fingerprint"
    )]
    HostKeyChanged { host: String, known_as: String },
    #[error(
        "{host} refused the login ({detail}): no key ssh offered is in the login's authorized_keys, and no password is ever tried. fix: set identity_file to the key the server accepts, or add your key to ssh-agent (`ssh-add`), or install your public key on the server (`ssh-copy-id`)"
    )]
    LoginRefused { host: String, detail: String },
    #[error("{host} is not reachable: {detail}. fix: check the host name, the port and that sshd runs there")]
    Unreachable { host: String, detail: String },
    #[error("ssh to {host} failed: {detail}")]
    Other { host: String, detail: String },
    #[error("ssh to {host} did not finish within the deploy's deadline; nothing more was done")]
    Timeout { host: String },
}

/// The last few meaningful lines of ssh's stderr, on one line.
fn gist(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("@@@") && !l.starts_with("Warning: Permanently added"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    tail.join(" ").chars().take(400).collect()
}

/// What went wrong when ssh's exit status says ssh failed; `None` when ssh
/// ran the remote command (whatever its status).
pub fn classify(cfg: &SshConfig, out: &Output) -> Option<SshFailure> {
    let host = cfg.host.to_string();
    let Some(status) = out.status else {
        return Some(SshFailure::Timeout { host });
    };
    if status != SSH_FAILED {
        return None;
    }
    let e = &out.stderr;
    let known_as = match cfg.host.port {
        Some(p) if p != 22 => format!("'[{}]:{p}'", cfg.host.host),
        _ => cfg.host.host.clone(),
    };
    Some(
        if e.contains("REMOTE HOST IDENTIFICATION HAS CHANGED") || e.contains("POSSIBLE DNS SPOOFING") {
            SshFailure::HostKeyChanged { host, known_as }
        } else if e.contains("Host key verification failed") || e.contains("host key is known for") {
            SshFailure::HostKeyUnknown {
                host,
                name: cfg.host.host.clone(),
                port_opt: cfg.host.port.map(|p| format!(" -p {p}")).unwrap_or_default(),
            }
        } else if e.contains("Permission denied") || e.contains("Too many authentication failures") {
            SshFailure::LoginRefused {
                host,
                detail: gist(e),
            }
        } else if [
            "Connection refused",
            "Connection timed out",
            "No route to host",
            "Could not resolve hostname",
            "Network is unreachable",
            "Connection closed by",
        ]
        .iter()
        .any(|m| e.contains(m))
        {
            SshFailure::Unreachable {
                host,
                detail: gist(e),
            }
        } else {
            SshFailure::Other {
                host,
                detail: if e.trim().is_empty() {
                    "ssh exited 255 and said nothing".into()
                } else {
                    gist(e)
                },
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: serde_json::Value) -> SshConfig {
        SshConfig::parse(&v).unwrap()
    }

    #[test]
    fn the_argv_holds_the_safety_options_and_the_host_after_a_double_dash() {
        let c = cfg(
            json!({"host": "agent@h.example:2222", "identity_file": "/k/id", "known_hosts_file": "/k/kh"}),
        );
        let a = argv(&c, "sh -s");
        let joined = a.join(" ");
        for o in [
            "BatchMode=yes",
            "StrictHostKeyChecking=yes",
            "ConnectTimeout=15",
            "-i /k/id -o IdentitiesOnly=yes",
            "UserKnownHostsFile=/k/kh",
            "-p 2222",
            "-l agent",
        ] {
            assert!(joined.contains(o), "{o}: {joined}");
        }
        assert_eq!(&a[a.len() - 3..], ["--", "h.example", "sh -s"]);
    }

    fn failed(stderr: &str) -> Output {
        Output {
            status: Some(SSH_FAILED),
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn ssh_failures_are_told_apart_with_their_fix() {
        let c = cfg(json!({"host": "agent@127.0.0.1:2299"}));
        let changed = "@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@\nHost key verification failed.\n";
        match classify(&c, &failed(changed)) {
            Some(SshFailure::HostKeyChanged { known_as, .. }) => assert_eq!(known_as, "'[127.0.0.1]:2299'"),
            other => panic!("{other:?}"),
        }
        let unknown = "No ED25519 host key is known for [127.0.0.1]:2299 and you have requested strict checking.\nHost key verification failed.\n";
        let e = classify(&c, &failed(unknown)).unwrap();
        assert!(
            matches!(e, SshFailure::HostKeyUnknown { .. })
                && e.to_string().contains("ssh-keyscan -p 2299 127.0.0.1"),
            "{e}"
        );
        let denied = "agent@127.0.0.1: Permission denied (publickey).\n";
        assert!(matches!(
            classify(&c, &failed(denied)),
            Some(SshFailure::LoginRefused { .. })
        ));
        let refused = "ssh: connect to host 127.0.0.1 port 2299: Connection refused\n";
        assert!(matches!(
            classify(&c, &failed(refused)),
            Some(SshFailure::Unreachable { .. })
        ));
        assert!(matches!(
            classify(&c, &failed("")),
            Some(SshFailure::Other { .. })
        ));
        let ran = Output {
            status: Some(3),
            stdout: String::new(),
            stderr: "Permission denied".into(),
        };
        assert_eq!(
            classify(&c, &ran),
            None,
            "the remote command's own status is not ssh's failure"
        );
        let killed = Output { status: None, ..ran };
        assert!(matches!(classify(&c, &killed), Some(SshFailure::Timeout { .. })));
    }
}

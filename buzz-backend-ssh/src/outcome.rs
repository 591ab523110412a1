//! How a script on the host ended, read from its last `buzz-ssh:` line
//! ([`crate::script`]), and what each failure means with its fix. Pure.

use crate::script::MARK;

/// A script's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The unit was (re)started and the harness passed its startup checks.
    Started,
    /// The same request, the unit active: nothing was done. The running
    /// run's start nonce.
    Unchanged { generation: String },
    /// The harness binary was installed.
    Installed,
    /// An undeploy's count of what it removed.
    Removed {
        units: u64,
        env_files: u64,
        workspaces: u64,
    },
    /// The host lacks the harness, or has another build of it.
    NeedHarness,
    /// The script stopped at a check or a step.
    Failed(HostFailure),
}

/// A script's refusal or failure on the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostFailure {
    #[error(
        "the host has no systemd (systemctl is not installed); buzz-backend-ssh runs each agent as a systemd --user unit"
    )]
    NoSystemd,
    #[error(
        "the host has no flock (util-linux), which keeps two deploys of one agent apart. fix: install util-linux"
    )]
    NoFlock,
    #[error(
        "the login has no systemd --user manager to run the agent's unit. fix: enable lingering for the login (`sudo loginctl enable-linger <user>`), which starts its manager at boot"
    )]
    NoUserManager,
    #[error(
        "lingering is off for {user}, so its systemd --user units (the agent) would stop when the last session ends. fix: on the host, `sudo loginctl enable-linger {user}`"
    )]
    NoLinger { user: String },
    #[error(
        "the host is {host_arch}, and the harness binary is built for {want}. fix: set harness_path to a buzz-acp built for {host_arch}"
    )]
    Arch { host_arch: String, want: String },
    #[error(
        "the host's disk is full or not writable: {detail}. fix: free space on the host and Start again; nothing half-written was left in place"
    )]
    Disk { detail: String },
    #[error("another deploy or undeploy of this agent held its lock too long; try again")]
    Busy,
    #[error("the login's home directory cannot be used: {detail}")]
    Home { detail: String },
    #[error("systemd on the host refused: {detail}")]
    Systemd { detail: String },
    #[error("the harness binary arrived damaged (its digest differs); nothing was installed. Start again")]
    Transfer,
    #[error("the harness on the host could not start ({exit}): {why}")]
    StartFailed { exit: String, why: String },
    #[error("the host said: {code} {detail}")]
    Other { code: String, detail: String },
}

/// The last outcome line of `stdout`; `None` when the script never got to
/// one (ssh or the shell ended first).
pub fn parse(stdout: &str) -> Option<Outcome> {
    let line = stdout.lines().rev().find_map(|l| l.strip_prefix(MARK))?.trim();
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    Some(match word {
        "need-harness" => Outcome::NeedHarness,
        "ok" => {
            let (what, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            match what {
                "started" => Outcome::Started,
                "installed" => Outcome::Installed,
                "unchanged" => Outcome::Unchanged {
                    generation: rest.trim().to_string(),
                },
                "removed" => {
                    let n = |k: &str| {
                        rest.split_whitespace()
                            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
                            .unwrap_or(0)
                    };
                    Outcome::Removed {
                        units: n("units"),
                        env_files: n("env_files"),
                        workspaces: n("workspaces"),
                    }
                }
                other => Outcome::Failed(HostFailure::Other {
                    code: format!("ok {other}"),
                    detail: rest.into(),
                }),
            }
        }
        "error" => {
            let (code, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            let detail: String = detail.chars().take(2000).collect();
            Outcome::Failed(match code {
                "no-systemd" => HostFailure::NoSystemd,
                "no-flock" => HostFailure::NoFlock,
                "no-user-manager" => HostFailure::NoUserManager,
                "no-linger" => HostFailure::NoLinger { user: detail },
                "arch" => HostFailure::Arch {
                    host_arch: detail,
                    want: std::env::consts::ARCH.into(),
                },
                "disk" => HostFailure::Disk { detail },
                "busy" => HostFailure::Busy,
                "home" => HostFailure::Home { detail },
                "systemd" => HostFailure::Systemd { detail },
                "transfer" => HostFailure::Transfer,
                "start-failed" => start_failed(&detail),
                other => HostFailure::Other {
                    code: other.into(),
                    detail,
                },
            })
        }
        other => Outcome::Failed(HostFailure::Other {
            code: other.into(),
            detail: rest.into(),
        }),
    })
}

/// `exit=N why…`: the harness's exit code with its meaning, and its
/// termination message.
fn start_failed(detail: &str) -> HostFailure {
    let (first, why) = detail.split_once(' ').unwrap_or((detail, ""));
    let exit = match first.strip_prefix("exit=").and_then(|c| c.parse::<i32>().ok()) {
        Some(code) => format!("exit {code}: {}", buzz_contract::exit::meaning(code)),
        None => "it did not say how it ended".into(),
    };
    let why = why.trim();
    HostFailure::StartFailed {
        exit,
        why: if why.is_empty() {
            "no termination message; see `journalctl --user -u 'buzz-acp@*'` on the host".into()
        } else {
            why.into()
        },
    }
}

/// The notes a script said on the way (`replaced <instance>`), for the
/// progress lines.
pub fn notes(stdout: &str) -> Vec<String> {
    let lines: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(MARK))
        .map(str::trim)
        .collect();
    lines
        .iter()
        .take(lines.len().saturating_sub(1))
        .filter(|l| l.starts_with("replaced "))
        .map(|l| l.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_line_reads_back() {
        assert_eq!(parse("noise\nbuzz-ssh: ok started\n"), Some(Outcome::Started));
        assert_eq!(
            parse("buzz-ssh: ok unchanged 00ff\n"),
            Some(Outcome::Unchanged {
                generation: "00ff".into()
            })
        );
        assert_eq!(
            parse("buzz-ssh: ok removed units=1 env_files=1 workspaces=0\n"),
            Some(Outcome::Removed {
                units: 1,
                env_files: 1,
                workspaces: 0
            })
        );
        assert_eq!(parse("buzz-ssh: need-harness\n"), Some(Outcome::NeedHarness));
        assert_eq!(
            parse("buzz-ssh: error no-linger agent\n"),
            Some(Outcome::Failed(HostFailure::NoLinger { user: "agent".into() }))
        );
        assert_eq!(parse("nothing here\n"), None);
    }

    #[test]
    fn a_failed_start_names_the_exit_and_the_termination_message() {
        let Some(Outcome::Failed(f)) =
            parse("buzz-ssh: error start-failed exit=2 the agent command goose is not installed\n")
        else {
            panic!()
        };
        let text = f.to_string();
        assert!(
            text.contains("exit 2: a configuration error") && text.contains("goose is not installed"),
            "{text}"
        );
    }

    #[test]
    fn notes_are_the_lines_before_the_outcome() {
        let out = "buzz-ssh: replaced old-0123\nbuzz-ssh: ok started\n";
        assert_eq!(notes(out), ["replaced old-0123"]);
    }
}

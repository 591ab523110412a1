//! A real server for the SSH provider's suite (issue 51, "The test
//! server"): `scripts/ssh-server.sh`, a container with systemd as PID 1 and
//! OpenSSH's sshd on 127.0.0.1, a user `agent` whose manager lingers. Each
//! [`SshServer`] is one container of its own name; dropping it removes the
//! container and its keys.
//!
//! [`SshServer::login`] runs a command as `agent` over ssh (what a user
//! sees); [`SshServer::root`] runs one as root inside the container (the
//! journal, what only the machine's owner sees).

use crate::container::Podman;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How to start a server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The user does not linger (a host set up wrong).
    pub no_linger: bool,
    /// The user's home is a tmpfs of this size (`4m`): a full disk.
    pub home_size: Option<&'static str>,
    /// sshd's port (default: a free one).
    pub port: Option<u16>,
}

/// One running server.
pub struct SshServer {
    pub name: String,
    pub port: u16,
    /// The client's private key.
    pub identity: PathBuf,
    /// The server's host key, as a known hosts file.
    pub known_hosts: PathBuf,
    /// An ssh config with `Host <name>` and all of the above.
    pub ssh_config: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ssh-server.sh")
}

impl SshServer {
    /// Starts a fresh server named `name` (a running one of that name is
    /// replaced, with a new host key).
    pub fn up(name: &str, opts: &Options) -> SshServer {
        let mut c = Command::new(script());
        c.args(["up", "--name", name]);
        if opts.no_linger {
            c.arg("--no-linger");
        }
        if let Some(s) = opts.home_size {
            c.args(["--home-size", s]);
        }
        if let Some(p) = opts.port {
            c.args(["--port", &p.to_string()]);
        }
        let out = c.output().expect("scripts/ssh-server.sh runs");
        assert!(
            out.status.success(),
            "the test server did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("ssh-server.sh did not say {k}"))
        };
        SshServer {
            name: name.to_string(),
            port: get("BUZZ_SSH_SERVER_PORT").parse().expect("a port"),
            identity: get("BUZZ_SSH_SERVER_IDENTITY").into(),
            known_hosts: get("BUZZ_SSH_SERVER_KNOWN_HOSTS").into(),
            ssh_config: get("BUZZ_SSH_SERVER_CONFIG").into(),
        }
    }

    /// `provider_config` naming this server by its ssh config alias.
    pub fn config(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("host".into(), self.name.clone().into());
        m.insert("ssh_config".into(), self.ssh_config.display().to_string().into());
        m
    }

    /// `provider_config` naming this server as `agent@127.0.0.1:<port>`,
    /// with its key and known hosts as fields (no ssh config).
    pub fn config_by_address(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("host".into(), format!("agent@127.0.0.1:{}", self.port).into());
        m.insert("identity_file".into(), self.identity.display().to_string().into());
        m.insert(
            "known_hosts_file".into(),
            self.known_hosts.display().to_string().into(),
        );
        m
    }

    /// Runs `cmd` as the user `agent` over ssh; its stdout, and whether it
    /// succeeded.
    pub fn login(&self, cmd: &str) -> (bool, String) {
        let out = Command::new("ssh")
            .arg("-F")
            .arg(&self.ssh_config)
            .args([&self.name, cmd])
            .output()
            .expect("ssh runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// What of any agent is left on the server: env and run files, working
    /// directories, unit instances (an agent's empty lock file is not
    /// state). Empty when an undeploy left nothing.
    pub fn leftovers(&self) -> String {
        self.login(
            "ls -A ~/.config/buzz-acp ~/buzz-agents 2>/dev/null; systemctl --user list-units --all --plain --no-legend 'buzz-acp@*'",
        )
        .1
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.ends_with(':') && !l.ends_with(".lock"))
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// Runs `args` as root in the container; its stdout.
    pub fn root(&self, args: &[&str]) -> String {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(args);
        Podman::from_env()
            .run(all)
            .unwrap_or_else(|e| format!("(podman exec failed: {e})"))
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", "--name", &self.name])
            .output();
    }
}

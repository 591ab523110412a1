//! `provider_config` of the SSH binding (issue 51 item 1; spec I2): flat
//! scalars, every field named in `info`'s schema, each validated before
//! anything is run. Pure.
//!
//! | field | meaning |
//! |---|---|
//! | `host` | required: `[user@]host[:port]`, or an alias of your ssh config |
//! | `identity_file` | the key ssh logs in with (`-i`); default: your ssh config and agent |
//! | `ssh_config` | an ssh config file to use instead of `~/.ssh/config` (`-F`) |
//! | `known_hosts_file` | where the host's key is known (`UserKnownHostsFile`) |
//! | `workdir` | the agent's working directory on the host (default `~/buzz-agents/<first 12 hex of the key>`: a renamed agent keeps it) |
//! | `harness_path` | the `buzz-acp` binary to install on the host (default: beside this provider, then `PATH`) |
//! | `inactivity_seconds` | the harness stops after this long without a turn (default 86 400; 0 = never) |
//! | `doze_seconds` | the harness ends its agent processes after this long (default 300; 0 = never) |
//! | `connect_timeout_seconds` | ssh's `ConnectTimeout` (default 15) |
//!
//! Upstream's `buzz-backend-ssh` names the host `host` and the directory
//! `workdir`; those names are kept. Its `user` is part of `host` here (the
//! login user is the user the agent runs as: a `systemd --user` unit needs
//! no root). Key names pass I2's lint: the login key's path is
//! `identity_file`, not `ssh_key_path`. Every value is refused when it
//! could be read by ssh as an option (a leading `-`) or holds a control
//! character; remote paths are further held to a plain character set, since
//! they are written into a shell script.

use buzz_provider::config::{object, string_field, whole_seconds};
use buzz_provider::refusal::{ConfigError, ConfigErrorKind as K};
use serde_json::Value;
use std::path::PathBuf;

/// Every field, in `info`'s order.
pub const FIELDS: &[&str] = &[
    "host",
    "identity_file",
    "ssh_config",
    "known_hosts_file",
    "workdir",
    "harness_path",
    "inactivity_seconds",
    "doze_seconds",
    "connect_timeout_seconds",
];
/// The inactivity bound when none is given: a day (issue 50, "sleeping
/// after a day"); a VPS has no scheduler to reclaim an idle agent's seat.
pub const DEFAULT_INACTIVITY_SECONDS: u64 = 86_400;
/// The doze bound when none is given (issue 50).
pub const DEFAULT_DOZE_SECONDS: u64 = 300;
/// ssh's `ConnectTimeout` when none is given.
pub const DEFAULT_CONNECT_TIMEOUT_SECONDS: u64 = 15;

/// Where to log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub user: Option<String>,
    /// A host name, an address, or an alias of the user's ssh config.
    pub host: String,
    pub port: Option<u16>,
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// A validated `provider_config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshConfig {
    pub host: Host,
    pub identity_file: Option<PathBuf>,
    pub ssh_config: Option<PathBuf>,
    pub known_hosts_file: Option<PathBuf>,
    /// `~/…` or an absolute path on the host; `None`: the default.
    pub workdir: Option<String>,
    pub harness_path: Option<PathBuf>,
    pub inactivity_seconds: u64,
    pub doze_seconds: u64,
    pub connect_timeout_seconds: u64,
}

fn bad(kind: K, field: &str, msg: String) -> ConfigError {
    ConfigError::new(kind, Some(field), msg)
}

fn is_user(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 32
        && b.next().is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
        && b.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.'))
}

fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && !s.starts_with(['-', '.'])
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
}

/// An IPv6 address's shape: two colons at least (`host:port` has one).
fn is_ipv6(s: &str) -> bool {
    s.matches(':').count() >= 2
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, b':' | b'.'))
}

/// Parses `[user@]host[:port]` (an IPv6 address in brackets when a port
/// follows it).
pub fn parse_host(s: &str) -> Result<Host, String> {
    let shape = "give [user@]host[:port] or an alias of your ssh config, for example agent@vps.example.com or agent@192.0.2.7:2222";
    let (user, rest) = match s.rsplit_once('@') {
        Some((u, r)) if is_user(u) => (Some(u.to_string()), r),
        Some(_) => return Err(format!("the user before '@' is not a login name; {shape}")),
        None => (None, s),
    };
    let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
        let (h, after) = inner
            .split_once(']')
            .ok_or_else(|| format!("an unclosed '['; {shape}"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("junk after ']'; {shape}"))?,
            ),
        };
        (h, port)
    } else if is_ipv6(rest) {
        (rest, None)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if !(is_host_name(host) || is_ipv6(host)) {
        return Err(format!(
            "the host is not a host name, an address or an alias; {shape}"
        ));
    }
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("the port is not 1-65535; {shape}"))
        })
        .transpose()?;
    Ok(Host {
        user,
        host: host.to_string(),
        port,
    })
}

/// A local path field: `~/` is the user's home. Refused when it starts
/// with `-` or holds a control character.
fn local_path(field: &str, s: String) -> Result<PathBuf, ConfigError> {
    if s.starts_with('-') || s.chars().any(char::is_control) {
        return Err(bad(
            K::Invalid,
            field,
            format!("provider_config.{field} must be a file path (no leading '-', no control characters)"),
        ));
    }
    Ok(match s.strip_prefix("~/") {
        Some(rest) => {
            std::env::var_os("HOME").map_or_else(|| PathBuf::from(&s), |h| PathBuf::from(h).join(rest))
        }
        None => PathBuf::from(s),
    })
}

/// True for a remote directory the scripts may name: `~/…` or absolute,
/// of plain characters, with no `..` and not the home itself.
pub fn is_remote_dir(s: &str) -> bool {
    let body = s.strip_prefix("~/").or_else(|| s.strip_prefix('/'));
    body.is_some_and(|b| {
        !b.is_empty()
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'/' | b'.' | b'_' | b'-' | b'+' | b'@'))
            && b.split('/').all(|part| part != "..")
            && !b.split('/').all(|part| part.is_empty() || part == ".")
    })
}

impl SshConfig {
    /// Parses and validates `provider_config`.
    pub fn parse(v: &Value) -> Result<SshConfig, ConfigError> {
        let m = object(v, FIELDS)?;
        let host = string_field(m, "host")?.ok_or_else(|| {
            bad(
                K::Missing,
                "host",
                "provider_config.host is required: the server to run the agent on, as [user@]host[:port] or an alias of your ssh config".into(),
            )
        })?;
        if host.starts_with('-') || host.chars().any(char::is_control) {
            return Err(bad(
                K::Invalid,
                "host",
                "provider_config.host may not start with '-' or hold control characters".into(),
            ));
        }
        let host =
            parse_host(&host).map_err(|e| bad(K::Invalid, "host", format!("provider_config.host: {e}")))?;
        let path = |f: &str| string_field(m, f)?.map(|s| local_path(f, s)).transpose();
        let workdir = string_field(m, "workdir")?;
        if let Some(w) = &workdir
            && !is_remote_dir(w)
        {
            return Err(bad(
                K::Invalid,
                "workdir",
                "provider_config.workdir must be a directory on the host under ~/ or /, of letters, digits and . _ - + @ / only, without ..".into(),
            ));
        }
        let connect_timeout_seconds = whole_seconds(
            m,
            "connect_timeout_seconds",
            "ssh's own default",
            DEFAULT_CONNECT_TIMEOUT_SECONDS,
        )?;
        Ok(SshConfig {
            host,
            identity_file: path("identity_file")?,
            ssh_config: path("ssh_config")?,
            known_hosts_file: path("known_hosts_file")?,
            workdir,
            harness_path: path("harness_path")?,
            inactivity_seconds: whole_seconds(m, "inactivity_seconds", "never", DEFAULT_INACTIVITY_SECONDS)?,
            doze_seconds: whole_seconds(m, "doze_seconds", "no doze", DEFAULT_DOZE_SECONDS)?,
            connect_timeout_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hosts_parse_as_ssh_reads_them() {
        let h = |s: &str| parse_host(s).unwrap();
        assert_eq!(
            h("vps"),
            Host {
                user: None,
                host: "vps".into(),
                port: None
            }
        );
        assert_eq!(
            h("agent@192.0.2.7:2222"),
            Host {
                user: Some("agent".into()),
                host: "192.0.2.7".into(),
                port: Some(2222)
            }
        );
        assert_eq!(h("a@[2001:db8::1]:22").host, "2001:db8::1");
        assert_eq!(h("2001:db8::1").port, None);
        assert_eq!(h("agent@[::1]:2222").to_string(), "agent@[::1]:2222");
        for bad in [
            "",
            "-oProxyCommand=x",
            "a b",
            "u@h:0",
            "u@h:70000",
            "Root@h",
            "u@h;rm",
            "u@[::1",
            "h:x",
            "$(id)",
        ] {
            assert!(parse_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn remote_directories_are_plain_paths_under_home_or_root() {
        for ok in ["~/agents/a", "/srv/buzz/a-1", "~/x.y/z_w"] {
            assert!(is_remote_dir(ok), "{ok}");
        }
        for bad in [
            "agents", "~", "~/", "/", "~/../x", "~/a b", "~/$(id)", "~/a;b", "~/a\nb", "/a/../b", "~/./",
        ] {
            assert!(!is_remote_dir(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_config_is_validated_field_by_field() {
        let c = SshConfig::parse(&json!({"host": "agent@h:2222", "doze_seconds": 0})).unwrap();
        assert_eq!(c.host.port, Some(2222));
        assert_eq!(
            (c.doze_seconds, c.inactivity_seconds),
            (0, DEFAULT_INACTIVITY_SECONDS)
        );
        let kind = |v| SshConfig::parse(&v).unwrap_err().kind;
        assert_eq!(kind(json!({})), K::Missing);
        assert_eq!(kind(json!({"host": "-oProxyCommand=sh"})), K::Invalid);
        assert_eq!(kind(json!({"host": "h", "identity_file": "-i"})), K::Invalid);
        assert_eq!(kind(json!({"host": "h", "workdir": "~/../etc"})), K::Invalid);
        assert_eq!(kind(json!({"host": "h", "ssh_key_path": "/k"})), K::SecretLint);
        assert_eq!(kind(json!({"host": "h", "user": "x"})), K::UnknownField);
        for f in FIELDS {
            assert!(!buzz_contract::i2::key_name_is_secretish(f), "{f}");
        }
    }
}

//! The user's kubeconfig: loading it, naming the cluster it points at, and
//! keeping its credentials out of every answer (spec §K8s Auth, §Invocation
//! L2 item 5; issue 24 items 4 and 5).
//!
//! - **Never quote it.** A kubeconfig holds bearer tokens, passwords and
//!   client keys. A YAML error is reported as the file, the line, the column
//!   and the key on that line ([`describe_parse_error`]), never the text. As
//!   a second line of defence every secret-looking value in the files
//!   ([`secret_values`], read line by line so it works on a file that does
//!   not parse) joins the output redactor ([`file_secrets`]).
//! - **Name the cluster.** A cluster that cannot be reached is named by its
//!   server URL (user info dropped) and the kubeconfig context
//!   ([`Endpoint`], [`name_endpoint`]), so a wrong context is visible at once.
//! - **Name the exec plugin** whose credentials failed (§K8s Auth).
//!
//! Files are read as kube does: `$KUBECONFIG` (a `:`-separated list, merged
//! in order) else `~/.kube/config`; each is read on its own so an error names
//! its file.

use crate::error::{ClusterFailure, DeployError};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::fmt;
use std::path::{Path, PathBuf};

/// Keys whose values are credentials (the kubeconfig's `users[].user` fields
/// and the auth-provider config), matched case-insensitively.
const SECRET_KEYS: &[&str] = &[
    "token",
    "password",
    "client-key-data",
    "client-certificate-data",
    "id-token",
    "refresh-token",
    "access-token",
    "client-secret",
    "secret",
];

/// Files larger than this are not scanned for secrets (a kubeconfig is a few KiB).
const SCAN_LIMIT: u64 = 4 << 20;

/// The cluster a kubeconfig context points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The server URL without user info.
    pub server: String,
    /// The context in force.
    pub context: String,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the cluster at {} (kubeconfig context {})",
            self.server, self.context
        )
    }
}

/// A client and the cluster it talks to.
pub struct Connected {
    pub client: kube::Client,
    pub endpoint: Endpoint,
}

/// The kubeconfig files in force, in merge order.
pub fn paths() -> Vec<PathBuf> {
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| vec![PathBuf::from(h).join(".kube").join("config")])
            .unwrap_or_default(),
    }
}

/// Every value of a credential key in `text`, read line by line (`key: value`,
/// `- key: value`, quoted or not), so that a file that does not parse is
/// still covered.
pub fn secret_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches("- ");
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        if !SECRET_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k)) {
            continue;
        }
        let value = value.trim();
        let unquoted = value.trim_matches(|c| c == '"' || c == '\'').trim();
        for v in [value, unquoted] {
            if v.len() >= 4 && !out.iter().any(|o| o == v) {
                out.push(v.to_string());
            }
        }
    }
    out
}

/// The credential values of every kubeconfig file in force (for the redactor).
pub fn file_secrets() -> Vec<String> {
    paths()
        .iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= SCAN_LIMIT))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| secret_values(&t))
        .collect()
}

/// A YAML error in `path` at `line`/`column` (1-based), described without any
/// of the file's text but the key on that line, when it has one.
pub fn describe_parse_error(path: &Path, text: Option<&str>, at: Option<(u64, u64)>) -> String {
    let Some((line, column)) = at else {
        return format!(
            "{} is not a valid kubeconfig (YAML); its content is not shown, as it may hold credentials",
            path.display()
        );
    };
    let key = text
        .and_then(|t| t.lines().nth(line.saturating_sub(1) as usize))
        .and_then(|l| l.trim_start().trim_start_matches("- ").split_once(':'))
        .map(|(k, _)| k.trim())
        .filter(|k| {
            !k.is_empty()
                && k.len() <= 64
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    let on = key
        .map(|k| format!(", on the line of key `{k}`"))
        .unwrap_or_default();
    format!(
        "{} is not valid YAML at line {line}, column {column}{on}; fix that line (its content is not shown, as it may hold credentials)",
        path.display()
    )
}

/// The error of reading one file, with nothing of its content.
fn describe_read_error(path: &Path, e: &KubeconfigError) -> String {
    match e {
        KubeconfigError::Parse(p) => {
            let text = std::fs::read_to_string(path).ok();
            describe_parse_error(
                path,
                text.as_deref(),
                p.location().map(|l| (l.line(), l.column())),
            )
        }
        KubeconfigError::ReadConfig(io, _) => format!("could not read {}: {io}", path.display()),
        // The other read errors name paths or merge rules, not values.
        other => format!("{}: {other}", path.display()),
    }
}

fn load_failure(context: Option<&str>, cause: String) -> DeployError {
    ClusterFailure::Kubeconfig {
        context: context.map(str::to_string),
        cause,
    }
    .into()
}

/// Reads and merges the kubeconfig files, each error naming its file.
fn read_merged(context: Option<&str>) -> Result<Kubeconfig, DeployError> {
    let files = paths();
    if files.is_empty() {
        return Err(load_failure(
            context,
            "no kubeconfig: $KUBECONFIG is unset and there is no home directory".into(),
        ));
    }
    let mut merged: Option<Kubeconfig> = None;
    for path in &files {
        let kc =
            Kubeconfig::read_from(path).map_err(|e| load_failure(context, describe_read_error(path, &e)))?;
        merged = Some(match merged {
            None => kc,
            Some(m) => m
                .merge(kc)
                .map_err(|e| load_failure(context, format!("{}: {e}", path.display())))?,
        });
    }
    merged.ok_or_else(|| load_failure(context, "no kubeconfig file".into()))
}

/// `scheme://host[:port][/path]` of a server URL, without user info.
fn server_without_userinfo(uri: &http::Uri) -> String {
    let host = uri.host().unwrap_or("");
    let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    let path = uri.path().trim_end_matches('/');
    format!("{}://{host}{port}{path}", uri.scheme_str().unwrap_or("https"))
}

/// Loads the kubeconfig (with `context`, else its current context) and
/// builds a client.
pub async fn connect(context: Option<&str>) -> Result<Connected, DeployError> {
    let kubeconfig = read_merged(context)?;
    let context_name = context
        .map(str::to_string)
        .or_else(|| kubeconfig.current_context.clone())
        .unwrap_or_else(|| "(none)".into());
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &opts)
        .await
        .map_err(|e| load_failure(context, e.to_string()))?;
    let endpoint = Endpoint {
        server: server_without_userinfo(&config.cluster_url),
        context: context_name,
    };
    let client = kube::Client::try_from(config).map_err(|e| {
        let cause = e.to_string();
        match exec_plugin_of(context) {
            Some(command) => ClusterFailure::ExecPlugin { command, cause },
            None => ClusterFailure::Client { cause },
        }
    })?;
    Ok(Connected { client, endpoint })
}

fn exec_plugin_of(context: Option<&str>) -> Option<String> {
    let kc = read_merged(context).ok()?;
    let ctx_name = context.map(str::to_string).or(kc.current_context.clone())?;
    let ctx = kc.contexts.iter().find(|c| c.name == ctx_name)?.context.clone()?;
    let user = ctx.user?;
    let auth = kc.auth_infos.iter().find(|a| a.name == user)?.auth_info.clone()?;
    auth.exec?.command
}

/// Names the kubeconfig's exec plugin in a credentials failure (§K8s Auth).
pub fn name_exec_plugin(e: DeployError, context: Option<&str>) -> DeployError {
    match e {
        DeployError::Cluster(ClusterFailure::Credentials { cause }) => match exec_plugin_of(context) {
            Some(command) => ClusterFailure::ExecPlugin { command, cause }.into(),
            None => ClusterFailure::Credentials { cause }.into(),
        },
        other => other,
    }
}

/// Names the server and the context in a cluster that could not be reached.
pub fn name_endpoint(e: DeployError, endpoint: &Endpoint) -> DeployError {
    match e {
        DeployError::Cluster(ClusterFailure::Unreachable {
            action,
            namespace,
            cause,
            ..
        }) => ClusterFailure::Unreachable {
            action,
            namespace,
            cause,
            endpoint: Some(endpoint.to_string()),
        }
        .into(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "kc-canary-7f3a9b2c4d5e";

    #[test]
    fn credential_values_are_found_line_by_line_even_when_the_file_does_not_parse() {
        let text = format!(
            "users:\n- name: u\n  user:\n    token: {CANARY}: [\n    password: \"p4ssw0rd-x\"\n    client-key-data: 'LS0tLS1CRUdJTi'\n  - token: ab\nclusters:\n- cluster:\n    server: https://x\n"
        );
        let found = secret_values(&text);
        assert!(found.iter().any(|v| v.contains(CANARY)), "{found:?}");
        assert!(found.iter().any(|v| v == "p4ssw0rd-x"), "{found:?}");
        assert!(found.iter().any(|v| v == "LS0tLS1CRUdJTi"), "{found:?}");
        assert!(
            !found.iter().any(|v| v.contains("https://x")),
            "servers are not secrets: {found:?}"
        );
        assert!(
            !found.iter().any(|v| v == "ab"),
            "too short to scrub safely: {found:?}"
        );
    }

    #[test]
    fn a_parse_error_names_file_line_column_and_key_never_the_value() {
        let text = format!("users:\n- name: u\n  user:\n    token: {CANARY}: [\n");
        let m = describe_parse_error(Path::new("/home/u/.kube/config"), Some(&text), Some((4, 19)));
        assert_eq!(
            m,
            "/home/u/.kube/config is not valid YAML at line 4, column 19, on the line of key `token`; fix that line (its content is not shown, as it may hold credentials)"
        );
        // A line without a plain key names only the position.
        let m = describe_parse_error(Path::new("k"), Some("\"weird {\n"), Some((1, 2)));
        assert!(!m.contains("weird"), "{m}");
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_is_reported_without_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: {CANARY}: nope: [\n"
            ),
        )
        .unwrap();
        let kc = Kubeconfig::read_from(&path).unwrap_err();
        let m = describe_read_error(&path, &kc);
        assert!(!m.contains(CANARY), "{m}");
        assert!(m.contains("is not valid YAML at line 6"), "{m}");
        assert!(m.contains("key `token`"), "{m}");
    }

    #[test]
    fn the_endpoint_drops_user_info() {
        let uri: http::Uri = "https://admin:hunter2@10.0.0.1:6443/".parse().unwrap();
        assert_eq!(server_without_userinfo(&uri), "https://10.0.0.1:6443");
        let e = Endpoint {
            server: server_without_userinfo(&uri),
            context: "prod".into(),
        };
        assert_eq!(
            e.to_string(),
            "the cluster at https://10.0.0.1:6443 (kubeconfig context prod)"
        );
    }
}

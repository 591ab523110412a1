//! Kubeconfig files for the test users. They are ordinary kubeconfigs (JSON is
//! valid YAML), consumed by clients exactly as a real user's file would be.

use base64::Engine;
use std::path::Path;

/// Writes a single-cluster, single-user kubeconfig with a bearer token.
pub fn write(
    path: &Path,
    server: &str,
    ca_pem: &str,
    user: &str,
    token: &str,
    namespace: Option<&str>,
) -> std::io::Result<()> {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut context = serde_json::json!({ "cluster": "testenv", "user": user });
    if let Some(ns) = namespace {
        context["namespace"] = ns.into();
    }
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "testenv", "cluster": { "server": server, "certificate-authority-data": ca } }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": user, "context": context }],
        "current-context": user,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?;
    super::write_private(path, text.as_bytes())
}

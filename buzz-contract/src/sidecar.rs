//! The environment of the image's sidecars (the usage collector): one
//! allowlist for the image's entrypoint, the collector and the provider
//! (collector-design.md §1 "Secrets" and "Scope"; spec §Entrypoint and launch
//! ABI; review b30b1a0 #6 and its "rules written in several places").
//!
//! - [`SIDECAR_ENV_ALLOWLIST`]: every name `images/sprig/entrypoint.sh` hands
//!   a sidecar under `env -i` — exact names, never a prefix. A test in this
//!   crate reads the entrypoint and requires its list to equal this one; the
//!   conformance suite requires the collector's `READ_NAMES` to equal
//!   [`SIDECAR_IDENTITY`] plus [`SIDECAR_SETTINGS`].
//! - [`is_deployer_only`]: the allowlisted names only the deployer may set —
//!   the pod identity, the image identity and the collector's settings, plus
//!   any future `RUNTIME_AGENT_*` name. A user's env value there would be read
//!   by the collector as the deployer's word: a forged `IMAGE_DIGEST` passes
//!   the digest gate, a `RUNTIME_AGENT_INGEST_URL` ships to a URL the
//!   provider never validated. Providers refuse these names in every user
//!   env tier. `PATH`, `HOME`, `TZ`, `LANG` and `HOSTNAME` are allowlisted
//!   but ordinary process env, not deployer-only.
//! - [`SIDECAR_PROXY_ENV`]: the egress proxy settings (contract §3: the data
//!   plane works through enterprise proxies), upper and lower case. They are
//!   ordinary process env too: the user's env may set them for the agent's
//!   own egress, and the collector follows the same proxy. They are the only
//!   user env a sidecar can see; the collector tunnels `https://` through
//!   `CONNECT`, so such a proxy sees only the ingest's host and port.

/// The collector's ingest base URL (provider `telemetry_url`).
pub const INGEST_URL: &str = "RUNTIME_AGENT_INGEST_URL";
/// The collector's spool directory; must lie on a volume that survives a
/// container restart (collector-design §5).
pub const SPOOL_DIR: &str = "RUNTIME_AGENT_SPOOL_DIR";
/// The collector's poll interval, seconds.
pub const INTERVAL_SECS: &str = "RUNTIME_AGENT_INTERVAL_SECS";
/// The collector's pause between shipping rounds, seconds.
pub const SHIP_INTERVAL_SECS: &str = "RUNTIME_AGENT_SHIP_INTERVAL_SECS";
/// Downward API: the pod's name.
pub const POD_NAME: &str = "POD_NAME";
/// Downward API: the pod's namespace.
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// Downward API: the pod's UID.
pub const POD_UID: &str = "POD_UID";
/// Downward API: the node's name.
pub const NODE_NAME: &str = "NODE_NAME";
/// The container's name, a deployer literal.
pub const CONTAINER_NAME: &str = "CONTAINER_NAME";
/// The image reference as deployed, a deployer literal.
pub const IMAGE_REF: &str = "IMAGE_REF";
/// The image digest when the deployer pinned one; never inferred from a tag.
pub const IMAGE_DIGEST: &str = "IMAGE_DIGEST";

/// The prefix of the collector's own settings: every such name is deployer-only.
pub const SETTINGS_PREFIX: &str = "RUNTIME_AGENT_";

/// The collector's settings.
pub const SIDECAR_SETTINGS: &[&str] = &[INGEST_URL, SPOOL_DIR, INTERVAL_SECS, SHIP_INTERVAL_SECS];

/// The pod and image identity the deployer hands the collector.
pub const SIDECAR_IDENTITY: &[&str] = &[
    POD_NAME,
    POD_NAMESPACE,
    POD_UID,
    NODE_NAME,
    CONTAINER_NAME,
    IMAGE_REF,
    IMAGE_DIGEST,
];

/// Ordinary process env a sidecar also gets.
pub const SIDECAR_PROCESS_ENV: &[&str] = &["PATH", "HOME", "TZ", "LANG", "HOSTNAME"];

/// The egress proxy settings a sidecar also gets (as the collector reads
/// them: upper case first, then lower case).
pub const SIDECAR_PROXY_ENV: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Every name the entrypoint hands a sidecar, in the entrypoint's order:
/// the process env, the identity, the settings, then the proxy settings.
pub const SIDECAR_ENV_ALLOWLIST: &[&str] = &concat::<ALLOWLIST_LEN>([
    SIDECAR_PROCESS_ENV,
    SIDECAR_IDENTITY,
    SIDECAR_SETTINGS,
    SIDECAR_PROXY_ENV,
]);

const ALLOWLIST_LEN: usize =
    SIDECAR_PROCESS_ENV.len() + SIDECAR_IDENTITY.len() + SIDECAR_SETTINGS.len() + SIDECAR_PROXY_ENV.len();

/// The names of `parts`, in order (`N` is their total count).
const fn concat<const N: usize>(parts: [&[&'static str]; 4]) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut p) = (0, 0);
    while p < parts.len() {
        let mut j = 0;
        while j < parts[p].len() {
            out[i] = parts[p][j];
            i += 1;
            j += 1;
        }
        p += 1;
    }
    assert!(i == N);
    out
}

/// True for a name only the deployer may set: the sidecar identity and
/// every `RUNTIME_AGENT_*` name.
pub fn is_deployer_only(key: &str) -> bool {
    SIDECAR_IDENTITY.contains(&key) || key.starts_with(SETTINGS_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_is_process_env_identity_and_settings_exactly() {
        let mut parts: Vec<&str> = SIDECAR_PROCESS_ENV
            .iter()
            .chain(SIDECAR_IDENTITY)
            .chain(SIDECAR_SETTINGS)
            .chain(SIDECAR_PROXY_ENV)
            .copied()
            .collect();
        let mut all = SIDECAR_ENV_ALLOWLIST.to_vec();
        parts.sort_unstable();
        all.sort_unstable();
        assert_eq!(parts, all);
        let mut dedup = all.clone();
        dedup.dedup();
        assert_eq!(dedup, all, "no name twice");
    }

    #[test]
    fn deployer_only_names() {
        for k in SIDECAR_IDENTITY.iter().chain(SIDECAR_SETTINGS) {
            assert!(is_deployer_only(k), "{k}");
        }
        assert!(is_deployer_only("RUNTIME_AGENT_FUTURE_KNOB"));
        for k in SIDECAR_PROCESS_ENV.iter().chain(SIDECAR_PROXY_ENV) {
            assert!(!is_deployer_only(k), "{k} is ordinary process env");
        }
        for k in ["GOOSE_MODEL", "RUNTIME", "IMAGE", "POD", "image_digest"] {
            assert!(!is_deployer_only(k), "{k}");
        }
    }
}

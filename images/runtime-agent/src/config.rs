//! Settings from the allowlisted environment (collector-design.md §1 "Secrets" and
//! "Scope"; the image entrypoint passes sidecars only the names below).
//!
//! The collector reads exactly [`READ_NAMES`] and nothing else — never a `BUZZ_*`
//! variable, never user env — through a lookup function, so a test can prove which
//! names are asked for. Errors name the variable, never its value.
//!
//! - `RUNTIME_AGENT_INGEST_URL`: the ingest base URL (provider `telemetry_url`); unset or
//!   empty = spool only. `http://` or `https://` with a host, no query or fragment.
//! - `RUNTIME_AGENT_SPOOL_DIR`: the spool directory (an `emptyDir`); default
//!   [`DEFAULT_SPOOL_DIR`].
//! - `RUNTIME_AGENT_INTERVAL_SECS`: the poll interval, 1–3600 s; default 10.
//! - `RUNTIME_AGENT_SHIP_INTERVAL_SECS`: the pause between shipping rounds, 1–3600 s;
//!   default 30. The backoff starts at min(5 s, this) and is capped at
//!   min(300 s, 10 × this), so short rounds (tests) also back off briefly.
//! - Downward API and deployer literals: `POD_NAME`, `POD_NAMESPACE`, `POD_UID`,
//!   `CONTAINER_NAME` (required), `NODE_NAME`, `IMAGE_REF`, `IMAGE_DIGEST` (optional).
//!   The workload is the bare pod (`workload_kind` `Pod`, `workload_name` = pod name).
//!   `IMAGE_REF` is read and never used to derive a digest (design §7: never inferred).

use std::path::PathBuf;

use crate::payload::PodIdentity;

pub const INGEST_URL: &str = "RUNTIME_AGENT_INGEST_URL";
pub const SPOOL_DIR: &str = "RUNTIME_AGENT_SPOOL_DIR";
pub const INTERVAL_SECS: &str = "RUNTIME_AGENT_INTERVAL_SECS";
pub const SHIP_INTERVAL_SECS: &str = "RUNTIME_AGENT_SHIP_INTERVAL_SECS";
pub const POD_NAME: &str = "POD_NAME";
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
pub const POD_UID: &str = "POD_UID";
pub const NODE_NAME: &str = "NODE_NAME";
pub const CONTAINER_NAME: &str = "CONTAINER_NAME";
pub const IMAGE_REF: &str = "IMAGE_REF";
pub const IMAGE_DIGEST: &str = "IMAGE_DIGEST";

/// Every environment variable the collector reads.
pub const READ_NAMES: [&str; 11] = [
    INGEST_URL,
    SPOOL_DIR,
    INTERVAL_SECS,
    SHIP_INTERVAL_SECS,
    POD_NAME,
    POD_NAMESPACE,
    POD_UID,
    NODE_NAME,
    CONTAINER_NAME,
    IMAGE_REF,
    IMAGE_DIGEST,
];

/// Default spool directory.
pub const DEFAULT_SPOOL_DIR: &str = "/tmp/runtime-agent";
/// Default poll interval (design §3: poll every 10 s).
pub const DEFAULT_INTERVAL_SECS: u64 = 10;
/// Default pause between shipping rounds (design §6: rounds every 30 s).
pub const DEFAULT_SHIP_INTERVAL_SECS: u64 = 30;

/// The collector's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub ingest_url: Option<String>,
    pub spool_dir: PathBuf,
    pub interval_secs: u64,
    pub ship_interval_secs: u64,
    pub identity: PodIdentity,
    pub node_name: Option<String>,
    pub image_ref: Option<String>,
    pub image_digest: Option<String>,
}

/// A setting that is missing or invalid (the variable's name only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{0} is required and unset")]
    Missing(&'static str),
    #[error("{name} is invalid: {reason}")]
    Invalid {
        name: &'static str,
        reason: &'static str,
    },
}

impl Settings {
    /// Read the settings through `lookup` (the process env in the binary).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &'static str| lookup(name).filter(|v| !v.is_empty());
        let required = |name: &'static str| get(name).ok_or(ConfigError::Missing(name));
        let seconds = |name: &'static str, default: u64| match get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=3600).contains(n))
                .ok_or(ConfigError::Invalid {
                    name,
                    reason: "not a whole number of seconds in 1..=3600",
                }),
        };
        let interval_secs = seconds(INTERVAL_SECS, DEFAULT_INTERVAL_SECS)?;
        let ship_interval_secs = seconds(SHIP_INTERVAL_SECS, DEFAULT_SHIP_INTERVAL_SECS)?;
        let ingest_url = get(INGEST_URL);
        if ingest_url
            .as_deref()
            .is_some_and(|u| !crate::http::valid_base_url(u))
        {
            return Err(ConfigError::Invalid {
                name: INGEST_URL,
                reason: "not an http:// or https:// URL with a host and no query",
            });
        }
        let spool_dir = PathBuf::from(get(SPOOL_DIR).unwrap_or_else(|| DEFAULT_SPOOL_DIR.to_owned()));
        if !spool_dir.is_absolute() {
            return Err(ConfigError::Invalid {
                name: SPOOL_DIR,
                reason: "not an absolute path",
            });
        }
        let pod = required(POD_NAME)?;
        let identity = PodIdentity {
            namespace: required(POD_NAMESPACE)?,
            workload_kind: "Pod".to_owned(),
            workload_name: pod.clone(),
            container: required(CONTAINER_NAME)?,
            pod,
            pod_uid: required(POD_UID)?,
        };
        Ok(Settings {
            ingest_url,
            spool_dir,
            interval_secs,
            ship_interval_secs,
            identity,
            node_name: get(NODE_NAME),
            image_ref: get(IMAGE_REF),
            image_digest: get(IMAGE_DIGEST),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base() -> BTreeMap<String, String> {
        env(&[
            (POD_NAME, "agent-7f3c"),
            (POD_NAMESPACE, "agents-x7k2qp"),
            (POD_UID, "0d9f6a52-1111-2222-3333-444455556666"),
            (CONTAINER_NAME, "agent"),
        ])
    }

    #[test]
    fn reads_exactly_the_allowlisted_names_and_never_buzz() {
        let mut e = base();
        e.insert("BUZZ_PRIVATE_KEY".into(), "canary-nsec".into());
        e.insert("BUZZ_AUTH_TAG".into(), "canary-tag".into());
        let asked = RefCell::new(Vec::new());
        let s = Settings::from_lookup(|name| {
            asked.borrow_mut().push(name.to_owned());
            e.get(name).cloned()
        })
        .unwrap();
        let mut asked = asked.into_inner();
        asked.sort();
        asked.dedup();
        let mut expected: Vec<String> = READ_NAMES.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(asked, expected);
        assert!(!format!("{s:?}").contains("canary"));
    }

    #[test]
    fn defaults_and_identity() {
        let e = base();
        let s = Settings::from_lookup(|n| e.get(n).cloned()).unwrap();
        assert_eq!(s.interval_secs, 10);
        assert_eq!(s.ship_interval_secs, 30);
        assert_eq!(s.spool_dir, PathBuf::from(DEFAULT_SPOOL_DIR));
        assert_eq!(s.ingest_url, None);
        assert_eq!(s.identity.workload_kind, "Pod");
        assert_eq!(s.identity.workload_name, "agent-7f3c");
        assert_eq!(s.identity.pod, "agent-7f3c");
    }

    #[test]
    fn missing_and_invalid_settings_name_the_variable_only() {
        for name in [POD_NAME, POD_NAMESPACE, POD_UID, CONTAINER_NAME] {
            let mut e = base();
            e.remove(name);
            assert_eq!(
                Settings::from_lookup(|n| e.get(n).cloned()),
                Err(ConfigError::Missing(name))
            );
        }
        for bad in ["0", "3601", "ten", "-1", "1.5"] {
            let mut e = base();
            e.insert(INTERVAL_SECS.into(), bad.into());
            let err = Settings::from_lookup(|n| e.get(n).cloned()).unwrap_err();
            assert_eq!(
                err,
                ConfigError::Invalid {
                    name: INTERVAL_SECS,
                    reason: "not a whole number of seconds in 1..=3600"
                },
                "{bad}"
            );
        }
        for bad in ["ftp://x", "ingest:8080", "https://x/?token=1"] {
            let mut e = base();
            e.insert(INGEST_URL.into(), bad.into());
            assert_eq!(
                Settings::from_lookup(|n| e.get(n).cloned()),
                Err(ConfigError::Invalid {
                    name: INGEST_URL,
                    reason: "not an http:// or https:// URL with a host and no query"
                }),
                "{bad}"
            );
        }
        let mut e = base();
        e.insert(SHIP_INTERVAL_SECS.into(), "0".into());
        assert_eq!(
            Settings::from_lookup(|n| e.get(n).cloned()),
            Err(ConfigError::Invalid {
                name: SHIP_INTERVAL_SECS,
                reason: "not a whole number of seconds in 1..=3600"
            })
        );
        let mut e = base();
        e.insert(SPOOL_DIR.into(), "relative/dir".into());
        assert_eq!(
            Settings::from_lookup(|n| e.get(n).cloned()),
            Err(ConfigError::Invalid {
                name: SPOOL_DIR,
                reason: "not an absolute path"
            })
        );
    }
}

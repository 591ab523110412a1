//! `provider_config.telemetry_url`: where the image's usage collector ships
//! (collector-design.md §1 "Secrets", §6; runtime-agent-backend-contract.md §3).
//!
//! - [`validate_telemetry_url`]: an `https://` URL, or `http://` only for a loopback
//!   host (`localhost`, `127.0.0.0/8`, `[::1]`); no user info, query or fragment
//!   (nothing secret-shaped may hide in it: it is plain pod spec), at most 2048
//!   bytes. Checked in [`crate::config::ProviderConfig::parse`], before any cluster
//!   contact, so a malformed one creates nothing.
//! - [`collector_env`]: the collector's plain env, set on the container when the URL
//!   is: `RUNTIME_AGENT_INGEST_URL`, `RUNTIME_AGENT_SPOOL_DIR` (on the workspace
//!   `emptyDir`, [`COLLECTOR_SPOOL_DIR`], so the spool survives an `OnFailure`
//!   restart; review b30b1a0 #7), the pod identity through the Downward API
//!   (`POD_NAME`, `POD_NAMESPACE`, `POD_UID`, `NODE_NAME`), `CONTAINER_NAME` and
//!   `IMAGE_REF` as literals, and `IMAGE_DIGEST`: the digest when the image is
//!   digest-pinned, else explicitly empty (never inferred from a tag; the collector
//!   reads empty as unset, and the explicit value overrides anything of that name
//!   in `envFrom`; review b30b1a0 #6). None of it is secret and none of it goes into
//!   the per-attempt Secret; the image's entrypoint hands these names (the
//!   contract's [`buzz_contract::sidecar::SIDECAR_ENV_ALLOWLIST`]) to the collector
//!   under `env -i`, and user env may set none of them ([`crate::envtiers`]).
//! - No ingest credential exists: the contract's current stage is plain HTTP(S) with
//!   no client identity (contract §3), so nothing telemetry-related travels in the
//!   Secret.
//! - Fingerprint: the URL is plain pod spec, so it is part of the create-intent
//!   fingerprint (a changed URL is a changed intent); the Downward API references are
//!   constant text.

use crate::consts::COLLECTOR_SPOOL_DIR;
use buzz_contract::sidecar as names;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};

/// The longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

fn is_loopback(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") || host == "[::1]" {
        return true;
    }
    host.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Validate a `telemetry_url`; the error says why, never echoing the value.
pub fn validate_telemetry_url(url: &str) -> Result<String, &'static str> {
    if url.len() > MAX_URL_LEN {
        return Err("is longer than 2048 bytes");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace or control characters");
    }
    let uri: http::Uri = url.parse().map_err(|_| "is not a URL")?;
    let scheme = uri.scheme_str().ok_or("is not an absolute URL")?;
    let authority = uri.authority().ok_or("has no host")?;
    if authority.as_str().contains('@') {
        return Err("must not carry user info (credentials never go in provider_config)");
    }
    if uri.query().is_some() || url.contains('#') {
        return Err("must not carry a query or fragment");
    }
    let host = authority.host();
    if host.is_empty() {
        return Err("has no host");
    }
    match scheme {
        "https" => {}
        "http" if is_loopback(host) => {}
        "http" => return Err("must be https:// (http:// is accepted only for a loopback host)"),
        _ => return Err("must be an https:// URL"),
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn literal(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..Default::default()
        }),
    }
}

/// The digest of a digest-pinned reference (`…@sha256:<64 hex>`), else `None`.
pub fn pinned_digest(image: &str) -> Option<&str> {
    let (_, digest) = image.rsplit_once('@')?;
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))).then_some(digest)
}

/// The collector's plain env for a pod running `image` in `container`.
pub fn collector_env(url: &str, container: &str, image: &str) -> Vec<EnvVar> {
    vec![
        literal(names::INGEST_URL, url),
        literal(names::SPOOL_DIR, COLLECTOR_SPOOL_DIR),
        field(names::POD_NAME, "metadata.name"),
        field(names::POD_NAMESPACE, "metadata.namespace"),
        field(names::POD_UID, "metadata.uid"),
        field(names::NODE_NAME, "spec.nodeName"),
        literal(names::CONTAINER_NAME, container),
        literal(names::IMAGE_REF, image),
        literal(names::IMAGE_DIGEST, pinned_digest(image).unwrap_or("")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_http_only_on_loopback() {
        for ok in [
            "https://ingest.example.com",
            "https://ingest.example.com:8443/base/",
            "http://127.0.0.1:8470",
            "http://127.3.4.5",
            "http://localhost:9000/x",
            "http://[::1]:8470",
        ] {
            assert!(validate_telemetry_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            validate_telemetry_url("https://i.example.com/base/").unwrap(),
            "https://i.example.com/base"
        );
        for (bad, why) in [
            (
                "http://ingest.example.com",
                "must be https:// (http:// is accepted only for a loopback host)",
            ),
            (
                "http://10.0.0.1:8470",
                "must be https:// (http:// is accepted only for a loopback host)",
            ),
            ("ftp://ingest.example.com", "must be an https:// URL"),
            ("ingest.example.com", "is not an absolute URL"),
            (
                "https://user:pw@ingest.example.com",
                "must not carry user info (credentials never go in provider_config)",
            ),
            (
                "https://ingest.example.com/?token=x",
                "must not carry a query or fragment",
            ),
            (
                "https://ingest.example.com/#x",
                "must not carry a query or fragment",
            ),
            (
                "https://ingest .example.com",
                "contains whitespace or control characters",
            ),
            ("", "is not a URL"),
        ] {
            assert_eq!(validate_telemetry_url(bad), Err(why), "{bad}");
        }
        assert_eq!(
            validate_telemetry_url(&format!("https://x/{}", "a".repeat(2048))),
            Err("is longer than 2048 bytes")
        );
    }

    #[test]
    fn the_env_is_plain_downward_api_and_literals() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let pinned = format!("ghcr.io/block/buzz-sprig@{digest}");
        let env = collector_env("https://i.example.com", "agent", &pinned);
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "RUNTIME_AGENT_INGEST_URL",
                "RUNTIME_AGENT_SPOOL_DIR",
                "POD_NAME",
                "POD_NAMESPACE",
                "POD_UID",
                "NODE_NAME",
                "CONTAINER_NAME",
                "IMAGE_REF",
                "IMAGE_DIGEST"
            ]
        );
        assert_eq!(
            env[4]
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "metadata.uid"
        );
        assert_eq!(env[8].value.as_deref(), Some(digest.as_str()));
        // Every name is on the sidecar allowlist and deployer-only.
        for n in &names {
            assert!(names::SIDECAR_ENV_ALLOWLIST.contains(n), "{n}");
            assert!(names::is_deployer_only(n), "{n}");
        }
        assert!(
            env.iter()
                .all(|e| e.value_from.as_ref().is_none_or(|v| v.secret_key_ref.is_none()))
        );
        let tagged = collector_env("https://i.example.com", "agent", "r.test/sprig:v1");
        let digest_of_tagged = tagged.iter().find(|e| e.name == "IMAGE_DIGEST");
        assert_eq!(
            digest_of_tagged.and_then(|e| e.value.as_deref()),
            Some(""),
            "never inferred from a tag, and explicitly empty so nothing in envFrom can fill it"
        );
        assert_eq!(pinned_digest("r.test/sprig:v1@sha256:ABC"), None);
    }
}

//! Image references (spec §Image): user overrides may be a tag or a digest —
//! the user's trust decision — but never `:latest` and never untagged (which
//! means `:latest`). The default image must be digest-pinned.

/// A validated image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The reference exactly as the pod will use it.
    pub reference: String,
    /// True when it came from the provider's default, not the user.
    pub from_default: bool,
}

fn component_ok(c: &str) -> bool {
    !c.is_empty()
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
        && c.as_bytes()[0].is_ascii_alphanumeric()
        && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
}

fn registry_ok(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    !host.is_empty()
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks reference syntax (`[registry[:port]/]path[:tag][@sha256:<64 hex>]`).
/// `require_digest` enforces the default-image rule.
pub fn validate_image(s: &str, require_digest: bool) -> Result<ImageRef, String> {
    if s.len() > 512 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("not an image reference".into());
    }
    let (name_tag, digest) = match s.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (s, None),
    };
    if let Some(d) = digest {
        let hex = d
            .strip_prefix("sha256:")
            .ok_or("the digest must be sha256:<64 hex>")?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err("the digest must be sha256:<64 lowercase hex>".into());
        }
    }
    // A tag is the part after the last ':' that follows the last '/'.
    let last_slash = name_tag.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (name, tag) = match name_tag[last_slash..].rfind(':') {
        Some(i) => (&name_tag[..last_slash + i], Some(&name_tag[last_slash + i + 1..])),
        None => (name_tag, None),
    };
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost") {
        if !registry_ok(parts[0]) {
            return Err("the registry host is malformed".into());
        }
        parts.remove(0);
    }
    if parts.is_empty() || !parts.iter().all(|p| component_ok(p)) {
        return Err("the repository path must be lowercase letters, digits and . _ - separated by /".into());
    }
    if let Some(t) = tag {
        let valid = !t.is_empty()
            && t.len() <= 128
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            && (t.as_bytes()[0].is_ascii_alphanumeric() || t.as_bytes()[0] == b'_');
        if !valid {
            return Err("the tag is malformed".into());
        }
        if t == "latest" {
            return Err(":latest is refused; pin a version tag or a digest".into());
        }
    }
    if tag.is_none() && digest.is_none() {
        return Err("an untagged reference means :latest; pin a version tag or a digest".into());
    }
    if require_digest && digest.is_none() {
        return Err("the default image must be pinned by digest (@sha256:…)".into());
    }
    Ok(ImageRef {
        reference: s.to_string(),
        from_default: require_digest,
    })
}

/// The `sha256:<hex>` a reference or an imageID is pinned to, if any.
fn pinned_digest(s: &str) -> Option<&str> {
    s.rsplit_once('@')
        .map(|(_, d)| d)
        .or_else(|| s.starts_with("sha256:").then_some(s))
        .filter(|d| d.starts_with("sha256:"))
}

/// Whether the kubelet's resolved `image_id` adds anything to the pod's
/// image annotation, which holds `reference` (spec §Image: the resolved image
/// ID is recorded "for post-hoc attribution"). A reference pinned by digest
/// already names the exact bytes: when the kubelet resolved it to that same
/// digest, recording it again would be a PATCH that says nothing new (the
/// default image is always pinned, so a default deploy saves the request). A
/// tag, or a resolution to another digest (an image ID rather than a
/// manifest digest), is recorded.
pub fn resolution_adds_attribution(reference: &str, image_id: &str) -> bool {
    if image_id.is_empty() {
        return false;
    }
    match (pinned_digest(reference), pinned_digest(image_id)) {
        (Some(wanted), Some(got)) => wanted != got,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolution_to_the_pinned_digest_adds_nothing_and_a_tag_resolution_does() {
        let d = "a".repeat(64);
        let e = "b".repeat(64);
        let pinned = format!("localhost:5000/buzz-sprig@sha256:{d}");
        // containerd reports the repo digest it pulled.
        assert!(!resolution_adds_attribution(&pinned, &pinned));
        assert!(!resolution_adds_attribution(
            &format!("localhost:5000/buzz-sprig:v1@sha256:{d}"),
            &format!("localhost:5000/buzz-sprig@sha256:{d}")
        ));
        // An image ID (config digest) is not the manifest digest: recorded.
        assert!(resolution_adds_attribution(&pinned, &format!("sha256:{e}")));
        assert!(resolution_adds_attribution(
            "registry.test/buzz-sprig:v1",
            &format!("registry.test/buzz-sprig@sha256:{d}")
        ));
        assert!(!resolution_adds_attribution("registry.test/buzz-sprig:v1", ""));
    }

    #[test]
    fn accepts_tags_digests_and_custom_registries() {
        let d = "a".repeat(64);
        for ok in [
            "sprig:v1".to_string(),
            "ghcr.io/block/buzz-sprig:sha-abc123".into(),
            format!("ghcr.io/block/buzz-sprig@sha256:{d}"),
            format!("registry.local:5000/team/img:1.2@sha256:{d}"),
            "localhost/x:y".into(),
        ] {
            assert!(validate_image(&ok, false).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_latest_untagged_and_garbage() {
        for bad in [
            "sprig:latest",
            "ghcr.io/block/sprig",
            "Sprig:v1",
            "sprig:v1 ",
            "sprig@sha256:abc",
            "sprig:v1;rm",
            "",
            "/x:y",
            "x:-bad",
        ] {
            assert!(validate_image(bad, false).is_err(), "{bad:?}");
        }
        assert!(
            validate_image("sprig:v1", true).is_err(),
            "defaults need a digest"
        );
    }
}

//! The respond-to gate (wire-facts §4): who may get answers. Owner control
//! (`!shutdown`, `!cancel`) is checked before this gate, elsewhere.

use crate::keys::is_hex64_lower;

/// Inbound author gate mode, matched exactly and case-sensitively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespondTo {
    OwnerOnly,
    Allowlist,
    Anyone,
    Nobody,
}

/// Why a gate configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("respond_to must be one of owner-only, allowlist, anyone, nobody (exact, lowercase)")]
    Mode,
    #[error("respond_to_allowlist entry {0} is not a 64-hex pubkey")]
    Entry(usize),
    #[error("respond_to is allowlist but the allowlist is empty")]
    EmptyAllowlist,
}

impl RespondTo {
    /// Every mode, in the order help texts list them.
    pub const ALL: [RespondTo; 4] = [
        RespondTo::OwnerOnly,
        RespondTo::Allowlist,
        RespondTo::Anyone,
        RespondTo::Nobody,
    ];
    /// The wire strings of [`RespondTo::ALL`].
    pub const NAMES: [&'static str; 4] = ["owner-only", "allowlist", "anyone", "nobody"];

    /// Parses the exact mode string.
    pub fn parse(s: &str) -> Result<RespondTo, GateError> {
        match s {
            "owner-only" => Ok(RespondTo::OwnerOnly),
            "allowlist" => Ok(RespondTo::Allowlist),
            "anyone" => Ok(RespondTo::Anyone),
            "nobody" => Ok(RespondTo::Nobody),
            _ => Err(GateError::Mode),
        }
    }
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            RespondTo::OwnerOnly => "owner-only",
            RespondTo::Allowlist => "allowlist",
            RespondTo::Anyone => "anyone",
            RespondTo::Nobody => "nobody",
        }
    }
}

/// Validates allowlist entries (each 64 lowercase hex after trimming and
/// lowercasing) and the non-empty rule for allowlist mode.
pub fn validate_allowlist(mode: RespondTo, entries: &[String]) -> Result<Vec<String>, GateError> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let norm = e.trim().to_ascii_lowercase();
        if !is_hex64_lower(&norm) {
            return Err(GateError::Entry(i));
        }
        out.push(norm);
    }
    if mode == RespondTo::Allowlist && out.is_empty() {
        return Err(GateError::EmptyAllowlist);
    }
    Ok(out)
}

/// Splits the comma-separated env form, dropping empty pieces.
pub fn split_allowlist(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The gate decision for a non-control message from `author`.
pub fn allows(mode: RespondTo, owner: Option<&str>, allowlist: &[String], author: &str) -> bool {
    let is_owner = owner == Some(author);
    match mode {
        RespondTo::OwnerOnly => is_owner,
        RespondTo::Allowlist => is_owner || allowlist.iter().any(|a| a == author),
        RespondTo::Anyone => true,
        RespondTo::Nobody => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_match_exactly() {
        assert_eq!(RespondTo::parse("owner-only"), Ok(RespondTo::OwnerOnly));
        for bad in ["Owner-only", "owner_only", " anyone", "all", ""] {
            assert_eq!(RespondTo::parse(bad), Err(GateError::Mode), "{bad:?}");
        }
        for (m, n) in RespondTo::ALL.iter().zip(RespondTo::NAMES) {
            assert_eq!((m.as_str(), RespondTo::parse(n)), (n, Ok(*m)));
        }
    }

    #[test]
    fn allowlist_rules() {
        let a = "a".repeat(64);
        assert_eq!(
            validate_allowlist(RespondTo::Allowlist, &[]),
            Err(GateError::EmptyAllowlist)
        );
        assert_eq!(validate_allowlist(RespondTo::Anyone, &[]), Ok(vec![]));
        assert_eq!(
            validate_allowlist(RespondTo::Allowlist, &["xyz".into()]),
            Err(GateError::Entry(0))
        );
        assert_eq!(
            validate_allowlist(RespondTo::Allowlist, &[a.to_uppercase()]),
            Ok(vec![a.clone()])
        );
        assert_eq!(split_allowlist(&format!(" {a}, ,{a}")), vec![a.clone(), a]);
    }

    #[test]
    fn gate_matrix() {
        let (o, x, y) = ("o".repeat(64), "x".repeat(64), "y".repeat(64));
        let list = vec![x.clone()];
        assert!(allows(RespondTo::OwnerOnly, Some(&o), &list, &o));
        assert!(!allows(RespondTo::OwnerOnly, Some(&o), &list, &x));
        assert!(allows(RespondTo::Allowlist, Some(&o), &list, &x));
        assert!(
            allows(RespondTo::Allowlist, Some(&o), &list, &o),
            "owner is always allowed"
        );
        assert!(!allows(RespondTo::Allowlist, Some(&o), &list, &y));
        assert!(allows(RespondTo::Anyone, None, &[], &y));
        assert!(!allows(RespondTo::Nobody, Some(&o), &list, &o));
        assert!(
            !allows(RespondTo::OwnerOnly, None, &[], &o),
            "no owner: nobody is the owner"
        );
    }
}

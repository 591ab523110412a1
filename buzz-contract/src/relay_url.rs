//! The relay URL rule every front end applies (issue 24 item 3 "validate at
//! create and edit, with the same rules the harness, the provider and the
//! page apply"; spec §Launch data `relay_url`, wire-facts §5
//! `BUZZ_RELAY_URL`). Pure: text in, the URL to store or one error out.
//!
//! The rule, the harness's own (`buzz-acp` refuses at start anything that is
//! not `ws://` or `wss://` and a [`nostr::RelayUrl`]), checked where the URL
//! is typed so that a mistake is named at `agent create`/`agent edit` and on
//! the Start page instead of at start:
//!
//! - trimmed; empty is refused (the caller decides whether "absent" means
//!   the embedded relay: `agent create` without `--relay`);
//! - the scheme is `ws` or `wss` (any case; stored lower case, as the
//!   harness compares it): `http://`, `https://` and a URL without a scheme
//!   are refused with the scheme to use. `ws://` is allowed for any host, as
//!   the harness and the provider allow it (a LAN relay without TLS);
//! - no user info (`wss://user:pass@host`): the relay admits agents by
//!   their key (NIP-42), and a password in a URL would be printed by
//!   `agent list` and stored in the record;
//! - no spaces or control characters; exactly one `://`; a host.
//!
//! Errors never quote the URL: it may hold a password.

use nostr::{RelayUrl, Url};

/// Why a relay URL was refused (never quotes the URL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayUrlError {
    #[error(
        "the relay URL is empty; give it as wss://HOST[:PORT] (or ws://HOST:PORT for a relay without TLS)"
    )]
    Empty,
    #[error("the relay URL contains spaces or control characters; give it as wss://HOST[:PORT]")]
    Whitespace,
    #[error(
        "the relay URL has no scheme; write it as wss://HOST[:PORT] (or ws://HOST:PORT for a relay without TLS)"
    )]
    NoScheme,
    #[error("a relay speaks WebSocket, not {scheme}://; write the URL with {fix}")]
    Scheme {
        /// The scheme as typed (at most 16 characters, else `that scheme`).
        scheme: String,
        /// The scheme to use instead.
        fix: &'static str,
    },
    #[error(
        "the relay URL carries credentials (user:password@); remove them: the relay admits agents by their key (NIP-42), and a password in a URL would be printed and stored"
    )]
    Credentials,
    #[error("the relay URL is not a valid URL ({0}); write it as wss://HOST[:PORT]")]
    Malformed(String),
}

/// Checks a relay URL as typed; returns the URL to store (trimmed, the
/// scheme in lower case).
pub fn check(raw: &str) -> Result<String, RelayUrlError> {
    let url = raw.trim();
    if url.is_empty() {
        return Err(RelayUrlError::Empty);
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RelayUrlError::Whitespace);
    }
    // `host:port` parses as a URL whose scheme is the host: look for `://`.
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(RelayUrlError::NoScheme);
    };
    let lower = scheme.to_ascii_lowercase();
    let stored = format!("{lower}://{rest}");
    let parsed = Url::parse(&stored).map_err(|e| RelayUrlError::Malformed(e.to_string()))?;
    // Checked before the scheme: `http://user:pass@…` is refused for its
    // credentials too, and the scheme error would not say so.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(RelayUrlError::Credentials);
    }
    if lower != "ws" && lower != "wss" {
        let fix = if lower == "http" {
            "ws:// (or wss:// for a relay behind TLS)"
        } else {
            "wss:// (or ws:// for a relay without TLS)"
        };
        let scheme = if scheme.chars().count() <= 16 {
            scheme.to_string()
        } else {
            "that scheme".to_string()
        };
        return Err(RelayUrlError::Scheme { scheme, fix });
    }
    RelayUrl::parse(&stored).map_err(|e| RelayUrlError::Malformed(e.to_string()))?;
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_urls_pass_trimmed_with_a_lower_case_scheme() {
        for (raw, want) in [
            ("wss://relay.example.com", "wss://relay.example.com"),
            ("  ws://127.0.0.1:4711 ", "ws://127.0.0.1:4711"),
            ("WSS://relay.example.com/path", "wss://relay.example.com/path"),
            ("ws://10.0.0.7:7777", "ws://10.0.0.7:7777"),
            ("ws://[::1]:1", "ws://[::1]:1"),
        ] {
            assert_eq!(check(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn every_refusal_names_the_fix_and_never_the_url() {
        let cases = [
            ("", RelayUrlError::Empty),
            ("   ", RelayUrlError::Empty),
            ("relay.example.com", RelayUrlError::NoScheme),
            ("localhost:7777", RelayUrlError::NoScheme),
            ("wss://a b", RelayUrlError::Whitespace),
            (
                "http://relay.example.com",
                RelayUrlError::Scheme {
                    scheme: "http".into(),
                    fix: "ws:// (or wss:// for a relay behind TLS)",
                },
            ),
            (
                "https://relay.example.com",
                RelayUrlError::Scheme {
                    scheme: "https".into(),
                    fix: "wss:// (or ws:// for a relay without TLS)",
                },
            ),
            (
                "wss://user:pw-canary@relay.example.com",
                RelayUrlError::Credentials,
            ),
            ("ws://token-canary@127.0.0.1:1", RelayUrlError::Credentials),
            ("http://u:pw-canary@relay", RelayUrlError::Credentials),
        ];
        for (raw, want) in cases {
            let got = check(raw).unwrap_err();
            assert_eq!(got, want, "{raw:?}");
            let shown = got.to_string();
            assert!(!shown.contains("canary") && !shown.contains("example"), "{shown}");
            assert!(
                shown.contains("wss://") || shown.contains("remove them"),
                "{shown}"
            );
        }
        assert!(matches!(check("wss://"), Err(RelayUrlError::Malformed(_))));
        assert!(matches!(
            check("wss://a/wss://b"),
            Err(RelayUrlError::Malformed(_))
        ));
        assert!(matches!(check("ws://a:99999"), Err(RelayUrlError::Malformed(_))));
        let long = format!("{}://x", "s".repeat(40));
        assert!(
            check(&long)
                .unwrap_err()
                .to_string()
                .contains("not that scheme://")
        );
    }
}

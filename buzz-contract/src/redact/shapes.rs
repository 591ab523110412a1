//! Secrets recognised by their shape, whoever's they are (issue 24 item 4
//! "the launcher redacts what a provider returns, with URL user info, bearer
//! tokens and anything that looks like a key added to its patterns"; spec
//! §Provider Output Is Untrusted). The literal pass of [`super::Literals`]
//! only knows the values the caller sent; a provider also holds secrets of
//! its own (a kubeconfig's token, a cloud key) that it may quote in an error.
//!
//! Shapes, each replaced by [`REDACTED`] (the words around it are kept, so
//! the message still says what failed):
//!
//! - a PEM private key block (`-----BEGIN … PRIVATE KEY-----` to its end);
//! - URL user info: `wss://user:pass@host` → `wss://[REDACTED]@host`;
//! - the value of an `Authorization:` header, and a `Bearer` token (at
//!   least 8 characters, not a plain lower-case word: "a bearer token was
//!   refused" stays prose);
//! - the value of a secret-named key (`token: …`, `"password": "…"`,
//!   `client-key-data: …`, `API_KEY=…`; at least 4 characters, as the
//!   literal pass): how YAML, JSON and env text quote a secret;
//! - well-known API key formats (`sk-…`, `ghp_…`, `github_pat_…`,
//!   `glpat-…`, `xoxb-…`, `AIza…`, `AKIA…`, `hf_…`) and JSON Web Tokens
//!   (`eyJ….….…`, the shape of a Kubernetes ServiceAccount token).
//!
//! **Decision:** a bare run of 64 hex digits is not a shape: public keys
//! (agent pubkeys, owner keys) are 64 hex and are printed on purpose; a
//! private key in hex is scrubbed by the literal pass, which knows it.
//!
//! Every match starts and ends at an ASCII byte or the text's end, so the
//! replacement never splits a UTF-8 character.

use super::REDACTED;
use std::ops::Range;

/// Replaces every secret shape of `text` (see the module doc).
pub fn scrub_shapes(text: &str) -> String {
    let mut found = Vec::new();
    pem_blocks(text, &mut found);
    url_userinfo(text, &mut found);
    bearer_tokens(text, &mut found);
    secret_assignments(text, &mut found);
    key_formats(text, &mut found);
    replace(text, found)
}

/// Replaces only URL user info (`scheme://user:pass@` → `scheme://[REDACTED]@`):
/// for a URL printed as such (`agent list`, `agent show`).
pub fn scrub_url_userinfo(text: &str) -> String {
    let mut found = Vec::new();
    url_userinfo(text, &mut found);
    replace(text, found)
}

fn replace(text: &str, mut found: Vec<Range<usize>>) -> String {
    if found.is_empty() {
        return text.to_string();
    }
    found.sort_by_key(|r| (r.start, r.end));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut open = false;
    for r in found {
        // An overlap with (or a match right after) the previous one extends it: one marker.
        if open && r.start <= at {
            at = at.max(r.end);
            continue;
        }
        out.push_str(&text[at..r.start]);
        out.push_str(REDACTED);
        at = r.end;
        open = true;
    }
    out.push_str(&text[at..]);
    out
}

fn word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Characters of a token: base64, base64url, hex, JWT dots.
fn token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// Case-insensitive occurrences of the lower-case ASCII `needle` that start a word.
fn words<'a>(lower: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    (0..lower.len().saturating_sub(needle.len() - 1))
        .filter(move |&i| lower[i..].starts_with(needle) && (i == 0 || !word(lower[i - 1])))
}

fn span(bytes: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    bytes[from..]
        .iter()
        .position(|b| !ok(*b))
        .map_or(bytes.len(), |n| from + n)
}

fn pem_blocks(text: &str, found: &mut Vec<Range<usize>>) {
    let mut from = 0;
    while let Some(i) = text[from..].find("-----BEGIN ").map(|i| from + i) {
        let line_end = text[i..].find('\n').map_or(text.len(), |n| i + n);
        from = i + 1;
        if !text[i..line_end].contains("PRIVATE KEY-----") {
            continue;
        }
        let end = match text[line_end..].find("-----END ") {
            Some(n) => {
                let e = line_end + n + "-----END ".len();
                text[e..].find("-----").map_or(text.len(), |m| e + m + 5)
            }
            None => text.len(),
        };
        found.push(i..end);
        from = end;
    }
}

fn url_userinfo(text: &str, found: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(i) = text[from..].find("://").map(|i| from + i) {
        let start = i + 3;
        let end = span(b, start, |c| {
            !c.is_ascii_whitespace() && !b"/?#@\"'<>`".contains(&c)
        });
        if end > start && b.get(end) == Some(&b'@') {
            found.push(start..end);
        }
        from = start;
    }
}

/// A value that is a secret rather than a word of prose.
fn not_a_word(v: &[u8]) -> bool {
    !v.iter().all(u8::is_ascii_lowercase)
}

fn bearer_tokens(text: &str, found: &mut Vec<Range<usize>>) {
    let lower = text.to_ascii_lowercase();
    let b = text.as_bytes();
    for i in words(lower.as_bytes(), b"bearer") {
        let gap = span(b, i + 6, |c| c == b' ' || c == b'\t');
        if gap == i + 6 {
            continue;
        }
        let end = span(b, gap, token);
        if end - gap >= 8 && not_a_word(&b[gap..end]) {
            found.push(gap..end);
        }
    }
}

/// Key names (lower case) whose value is a secret, matched as a suffix.
const SECRET_KEYS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "api-key",
    "key-data",
    "private_key",
    "private-key",
    "access_key",
    "authorization",
    "nsec",
];

fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

fn secret_assignments(text: &str, found: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    for (p, &c) in b.iter().enumerate() {
        if c != b':' && c != b'=' {
            continue;
        }
        // `scheme://…` is a URL, `==` base64 padding.
        if b.get(p + 1).is_some_and(|n| *n == b'/' || *n == b'=') || (p > 0 && b[p - 1] == b'=') {
            continue;
        }
        let mut k = p;
        while k > 0 && b[k - 1] == b' ' {
            k -= 1;
        }
        if k > 0 && (b[k - 1] == b'"' || b[k - 1] == b'\'') {
            k -= 1;
        }
        let key_end = k;
        while k > 0 && key_char(b[k - 1]) {
            k -= 1;
        }
        let key = text[k..key_end].to_ascii_lowercase();
        if key.is_empty() || !SECRET_KEYS.iter().any(|s| key.ends_with(s)) {
            continue;
        }
        let mut v = span(b, p + 1, |c| c == b' ' || c == b'\t');
        let end = match b.get(v) {
            Some(q @ (b'"' | b'\'')) => {
                v += 1;
                let q = *q;
                span(b, v, |c| c != q && c != b'\n')
            }
            // An `Authorization:` value runs to the end of its line.
            _ if key.ends_with("authorization") => span(b, v, |c| c != b'\n' && c != b'\r' && c != b'"'),
            _ => span(b, v, |c| !c.is_ascii_whitespace() && !b",;)}]\"'<>`".contains(&c)),
        };
        let value = &text[v..end];
        if value.chars().count() >= super::MIN_LEN && !value.starts_with('[') {
            found.push(v..end);
        }
    }
}

/// Well-known key formats: prefix and the shortest body.
const KEY_FORMATS: &[(&str, usize)] = &[
    ("sk-", 20),
    ("ghp_", 20),
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("ghr_", 20),
    ("github_pat_", 20),
    ("glpat-", 20),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("AIza", 30),
    ("hf_", 30),
];

fn key_body(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn starts_token(b: &[u8], i: usize) -> bool {
    i == 0 || !(key_body(b[i - 1]) || b[i - 1] == b'.')
}

fn key_formats(text: &str, found: &mut Vec<Range<usize>>) {
    let b = text.as_bytes();
    for (prefix, min) in KEY_FORMATS {
        for (i, _) in text.match_indices(prefix) {
            if !starts_token(b, i) {
                continue;
            }
            let end = span(b, i + prefix.len(), key_body);
            if end - (i + prefix.len()) >= *min {
                found.push(i..end);
            }
        }
    }
    // AWS access key ids: AKIA and 16 upper-case letters or digits.
    for (i, _) in text.match_indices("AKIA") {
        let end = span(b, i + 4, |c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if starts_token(b, i) && end - (i + 4) >= 16 {
            found.push(i..end);
        }
    }
    // JSON Web Tokens: three base64url segments, the first a JSON object.
    for (i, _) in text.match_indices("eyJ") {
        if !starts_token(b, i) {
            continue;
        }
        let one = span(b, i, key_body);
        if one - i < 10 || b.get(one) != Some(&b'.') {
            continue;
        }
        let two = span(b, one + 1, key_body);
        if two - (one + 1) < 10 {
            continue;
        }
        let end = if b.get(two) == Some(&b'.') {
            span(b, two + 1, key_body)
        } else {
            two
        };
        found.push(i..end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_user_info_is_replaced_and_the_host_kept() {
        assert_eq!(
            scrub_shapes("cannot connect to wss://alice:pw-canary@relay.example.com/x: refused"),
            "cannot connect to wss://[REDACTED]@relay.example.com/x: refused"
        );
        assert_eq!(
            scrub_url_userinfo("ws://tok@127.0.0.1:1 and https://h/p?a=b@c"),
            "ws://[REDACTED]@127.0.0.1:1 and https://h/p?a=b@c"
        );
        assert_eq!(scrub_shapes("wss://relay.example.com"), "wss://relay.example.com");
        assert_eq!(scrub_shapes("mail git@host"), "mail git@host");
    }

    #[test]
    fn bearer_tokens_and_authorization_values_are_replaced_prose_is_kept() {
        assert_eq!(
            scrub_shapes("Authorization: Bearer abc123def456ghi\nnext"),
            "Authorization: [REDACTED]\nnext"
        );
        assert_eq!(
            scrub_shapes("got 401 for bearer Zm9vYmFyYmF6cXV4"),
            "got 401 for bearer [REDACTED]"
        );
        assert_eq!(
            scrub_shapes("the kubeconfig's bearer token was refused"),
            "the kubeconfig's bearer token was refused"
        );
    }

    #[test]
    fn secret_named_values_are_replaced_in_yaml_json_and_env_text() {
        let cases = [
            (
                "line 7:\n    token: kube-canary-0123\n    user: bob",
                "line 7:\n    token: [REDACTED]\n    user: bob",
            ),
            (
                r#"{"password":"pw canary 1","user":"bob"}"#,
                r#"{"password":"[REDACTED]","user":"bob"}"#,
            ),
            ("client-key-data: LS0tLS1CRUdJTg==", "client-key-data: [REDACTED]"),
            (
                "export OPENAI_API_KEY='abcd efgh'",
                "export OPENAI_API_KEY='[REDACTED]'",
            ),
            ("GITHUB_TOKEN=ghx-1234, next", "GITHUB_TOKEN=[REDACTED], next"),
        ];
        for (text, want) in cases {
            assert_eq!(scrub_shapes(text), want, "{text}");
        }
        // Too short to be a secret, a hint, a URL, a marker: kept.
        for kept in [
            "--env API_TOKEN=… would put a secret on the command line",
            "token: abc",
            "token: [REDACTED]",
            "see token://x",
            "users[0].user.token is not a string",
        ] {
            assert_eq!(scrub_shapes(kept), kept);
        }
    }

    #[test]
    fn key_formats_pem_blocks_and_jwts_are_replaced() {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLWNhbmFyeQ";
        assert_eq!(scrub_shapes(&format!("t {jwt} end")), "t [REDACTED] end");
        for key in [
            "sk-ant-api03-abcdefghijklmnopqrstu",
            "ghp_abcdefghijklmnopqrstuvwxyz",
            "AKIAABCDEFGHIJKLMNOP",
            "AIzaSyA-abcdefghijklmnopqrstuvwxyz012",
        ] {
            assert_eq!(scrub_shapes(&format!("key ({key})")), "key ([REDACTED])", "{key}");
        }
        // Inside another word, or too short: not a key.
        for kept in ["task-runner-abcdefghijklmnopqrstuv", "sk-short", "AKIA-doc"] {
            assert_eq!(scrub_shapes(kept), kept);
        }
        let pem = "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\ny";
        assert_eq!(scrub_shapes(pem), "x\n[REDACTED]\ny");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----";
        assert_eq!(scrub_shapes(cert), cert);
    }

    #[test]
    fn overlapping_shapes_give_one_marker_and_text_stays_valid_utf8() {
        assert_eq!(
            scrub_shapes("é Authorization: Bearer sk-abcdefghijklmnopqrstuvw é"),
            "é Authorization: [REDACTED]"
        );
        assert_eq!(scrub_shapes("token: ééééé x"), "token: [REDACTED] x");
        assert_eq!(scrub_shapes("sk-abcdefghijklmnopqrstuvw"), "[REDACTED]");
    }
}

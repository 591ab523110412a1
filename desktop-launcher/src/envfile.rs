//! The `KEY=VALUE` format of `--env-file FILE` and `--env-stdin`: how secret
//! env values reach the launcher without ever being on a command line
//! (spec §Launch data "layered env", I2 "never rendered"; DESIGN.md
//! Decision 4). Pure: text in, changes or one error out.
//!
//! The format (strict, the same shape `scripts/launch-harness.sh` reads):
//! - one `KEY=VALUE` per line; a trailing `\r` and the whitespace around a
//!   line are dropped; blank lines and lines starting with `#` are skipped;
//! - an optional `export ` prefix is accepted, so a file can also be sourced
//!   by a shell;
//! - the key is a POSIX name (`[A-Za-z_][A-Za-z0-9_]*`) and not a key the
//!   launcher sets itself (reserved, host-resolved): such a value could never
//!   reach the agent, so it is refused instead of stored and then stripped;
//! - the value is everything after the first `=`. **Quotes policy:** one
//!   pair of matching quotes around the whole value (`'…'` or `"…"`) is
//!   removed and nothing inside is interpreted — no escapes, no `$`
//!   expansion, no inline comments (`K=a # b` is the value `a # b`). A value
//!   that opens a quote and does not close it is an error, not a literal;
//! - an empty value (`KEY=`, `KEY=""`) removes the key, as `--env KEY=` does;
//! - a key given twice is an error (which one was meant?).
//!
//! Errors name the line number and, where it is a name the launcher knows,
//! the key; never the line or the value (a secret typed without its key, or
//! with the `=` forgotten, must not be echoed).

use buzz_contract::env::{self as names, UserKeyError};
use std::collections::BTreeMap;

/// What an env file asks for: key → `Some(value)` to set, `None` to remove.
pub type EnvChanges = BTreeMap<String, Option<String>>;

/// Why one line of an env file was refused (never carries the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvFileError {
    #[error("env file line {0} is not KEY=VALUE (the line is not shown: it may hold a secret)")]
    NotKeyValue(usize),
    #[error(
        "env file line {0}: the key is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*) (the key is not shown: it may hold a secret)"
    )]
    BadKey(usize),
    #[error(
        "env file line {line}: {key} is set by the launcher itself ({why}) and would never reach the agent; remove the line"
    )]
    LauncherKey {
        line: usize,
        key: String,
        why: &'static str,
    },
    #[error("env file line {line}: the value of {key} opens a quote it does not close")]
    UnclosedQuote { line: usize, key: String },
    #[error("env file line {line}: {key} is already set on line {first}")]
    Duplicate { line: usize, key: String, first: usize },
    #[error("the env file is not UTF-8 text")]
    NotText,
}

/// Removes one pair of matching quotes around the whole value; `None` when
/// a quote is opened and not closed.
fn unquote(v: &str) -> Option<&str> {
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            return rest.strip_suffix(q);
        }
    }
    Some(v)
}

/// The key rule of every env channel (an env file, `--env`, the page):
/// [`names::check_user_key`], and a key shaped like a private key is not a
/// name ([`crate::shown::secret_shaped`]: it is a key pasted in the wrong place).
pub fn check_key(key: &str) -> Result<(), UserKeyError> {
    if crate::shown::secret_shaped(key) {
        return Err(UserKeyError::NotPosix);
    }
    names::check_user_key(key)
}

/// Parses an env file (see the module doc for the format).
pub fn parse(text: &str) -> Result<EnvChanges, EnvFileError> {
    let mut out = EnvChanges::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line_no = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((key, value)) = line.split_once('=') else {
            return Err(EnvFileError::NotKeyValue(line_no));
        };
        let key = key.trim_end();
        let launcher_key = |why| EnvFileError::LauncherKey {
            line: line_no,
            key: key.to_string(),
            why,
        };
        match check_key(key) {
            Ok(()) => {}
            Err(UserKeyError::Empty | UserKeyError::NotPosix) => return Err(EnvFileError::BadKey(line_no)),
            Err(UserKeyError::Reserved(_)) => return Err(launcher_key("reserved")),
            Err(UserKeyError::HostResolved(_)) => return Err(launcher_key("host-resolved")),
        }
        if let Some(first) = first_line.get(key) {
            return Err(EnvFileError::Duplicate {
                line: line_no,
                key: key.to_string(),
                first: *first,
            });
        }
        let value = unquote(value.trim_start()).ok_or_else(|| EnvFileError::UnclosedQuote {
            line: line_no,
            key: key.to_string(),
        })?;
        first_line.insert(key.to_string(), line_no);
        out.insert(key.to_string(), (!value.is_empty()).then(|| value.to_string()));
    }
    Ok(out)
}

/// Parses env-file bytes (a file or stdin): UTF-8 text, then [`parse`].
pub fn parse_bytes(bytes: &[u8]) -> Result<EnvChanges, EnvFileError> {
    parse(std::str::from_utf8(bytes).map_err(|_| EnvFileError::NotText)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "sk-canary-0123456789abcdef";

    fn set(pairs: &[(&str, Option<&str>)]) -> EnvChanges {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
            .collect()
    }

    #[test]
    fn comments_blank_lines_crlf_and_export_are_accepted() {
        let text = format!(
            "# the agent's keys\n\n  ANTHROPIC_API_KEY={CANARY}\r\nexport OPENAI_BASE_URL=http://127.0.0.1:9/v1\n   # indented comment\nGONE=\n"
        );
        assert_eq!(
            parse(&text).unwrap(),
            set(&[
                ("ANTHROPIC_API_KEY", Some(CANARY)),
                ("GONE", None),
                ("OPENAI_BASE_URL", Some("http://127.0.0.1:9/v1")),
            ])
        );
        assert_eq!(parse("").unwrap(), EnvChanges::new());
    }

    #[test]
    fn quotes_policy_one_matching_pair_removed_nothing_interpreted() {
        let got = parse(concat!(
            "A=\"two words\"\n",
            "B='$HOME \\n'\n",
            "C=a=b\n",
            "D=x # not a comment\n",
            "E=it's\n",
            "F=\"\"\n",
            "G='\"'\n",
        ))
        .unwrap();
        assert_eq!(
            got,
            set(&[
                ("A", Some("two words")),
                ("B", Some("$HOME \\n")),
                ("C", Some("a=b")),
                ("D", Some("x # not a comment")),
                ("E", Some("it's")),
                ("F", None),
                ("G", Some("\"")),
            ])
        );
        for bad in ["K=\"open", "K='open", "K=\"", "K='mixed\""] {
            assert_eq!(
                parse(bad),
                Err(EnvFileError::UnclosedQuote {
                    line: 1,
                    key: "K".into()
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bad_line_names_its_number_and_never_the_value() {
        let cases: Vec<(String, EnvFileError)> = vec![
            (format!("# c\nOK=1\n{CANARY}\n"), EnvFileError::NotKeyValue(3)),
            (format!("\n\n1BAD={CANARY}"), EnvFileError::BadKey(3)),
            (format!("MY KEY={CANARY}"), EnvFileError::BadKey(1)),
            (format!("{}={CANARY}", "a".repeat(64)), EnvFileError::BadKey(1)),
            (
                format!("X=1\nBUZZ_PRIVATE_KEY={CANARY}"),
                EnvFileError::LauncherKey {
                    line: 2,
                    key: "BUZZ_PRIVATE_KEY".into(),
                    why: "reserved",
                },
            ),
            (
                "PATH=/opt/bin".into(),
                EnvFileError::LauncherKey {
                    line: 1,
                    key: "PATH".into(),
                    why: "host-resolved",
                },
            ),
            (
                format!("K=1\n\nK={CANARY}"),
                EnvFileError::Duplicate {
                    line: 3,
                    key: "K".into(),
                    first: 1,
                },
            ),
        ];
        for (text, want) in cases {
            let got = parse(&text).unwrap_err();
            assert_eq!(got, want, "{text:?}");
            let shown = got.to_string();
            assert!(!shown.contains("canary"), "{shown}");
            assert!(!shown.contains(&"a".repeat(20)), "{shown}");
        }
        assert_eq!(parse_bytes(b"K=\xff"), Err(EnvFileError::NotText));
    }
}

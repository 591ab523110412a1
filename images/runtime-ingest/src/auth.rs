//! The read API's bearer token (review afa2bf1 finding 5; collector-design.md §10;
//! runtime-agent-backend-contract.md §7 "Org-level API keys … never enter clusters",
//! §8 "nothing crosses org boundaries in any view, export, or API").
//!
//! The ingest's one listener is reached by every collector, so by every agent pod and
//! anything running in one. The collectors only `POST`; the read API
//! (`GET /v1/read/usage`, [`crate::read`]) is for the owner's launcher, so it answers
//! only the bearer of a token the collectors never get:
//!
//! - **Where it comes from.** `serve --read-api` requires `--read-token-file PATH`
//!   (or `RUNTIME_INGEST_READ_TOKEN_FILE`): a regular file that only its owner may
//!   read or write (mode 0600 or 0400; a Kubernetes Secret volume with
//!   `defaultMode: 0400`), holding one token of at least [`MIN_LEN`] visible ASCII
//!   characters; surrounding whitespace (the newline `echo` adds) is dropped. Any
//!   other file is refused at start with what to change ([`TokenError`]).
//! - **How it is checked.** `Authorization: Bearer <token>` (the scheme in any case,
//!   RFC 7235 §2.1; RFC 6750 §2.1), exactly one such header. Both tokens are hashed
//!   with SHA-256 and the digests compared in constant time ([`ReadToken::admits`]),
//!   so neither the time taken nor an early exit tells how much of a guess was right,
//!   nor how long the token is.
//! - **Never written out.** Only the digest is kept; [`ReadToken`]'s `Debug` prints
//!   nothing of it, and no error or log line holds the token, the presented value or
//!   the file's contents (`tests/read_token.rs` looks for canaries).

use std::path::Path;

use hyper::header::HeaderValue;
use sha2::{Digest, Sha256};

/// The shortest token accepted (`openssl rand -hex 32` makes 64 characters).
pub const MIN_LEN: usize = 32;
/// The longest token accepted.
pub const MAX_LEN: usize = 1024;
/// The largest token file read.
pub const FILE_CAP: u64 = 4096;

/// The read API's token, kept as its SHA-256 digest only.
#[derive(Clone)]
pub struct ReadToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for ReadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadToken(<withheld>)")
    }
}

/// Two tokens are equal when their digests are (compared in constant time).
impl PartialEq for ReadToken {
    fn eq(&self, other: &Self) -> bool {
        same(&self.digest, &other.digest)
    }
}

impl Eq for ReadToken {}

/// Why a token or its file is refused. No variant carries the token or any part of
/// the file's contents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the read token file {path}: {why}")]
    Unreadable { path: String, why: String },
    #[error("the read token file {path} is not a regular file")]
    NotAFile { path: String },
    #[error(
        "the read token file {path} has mode {mode:04o}, so others may read or change it: \
         make it its owner's only (chmod 600 {path}; for a Kubernetes Secret volume, defaultMode: 0400)"
    )]
    TooOpen { path: String, mode: u32 },
    #[error("the read token file {path} is over {FILE_CAP} bytes: it holds one token")]
    FileTooLarge { path: String },
    #[error(
        "the read token{at} is {len} characters: at least {MIN_LEN} are needed \
         (make one with `umask 077; openssl rand -hex 32 > FILE`)"
    )]
    TooShort { at: String, len: usize },
    #[error("the read token{at} is over {MAX_LEN} characters")]
    TooLong { at: String },
    #[error(
        "the read token{at} holds a character other than visible ASCII \
         (no space or control character inside it; `openssl rand -hex 32` makes one that fits)"
    )]
    BadCharacter { at: String },
}

/// Why a request is not admitted (for the log line; never with what it sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// More than one `Authorization` header.
    Several,
    /// A scheme other than `Bearer`, or no token after it.
    NotBearer,
    /// A bearer token that is not the read token.
    Wrong,
}

impl Refusal {
    /// What the log line says.
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::Missing => "no Authorization header",
            Refusal::Several => "more than one Authorization header",
            Refusal::NotBearer => "an Authorization header that is not a bearer token",
            Refusal::Wrong => "a bearer token that is not the read token",
        }
    }
}

impl ReadToken {
    /// The token `text` (surrounding whitespace dropped), or why it is refused.
    pub fn new(text: &str) -> Result<Self, TokenError> {
        Self::checked(text, String::new())
    }

    fn checked(text: &str, at: String) -> Result<Self, TokenError> {
        let token = text.trim_matches(|c: char| c.is_ascii_whitespace());
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::BadCharacter { at });
        }
        if token.len() < MIN_LEN {
            return Err(TokenError::TooShort { at, len: token.len() });
        }
        if token.len() > MAX_LEN {
            return Err(TokenError::TooLong { at });
        }
        Ok(Self {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// The token in the file at `path` (see the module doc for what is accepted).
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        use std::io::Read;
        let shown = path.display().to_string();
        let unreadable = |e: std::io::Error| TokenError::Unreadable {
            path: shown.clone(),
            why: e.kind().to_string(),
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(TokenError::NotAFile { path: shown });
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(TokenError::TooOpen { path: shown, mode });
            }
        }
        let mut bytes = Vec::new();
        file.take(FILE_CAP + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > FILE_CAP {
            return Err(TokenError::FileTooLarge { path: shown });
        }
        let at = format!(" in {shown}");
        let text = std::str::from_utf8(&bytes).map_err(|_| TokenError::BadCharacter { at: at.clone() })?;
        Self::checked(text, at)
    }

    /// Whether the `Authorization` headers of a request carry this token.
    pub fn admits<'a>(
        &self,
        mut authorization: impl Iterator<Item = &'a HeaderValue>,
    ) -> Result<(), Refusal> {
        let value = authorization.next().ok_or(Refusal::Missing)?;
        if authorization.next().is_some() {
            return Err(Refusal::Several);
        }
        let value = value.as_bytes();
        let split = value.iter().position(|b| *b == b' ').ok_or(Refusal::NotBearer)?;
        let (scheme, rest) = value.split_at(split);
        let presented = rest.trim_ascii();
        if !scheme.eq_ignore_ascii_case(b"bearer") || presented.is_empty() {
            return Err(Refusal::NotBearer);
        }
        let digest: [u8; 32] = Sha256::digest(presented).into();
        if same(&digest, &self.digest) {
            Ok(())
        } else {
            Err(Refusal::Wrong)
        }
    }
}

/// `a == b` in time independent of where they differ: every byte is compared, and
/// the differences are folded without a branch on them.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef-canary";

    fn header(v: &str) -> HeaderValue {
        HeaderValue::from_str(v).unwrap()
    }

    fn file(dir: &Path, name: &str, text: &[u8], mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .unwrap();
        f.write_all(text).unwrap();
        path
    }

    #[test]
    fn only_the_bearer_of_the_token_is_admitted() {
        let t = ReadToken::new(TOKEN).unwrap();
        let ok = |v: &str| t.admits([header(v)].iter());
        assert_eq!(ok(&format!("Bearer {TOKEN}")), Ok(()));
        assert_eq!(ok(&format!("bearer {TOKEN}")), Ok(()));
        assert_eq!(ok(&format!("BEARER   {TOKEN} ")), Ok(()));
        assert_eq!(ok(&format!("Bearer {TOKEN}x")), Err(Refusal::Wrong));
        assert_eq!(ok(&format!("Bearer {}", &TOKEN[1..])), Err(Refusal::Wrong));
        assert_eq!(ok(&format!("Basic {TOKEN}")), Err(Refusal::NotBearer));
        assert_eq!(ok(&format!("Bearer{TOKEN}")), Err(Refusal::NotBearer));
        assert_eq!(ok("Bearer "), Err(Refusal::NotBearer));
        assert_eq!(ok(TOKEN), Err(Refusal::NotBearer));
        assert_eq!(t.admits(std::iter::empty()), Err(Refusal::Missing));
        let two = [
            header(&format!("Bearer {TOKEN}")),
            header(&format!("Bearer {TOKEN}")),
        ];
        assert_eq!(t.admits(two.iter()), Err(Refusal::Several));
    }

    #[test]
    fn a_token_is_visible_ascii_of_a_useful_length() {
        assert!(ReadToken::new(&format!("\n {TOKEN}\r\n")).is_ok());
        assert_eq!(
            ReadToken::new("short"),
            Err(TokenError::TooShort {
                at: String::new(),
                len: 5
            })
        );
        assert!(matches!(
            ReadToken::new(&format!("{TOKEN} {TOKEN}")),
            Err(TokenError::BadCharacter { .. })
        ));
        assert!(matches!(
            ReadToken::new(&format!("{TOKEN}\u{e9}")),
            Err(TokenError::BadCharacter { .. })
        ));
        assert!(matches!(
            ReadToken::new(&"a".repeat(MAX_LEN + 1)),
            Err(TokenError::TooLong { .. })
        ));
        assert_eq!(ReadToken::new(TOKEN), ReadToken::new(&format!("{TOKEN}\n")));
        assert_ne!(
            ReadToken::new(TOKEN).unwrap(),
            ReadToken::new(&format!("{TOKEN}x")).unwrap()
        );
    }

    #[test]
    fn the_file_is_its_owner_s_only_and_nothing_of_it_is_ever_printed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = file(d, "good", format!("{TOKEN}\n").as_bytes(), 0o600);
        let t = ReadToken::from_file(&good).unwrap();
        assert_eq!(t, ReadToken::new(TOKEN).unwrap());
        assert!(ReadToken::from_file(&file(d, "ro", TOKEN.as_bytes(), 0o400)).is_ok());
        assert!(!format!("{t:?}").contains("canary"), "{t:?}");

        let mut said = vec![format!("{t:?}")];
        for (name, text, mode) in [
            ("group", TOKEN.as_bytes().to_vec(), 0o640),
            ("world", TOKEN.as_bytes().to_vec(), 0o604),
            ("short", b"canary".to_vec(), 0o600),
            ("binary", [TOKEN.as_bytes(), &[0xff]].concat(), 0o600),
            (
                "large",
                [TOKEN.as_bytes(), &[b' '; FILE_CAP as usize]].concat(),
                0o600,
            ),
        ] {
            let e = ReadToken::from_file(&file(d, name, &text, mode)).unwrap_err();
            said.push(e.to_string());
        }
        let e = ReadToken::from_file(&d.join("missing")).unwrap_err();
        assert!(matches!(e, TokenError::Unreadable { .. }), "{e}");
        said.push(e.to_string());
        assert!(matches!(
            ReadToken::from_file(d),
            Err(TokenError::NotAFile { .. })
        ));
        assert!(
            said[1].contains("chmod 600") && said[1].contains("0640"),
            "{}",
            said[1]
        );
        assert!(said[3].contains("at least 32"), "{}", said[3]);
        for s in &said {
            assert!(!s.contains("canary") && !s.contains("0123456789abcdef"), "{s}");
        }
    }

    #[test]
    fn the_comparison_looks_at_every_byte() {
        let a = [7u8; 32];
        for i in 0..32 {
            let mut b = a;
            b[i] ^= 1;
            assert!(!same(&a, &b), "a difference at byte {i} is seen");
        }
        assert!(same(&a, &a));
    }
}

//! What the collector measured of a provider agent's pod (issue 34 item 2,
//! "where a collector ingest is configured"): CPU and memory per hour and
//! the OOM kills, as the reference ingest's `GET /v1/read/usage` answers
//! (`images/runtime-ingest/src/read.rs`): the answer's bytes in, figures
//! and lines out; [`crate::app::usage::measured`] fetches it.
//!
//! - **Where it is read.** `BUZZ_TELEMETRY_READ_URL` when set, else the
//!   agent's own `provider_config.telemetry_url` ([`read_base`]): the URL
//!   the collector ships to is often an in-cluster address, so an owner
//!   reaches it through a port-forward and says so once.
//! - **Which pod.** The agent's `agent_id` (its pod name; the Kubernetes
//!   binding names the pod after the agent's key, so every pod it ever had
//!   shares it) in its `provider_config.namespace`.
//! - **With the ingest's read token.** The read API answers only the bearer
//!   of the token the ingest was started with (`runtime-ingest serve
//!   --read-api --read-token-file FILE`; review afa2bf1 finding 5: every
//!   agent pod reaches that listener). `BUZZ_TELEMETRY_READ_TOKEN_FILE` names
//!   the same kind of file here ([`read_token`]: its owner's only, one token
//!   of visible ASCII), sent as `Authorization: Bearer …` only over https://
//!   or to a loopback address such as a port-forward
//!   ([`token_may_go_to`]), never printed ([`ReadToken`]'s `Debug` withholds
//!   it; no error holds it). A 401 says whether a token was sent.
//! - **Not trusted for order** (review afa2bf1 finding 9): [`parse`] puts
//!   the windows and the kills oldest first.
//! - **Nothing invented.** A window nothing covered has no cores, one with
//!   no memory sample no MiB; the line says "not measured", never 0.
//!
//! Pure but for [`read_token`], which reads the token file.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The env var that overrides where the collector ingest is read.
pub const READ_URL_ENV: &str = "BUZZ_TELEMETRY_READ_URL";
/// The env var naming the file that holds the ingest's read token.
pub const READ_TOKEN_ENV: &str = "BUZZ_TELEMETRY_READ_TOKEN_FILE";
/// The ingest's read route.
pub const READ_PATH: &str = "/v1/read/usage";
/// The largest token file read.
pub const TOKEN_FILE_CAP: u64 = 4096;
/// The most bytes of an answer read.
pub const ANSWER_CAP: usize = 1 << 20;

/// One hour window of the agent's pod.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Unix seconds.
    pub window_start: u64,
    /// Average cores over the time the collector covered.
    pub cores: Option<f64>,
    /// The largest working set sampled, MiB.
    pub max_mib: Option<f64>,
}

/// One OOM kill the collector saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKill {
    /// RFC 3339.
    pub observed_at: String,
    /// The same instant in Unix seconds, as the ingest read it.
    #[serde(default)]
    pub observed_unix: Option<u64>,
    pub container: String,
    pub memory_limit_bytes: Option<u64>,
    pub oom_kill_total: u64,
}

/// The ingest's answer for one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub windows: Vec<Window>,
    #[serde(default)]
    pub windows_omitted: usize,
    pub oom_kills: Vec<OomKill>,
    #[serde(default)]
    pub oom_kills_omitted: usize,
}

/// Why nothing measured can be shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotMeasured {
    #[error("no collector ingest: the agent has no telemetry_url and {READ_URL_ENV} is unset")]
    NoIngest,
    #[error("not deployed: no pod to read the collector's figures of")]
    NoPod,
    #[error("its provider_config names no namespace")]
    NoNamespace,
    #[error("the collector ingest URL is not http:// or https://")]
    BadUrl,
    #[error("the collector ingest at {0} could not be read: {1}")]
    Unreachable(String, String),
    #[error("the collector ingest at {0} answered HTTP {1} (is it run with --read-api?)")]
    Status(String, u16),
    #[error(
        "the collector ingest at {0} answered HTTP 401: its read API needs its read token; \
         set {READ_TOKEN_ENV} to a file holding it (the ingest's --read-token-file)"
    )]
    NoToken(String),
    #[error(
        "the collector ingest at {0} refused the read token (HTTP 401): the file {READ_TOKEN_ENV} \
         names does not hold the token of the ingest's --read-token-file"
    )]
    WrongToken(String),
    #[error("{READ_TOKEN_ENV}: {0}")]
    Token(String),
    #[error(
        "the read token goes only over https:// or to a loopback address (a port-forward), \
         not to {0}"
    )]
    TokenInClear(String),
    #[error("the collector ingest's answer is not a usage read: {0}")]
    Malformed(String),
}

/// The base the ingest is read at: `env` (the value of [`READ_URL_ENV`])
/// when set, else the agent's `telemetry_url`; scheme and authority only.
pub fn read_base(env: Option<&str>, telemetry_url: Option<&str>) -> Result<String, NotMeasured> {
    let url = env
        .filter(|v| !v.trim().is_empty())
        .or(telemetry_url)
        .ok_or(NotMeasured::NoIngest)?
        .trim();
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or(NotMeasured::BadUrl)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(NotMeasured::BadUrl);
    }
    let scheme = &url[..url.len() - rest.len()];
    Ok(format!("{scheme}{authority}"))
}

/// The ingest's read token: sent, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct ReadToken(String);

impl std::fmt::Debug for ReadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadToken(<withheld>)")
    }
}

impl ReadToken {
    /// The token `text` holds (surrounding whitespace dropped): one token of
    /// visible ASCII. The error names `source`, never any of `text`.
    pub fn parse(text: &[u8], source: &str) -> Result<Self, NotMeasured> {
        let token = text.trim_ascii();
        if token.is_empty() {
            return Err(NotMeasured::Token(format!("{source} holds no token")));
        }
        if !token.iter().all(u8::is_ascii_graphic) {
            return Err(NotMeasured::Token(format!(
                "the token in {source} holds a character other than visible ASCII (one token, no spaces)"
            )));
        }
        Ok(Self(String::from_utf8_lossy(token).into_owned()))
    }

    /// `Authorization: Bearer …`, marked sensitive (kept out of any header
    /// dump).
    pub fn authorization(&self) -> hyper::header::HeaderValue {
        let mut v = hyper::header::HeaderValue::from_str(&format!("Bearer {}", self.0))
            .expect("visible ASCII is a header value");
        v.set_sensitive(true);
        v
    }
}

/// The token in the file at `path`: a regular file only its owner may read
/// or write (mode 0600 or 0400, as the ingest requires of its own), at most
/// [`TOKEN_FILE_CAP`] bytes, holding one token.
pub fn read_token(path: &Path) -> Result<ReadToken, NotMeasured> {
    use std::io::Read;
    let shown = path.display().to_string();
    let unreadable = |e: std::io::Error| NotMeasured::Token(format!("cannot read {shown}: {}", e.kind()));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(NotMeasured::Token(format!("{shown} is not a regular file")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(NotMeasured::Token(format!(
                "{shown} has mode {mode:04o}, so others may read or change it: chmod 600 {shown}"
            )));
        }
    }
    let mut bytes = Vec::new();
    file.take(TOKEN_FILE_CAP + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > TOKEN_FILE_CAP {
        return Err(NotMeasured::Token(format!(
            "{shown} is over {TOKEN_FILE_CAP} bytes: it holds one token"
        )));
    }
    ReadToken::parse(&bytes, &shown)
}

/// Whether the read token may be sent to `base` ([`read_base`]'s scheme and
/// authority): over https://, or over http:// to a loopback address only.
pub fn token_may_go_to(base: &str) -> bool {
    if base.starts_with("https://") {
        return true;
    }
    let Some(authority) = base.strip_prefix("http://") else {
        return false;
    };
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The read URL of pod `pod` in `namespace` at `base`; both names must be
/// Kubernetes names (nothing to escape, nothing to inject).
pub fn read_url(base: &str, namespace: &str, pod: &str) -> Result<String, NotMeasured> {
    let name = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    if !name(namespace) {
        return Err(NotMeasured::NoNamespace);
    }
    if !name(pod) {
        return Err(NotMeasured::NoPod);
    }
    Ok(format!("{base}{READ_PATH}?namespace={namespace}&pod={pod}"))
}

/// Parses the ingest's answer, its windows and OOM kills put oldest first
/// whatever order it sent them in (review afa2bf1 finding 9): the plots,
/// the line's "the last" and the memory limit read them in that order.
pub fn parse(body: &[u8]) -> Result<Measured, NotMeasured> {
    let mut m: Measured = serde_json::from_slice(body).map_err(|e| NotMeasured::Malformed(e.to_string()))?;
    m.windows.sort_by_key(|w| w.window_start);
    m.oom_kills
        .sort_by(|a, b| (a.observed_unix, &a.observed_at).cmp(&(b.observed_unix, &b.observed_at)));
    Ok(m)
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / 1_048_576.0)
}

/// The line `usage` and the page print: average and busiest CPU, the
/// memory peak, and the OOM kills.
pub fn line(name: &str, m: &Measured) -> String {
    let cores: Vec<f64> = m.windows.iter().filter_map(|w| w.cores).collect();
    let cpu = if cores.is_empty() {
        "CPU not measured".to_string()
    } else {
        let avg = cores.iter().sum::<f64>() / cores.len() as f64;
        let top = cores.iter().copied().fold(0.0, f64::max);
        format!(
            "CPU {avg:.2} cores on average over {} hour{} (busiest {top:.2})",
            cores.len(),
            if cores.len() == 1 { "" } else { "s" }
        )
    };
    let memory = m
        .windows
        .iter()
        .filter_map(|w| w.max_mib)
        .reduce(f64::max)
        .map_or("memory not measured".to_string(), |p| {
            format!("memory peak {p:.0} MiB")
        });
    let kills = m.oom_kills.len() + m.oom_kills_omitted;
    let oom = match m.oom_kills.last() {
        None => "no OOM kill".to_string(),
        Some(k) => format!(
            "{kills} OOM kill{}, the last at {}{}",
            if kills == 1 { "" } else { "s" },
            k.observed_at,
            k.memory_limit_bytes
                .map_or(String::new(), |l| format!(" (limit {})", mib(l)))
        ),
    };
    format!("{name}: {cpu}; {memory}; {oom}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(windows: Vec<Window>, kills: Vec<OomKill>) -> Measured {
        Measured {
            windows,
            windows_omitted: 0,
            oom_kills: kills,
            oom_kills_omitted: 0,
        }
    }

    fn w(start: u64, cores: Option<f64>, max_mib: Option<f64>) -> Window {
        Window {
            window_start: start,
            cores,
            max_mib,
        }
    }

    #[test]
    fn the_read_base_is_the_override_else_the_agent_s_url_and_only_its_origin() {
        assert_eq!(
            read_base(None, Some("https://ingest.example:8443/base?x#y")),
            Ok("https://ingest.example:8443".into())
        );
        assert_eq!(
            read_base(Some("http://127.0.0.1:8470"), Some("https://in.cluster")),
            Ok("http://127.0.0.1:8470".into())
        );
        assert_eq!(read_base(Some(" "), None), Err(NotMeasured::NoIngest));
        assert_eq!(read_base(None, Some("ftp://x")), Err(NotMeasured::BadUrl));
        assert_eq!(read_base(None, Some("http://u:p@x")), Err(NotMeasured::BadUrl));
        assert_eq!(read_base(None, Some("http:///x")), Err(NotMeasured::BadUrl));
    }

    #[test]
    fn the_read_url_takes_only_kubernetes_names() {
        assert_eq!(
            read_url("http://h:1", "agents", "fake-ab12"),
            Ok("http://h:1/v1/read/usage?namespace=agents&pod=fake-ab12".into())
        );
        assert_eq!(read_url("http://h", "", "p"), Err(NotMeasured::NoNamespace));
        assert_eq!(read_url("http://h", "a", "p&kind=x"), Err(NotMeasured::NoPod));
    }

    #[test]
    fn the_line_says_what_was_measured_and_never_a_zero_for_nothing() {
        let kill = OomKill {
            observed_at: "2026-12-03T11:30:00Z".into(),
            observed_unix: Some(1_796_297_400),
            container: "agent".into(),
            memory_limit_bytes: Some(256 << 20),
            oom_kill_total: 1,
        };
        let m = measured(
            vec![
                w(0, Some(0.25), Some(100.0)),
                w(3600, Some(0.75), None),
                w(7200, None, None),
            ],
            vec![kill],
        );
        assert_eq!(
            line("a", &m),
            "a: CPU 0.50 cores on average over 2 hours (busiest 0.75); memory peak 100 MiB; \
             1 OOM kill, the last at 2026-12-03T11:30:00Z (limit 256 MiB)"
        );
        assert_eq!(
            line("b", &measured(vec![w(0, None, None)], vec![])),
            "b: CPU not measured; memory not measured; no OOM kill"
        );
    }

    /// Review afa2bf1 finding 9: the ingest's order is not trusted.
    #[test]
    fn an_answer_is_put_oldest_first_whatever_the_ingest_s_order() {
        let body = br#"{"windows":[{"window_start":7200,"cores":1.0,"max_mib":null},{"window_start":0,"cores":0.5,"max_mib":null},{"window_start":3600,"cores":null,"max_mib":null}],"oom_kills":[{"observed_at":"1970-01-01T02:00:00Z","observed_unix":7200,"container":"agent","memory_limit_bytes":2,"oom_kill_total":2},{"observed_at":"1970-01-01T01:00:00Z","observed_unix":3600,"container":"agent","memory_limit_bytes":1,"oom_kill_total":1}]}"#;
        let m = parse(body).unwrap();
        let starts: Vec<u64> = m.windows.iter().map(|w| w.window_start).collect();
        assert_eq!(starts, [0, 3600, 7200]);
        let kills: Vec<u64> = m.oom_kills.iter().map(|k| k.oom_kill_total).collect();
        assert_eq!(kills, [1, 2], "the last kill is the latest");
        assert!(line("a", &m).ends_with("the last at 1970-01-01T02:00:00Z (limit 0 MiB)"));
    }

    const TOKEN: &str = "canary-7c1e0f2d9a8b3c4d5e6f7a8b9c0d1e2f";

    fn token_file(dir: &Path, name: &str, text: &[u8], mode: u32) -> std::path::PathBuf {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
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
    fn the_token_file_is_its_owner_s_and_its_token_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = read_token(&token_file(d, "good", format!("{TOKEN}\n").as_bytes(), 0o600)).unwrap();
        assert_eq!(good, ReadToken(TOKEN.into()));
        let header = good.authorization();
        assert_eq!(header.to_str().unwrap(), format!("Bearer {TOKEN}"));
        assert!(header.is_sensitive());
        assert!(read_token(&token_file(d, "ro", TOKEN.as_bytes(), 0o400)).is_ok());
        let mut said = vec![format!("{good:?}")];
        for (name, text, mode, says) in [
            ("open", TOKEN.as_bytes().to_vec(), 0o644, "chmod 600"),
            ("empty", b" \n".to_vec(), 0o600, "holds no token"),
            (
                "two",
                format!("{TOKEN} {TOKEN}").into_bytes(),
                0o600,
                "visible ASCII",
            ),
            (
                "big",
                vec![b'a'; TOKEN_FILE_CAP as usize + 1],
                0o600,
                "over 4096 bytes",
            ),
        ] {
            let e = read_token(&token_file(d, name, &text, mode)).unwrap_err();
            assert!(matches!(e, NotMeasured::Token(_)), "{e:?}");
            let e = e.to_string();
            assert!(e.contains(says) && e.starts_with(READ_TOKEN_ENV), "{name}: {e}");
            said.push(e);
        }
        said.push(read_token(&d.join("missing")).unwrap_err().to_string());
        said.push(read_token(d).unwrap_err().to_string());
        for s in &said {
            assert!(!s.contains("canary"), "{s}");
        }
    }

    #[test]
    fn the_token_goes_over_https_or_to_a_loopback_address_only() {
        for ok in [
            "https://ingest.example:8443",
            "http://127.0.0.1:8470",
            "http://127.3.2.1",
            "http://localhost:8470",
            "http://[::1]:8470",
        ] {
            assert!(token_may_go_to(ok), "{ok}");
        }
        for not in [
            "http://ingest.example",
            "http://10.0.0.7:8470",
            "http://[2001:db8::1]:8470",
            "http://localhost.example:8470",
            "ftp://127.0.0.1",
        ] {
            assert!(!token_may_go_to(not), "{not}");
        }
    }

    #[test]
    fn a_refused_read_says_what_to_set_and_never_the_token() {
        let base = "http://127.0.0.1:8470".to_string();
        let none = NotMeasured::NoToken(base.clone()).to_string();
        assert!(
            none.contains("HTTP 401") && none.contains(READ_TOKEN_ENV),
            "{none}"
        );
        let wrong = NotMeasured::WrongToken(base).to_string();
        assert!(wrong.contains("refused the read token"), "{wrong}");
        let clear = NotMeasured::TokenInClear("http://10.0.0.7:8470".into()).to_string();
        assert!(
            clear.contains("https://") && clear.contains("10.0.0.7"),
            "{clear}"
        );
    }

    #[test]
    fn a_malformed_answer_is_said_so() {
        assert!(matches!(parse(b"<html>"), Err(NotMeasured::Malformed(_))));
        let ok = br#"{"namespace":"n","pod":"p","windows":[{"window_start":1,"cores":null,"max_mib":2.5}],"windows_omitted":0,"oom_kills":[],"oom_kills_omitted":0}"#;
        assert_eq!(parse(ok).unwrap().windows[0].max_mib, Some(2.5));
    }
}

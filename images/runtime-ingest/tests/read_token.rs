//! The read API answers only the bearer of its token (review afa2bf1 finding 5):
//! `serve --read-api` refuses to start without `--read-token-file`, a GET without
//! the right `Authorization: Bearer …` answers 401 and nothing else, the
//! collectors' ingest needs no token, and the token is never in the log or an
//! answer. Through the real binary.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Ingest, raw};
use serde_json::Value;

const NS: &str = "agents-t0k3";
const POD: &str = "buzz-agent-7a1c";
const WS: &str = "2026-08-06T10:00:00Z";
/// The read token of these tests: a canary, looked for in everything the
/// ingest writes.
const TOKEN: &str = "canary-read-token-6f1d2e3c4b5a69788796a5b4c3d2e1f0";
/// A wrong token, a canary too.
const WRONG: &str = "canary-wrong-token-0a1b2c3d4e5f60718293a4b5c6d7e8f9";

/// A file holding `text`, created with `mode`.
fn token_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}

fn snapshot() -> Vec<u8> {
    format!(
        r#"{{"kind":"usage_snapshot","source":"measured","window_start":"{WS}","window_seconds":3600,"records":[{{"namespace":"{NS}","workload_kind":"Pod","workload_name":"{POD}","container":"agent","pod":"{POD}","pod_uid":"7a1c-uid","window_start":"{WS}","window_seconds":3600,"cpu":{{"core_nanoseconds":1800000000000,"covered_nanoseconds":3600000000000}},"memory":{{"max_bytes":104857600}}}}]}}"#
    )
    .into_bytes()
}

/// `GET /v1/read/usage?query` with `authorization` (a header value) if given.
fn read(ingest: &Ingest, query: &str, authorization: Option<&str>) -> common::Answer {
    let headers = authorization.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    raw(
        &ingest.addr,
        "GET",
        &format!("/v1/read/usage?{query}"),
        &headers,
        b"",
    )
    .unwrap()
}

/// An ingest with its read API and [`TOKEN`] (and `--admin`, for its stats),
/// logging to a file, holding one window of [`POD`] (posted without any token, as
/// a collector posts).
fn ingest_with_token(dir: &Path) -> Ingest {
    let file = token_file(dir, "read-token", &format!("{TOKEN}\n"), 0o600);
    let ingest = Ingest::start_with(
        &dir.join("ingest.db"),
        "127.0.0.1:0",
        &[
            "--read-api",
            "--read-token-file",
            file.to_str().unwrap(),
            "--admin",
        ],
        Some(&dir.join("ingest.log")),
    );
    assert_eq!(ingest.post("usage_snapshot", &snapshot()).status, 204);
    ingest
}

/// What `runtime-ingest serve args…` did within 10 s: its exit code (`None`
/// when it was still running, and then it is killed), stdout and stderr.
fn serve_outcome(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (out, err) = (dir.join("serve.out"), dir.join("serve.err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_runtime-ingest"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.join("refused.db"))
        .args(args)
        .env_remove("RUNTIME_INGEST_READ_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        code,
        fs::read_to_string(out).unwrap(),
        fs::read_to_string(err).unwrap(),
    )
}

#[test]
fn the_read_api_answers_only_the_bearer_of_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = ingest_with_token(dir.path());
    let query = format!("namespace={NS}&pod={POD}");
    let bearer = format!("Bearer {TOKEN}");
    for (what, authorization) in [
        ("no token", None),
        ("a wrong token", Some(format!("Bearer {WRONG}"))),
        ("the token with another scheme", Some(format!("Basic {TOKEN}"))),
        ("the token and more", Some(format!("Bearer {TOKEN}x"))),
        (
            "the token cut short",
            Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        ),
        ("an empty bearer", Some("Bearer ".to_string())),
    ] {
        let a = read(&ingest, &query, authorization.as_deref());
        assert_eq!(a.status, 401, "{what}: {}", String::from_utf8_lossy(&a.body));
        assert_eq!(
            a.header("www-authenticate").as_deref(),
            Some(r#"Bearer realm="runtime-ingest""#),
            "{what}"
        );
        let body = a.json();
        assert_eq!(body["error"], "read.unauthorized", "{what}: {body}");
        assert!(body.get("windows").is_none(), "{what}: nothing else: {body}");
    }
    // The token is checked before anything else: a malformed query without it is
    // a 401 too, not a 400 that says what the route takes.
    assert_eq!(read(&ingest, "namespace=A", None).status, 401);

    for authorization in [bearer.clone(), format!("bearer  {TOKEN}")] {
        let a = read(&ingest, &query, Some(&authorization));
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        let usage: Value = a.json();
        assert_eq!(usage["windows"].as_array().map(Vec::len), Some(1), "{usage}");
        assert_eq!(usage["windows"][0]["cores"], 0.5, "{usage}");
    }
    assert_eq!(read(&ingest, "namespace=A", Some(&bearer)).status, 400);
    // Each refusal is counted by its code; the two reads copied one row each and
    // scanned no table.
    let stats = ingest.stats();
    assert_eq!(stats["rejected"]["read.unauthorized"], 7, "{stats}");
    assert_eq!(stats["reads"]["rows"], 2, "{stats}");
    assert_eq!(stats["reads"]["fullscan_steps"], 0, "{stats}");
}

#[test]
fn the_token_never_reaches_the_log_or_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let ingest = ingest_with_token(dir.path());
    let query = format!("namespace={NS}&pod={POD}");
    let mut answers = Vec::new();
    for authorization in [
        None,
        Some(format!("Bearer {WRONG}")),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer {TOKEN}{WRONG}")),
        Some(format!("Bearer {TOKEN}")),
    ] {
        let a = read(&ingest, &query, authorization.as_deref());
        answers.push(format!("{}\r\n\r\n{}", a.head, String::from_utf8_lossy(&a.body)));
    }
    let log = ingest.log();
    assert!(
        log.contains("401 read.unauthorized"),
        "each refusal is one log line: {log}"
    );
    for canary in [TOKEN, WRONG, &TOKEN[..16], &WRONG[..16]] {
        assert!(!log.contains(canary), "the log holds {canary:?}: {log}");
        for a in &answers {
            assert!(!a.contains(canary), "an answer holds {canary:?}: {a}");
        }
    }
    // Refusing to start over a token file others can read names the file, not
    // what it holds.
    let open = token_file(dir.path(), "open-token", TOKEN, 0o644);
    let (code, out, err) = serve_outcome(
        dir.path(),
        &["--read-api", "--read-token-file", open.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        !err.contains(&TOKEN[..16]) && !out.contains(&TOKEN[..16]),
        "{err}"
    );
}

#[test]
fn the_read_api_refuses_to_start_without_a_usable_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let open = token_file(d, "open", TOKEN, 0o640);
    let short = token_file(d, "short", "s3cr3t", 0o600);
    let spaced = token_file(d, "spaced", &format!("{TOKEN} {TOKEN}"), 0o600);
    let missing = d.join("missing");
    for (args, says) in [
        (vec!["--read-api"], "--read-token-file"),
        (
            vec!["--read-api", "--read-token-file", open.to_str().unwrap()],
            "chmod 600",
        ),
        (
            vec!["--read-api", "--read-token-file", short.to_str().unwrap()],
            "at least 32",
        ),
        (
            vec!["--read-api", "--read-token-file", spaced.to_str().unwrap()],
            "visible ASCII",
        ),
        (
            vec!["--read-api", "--read-token-file", missing.to_str().unwrap()],
            "cannot read",
        ),
        (vec!["--read-token-file", short.to_str().unwrap()], "--read-api"),
    ] {
        let (code, out, err) = serve_outcome(d, &args);
        assert_eq!(code, Some(2), "{args:?} started: {out}{err}");
        assert!(!out.contains("listening"), "{args:?}: {out}");
        assert!(err.contains(says), "{args:?} does not say {says:?}: {err}");
        assert!(!err.contains(&TOKEN[..16]), "{args:?}: {err}");
    }
    // The one right configuration starts.
    let good = token_file(d, "good", TOKEN, 0o600);
    let (code, out, err) = serve_outcome(d, &["--read-api", "--read-token-file", good.to_str().unwrap()]);
    assert_eq!(code, None, "it keeps serving: {err}");
    assert!(out.starts_with("listening on http://"), "{out}{err}");
}

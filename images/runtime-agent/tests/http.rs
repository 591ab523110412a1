//! The HTTP transport against raw local servers (collector-design.md §6;
//! runtime-agent-backend-contract.md §3): what goes on the wire, and that an ingest
//! which redirects, hangs or answers garbage only ever defers.

mod common;

use common::{PAYLOAD, gunzip, read_request};
use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use runtime_agent::http::HttpTransport;
use runtime_agent::payload::Kind;
use runtime_agent::ship::{Outcome, Transport};

struct Seen {
    head: String,
    body: Vec<u8>,
}

/// A server answering each connection's first request with `reply` (raw bytes), or
/// holding it open when `reply` is `None`.
fn server(reply: Option<&'static [u8]>) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (head, body) = read_request(&mut BufReader::new(&mut stream));
            let seen = Seen { head, body };
            let _ = tx.send(seen);
            match reply {
                Some(bytes) => {
                    let _ = stream.write_all(bytes);
                }
                None => {
                    std::thread::sleep(Duration::from_secs(20));
                }
            }
        }
    });
    (url, rx)
}

#[test]
fn a_post_is_gzip_json_with_the_user_agent_to_the_kind_route() {
    let (url, seen) = server(Some(b"HTTP/1.1 204 No Content\r\n\r\n"));
    let mut t = HttpTransport::new(&format!("{url}/base/"), "runtime-agent/0.1.0").unwrap();
    let r = t.post(Kind::CollectionCoverage, PAYLOAD, Duration::from_secs(10));
    assert_eq!(r.outcome, Outcome::Delivered);
    let seen = seen.recv_timeout(Duration::from_secs(5)).unwrap();
    let head = seen.head.to_ascii_lowercase();
    assert!(
        head.starts_with("post /base/v1/ingest/collection_coverage http/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("content-type: application/json\r\n"), "{head}");
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(head.contains("user-agent: runtime-agent/0.1.0\r\n"), "{head}");
    assert_eq!(r.transmitted_bytes, seen.body.len() as u64);
    assert_eq!(gunzip(&seen.body), PAYLOAD);
}

#[test]
fn status_classes_and_retry_after_on_the_wire() {
    for (reply, outcome, retry) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"[..],
            Outcome::Delivered,
            None,
        ),
        (
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            Outcome::Malformed,
            None,
        ),
        (
            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n",
            Outcome::TooLarge,
            None,
        ),
        (
            b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n",
            Outcome::Unauthorized,
            None,
        ),
        (
            b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n",
            Outcome::Unauthorized,
            None,
        ),
        (
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 17\r\ncontent-length: 0\r\n\r\n",
            Outcome::Deferred,
            Some(Duration::from_secs(17)),
        ),
        (
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n",
            Outcome::Deferred,
            None,
        ),
    ] {
        let (url, _seen) = server(Some(reply));
        let mut t = HttpTransport::new(&url, "runtime-agent/0.1.0").unwrap();
        let r = t.post(Kind::UsageSnapshot, PAYLOAD, Duration::from_secs(10));
        assert_eq!(
            (r.outcome, r.retry_after),
            (outcome, retry),
            "{}",
            String::from_utf8_lossy(reply)
        );
    }
}

#[test]
fn a_redirect_is_not_followed_and_defers() {
    let (target, target_seen) = server(Some(b"HTTP/1.1 204 No Content\r\n\r\n"));
    let reply: &'static [u8] = Box::leak(
        format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}/v1/ingest/usage_snapshot\r\ncontent-length: 0\r\n\r\n")
            .into_bytes()
            .into_boxed_slice(),
    );
    let (url, seen) = server(Some(reply));
    let mut t = HttpTransport::new(&url, "runtime-agent/0.1.0").unwrap();
    let r = t.post(Kind::UsageSnapshot, PAYLOAD, Duration::from_secs(10));
    assert_eq!(r.outcome, Outcome::Deferred);
    assert!(seen.recv_timeout(Duration::from_secs(5)).is_ok());
    assert_eq!(
        target_seen.recv_timeout(Duration::from_millis(500)).err(),
        Some(mpsc::RecvTimeoutError::Timeout)
    );
}

#[test]
fn a_hanging_ingest_is_cut_off_at_the_timeout_and_defers() {
    let (url, _seen) = server(None);
    let mut t = HttpTransport::new(&url, "runtime-agent/0.1.0").unwrap();
    let start = Instant::now();
    let r = t.post(Kind::UsageSnapshot, PAYLOAD, Duration::from_millis(800));
    assert_eq!(r.outcome, Outcome::Deferred);
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
}

#[test]
fn garbage_a_closed_connection_or_no_listener_defers() {
    for reply in [
        &b"this is not http\r\n\r\n"[..],
        b"",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\npartial",
    ] {
        let (url, _seen) = server(Some(reply));
        let mut t = HttpTransport::new(&url, "runtime-agent/0.1.0").unwrap();
        let r = t.post(Kind::UsageSnapshot, PAYLOAD, Duration::from_secs(5));
        // A 200 whose body never completes still told us the status: the commit
        // happened before the reply, so that one is delivered; the others defer.
        let expected = if reply.starts_with(b"HTTP/1.1 200") {
            Outcome::Delivered
        } else {
            Outcome::Deferred
        };
        assert_eq!(r.outcome, expected, "{}", String::from_utf8_lossy(reply));
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut t = HttpTransport::new(&url, "runtime-agent/0.1.0").unwrap();
    let r = t.post(Kind::UsageSnapshot, PAYLOAD, Duration::from_secs(5));
    assert_eq!(r.outcome, Outcome::Deferred);
}

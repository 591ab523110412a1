//! The transport through an egress proxy (runtime-agent-backend-contract.md §3 "MUST
//! work over HTTP/1.1 through enterprise proxies"; review b30b1a0 finding 15), against
//! a small proxy written here: `CONNECT` with credentials to a TLS ingest the client
//! never resolves, a refused tunnel, a forward proxy for `http://`, and loopback
//! bypassing the proxy.

mod common;

use common::{PAYLOAD, gunzip, read_request};
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use base64::Engine;
use runtime_agent::http::{HttpTransport, TlsRoots};
use runtime_agent::payload::Kind;
use runtime_agent::proxy::ProxySettings;
use runtime_agent::ship::{Outcome, Transport};

/// A TLS ingest for `ingest.invalid` answering 204; the certificate to pin; and
/// what it received.
fn tls_ingest() -> (
    String,
    rustls::pki_types::CertificateDer<'static>,
    mpsc::Receiver<(String, Vec<u8>)>,
) {
    let ck = rcgen::generate_simple_self_signed(vec!["ingest.invalid".to_owned()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut tls = BufReader::new(rustls::StreamOwned::new(conn, stream));
            let seen = read_request(&mut tls);
            let _ = tx.send(seen);
            let tls = tls.get_mut();
            let _ = tls.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (addr, cert, rx)
}

/// A `CONNECT` proxy that tunnels every authority to `upstream`, or answers each
/// `CONNECT` with `refuse` when given; it reports each request head it got.
fn connect_proxy(upstream: String, refuse: Option<&'static str>) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut reader = BufReader::new(client.try_clone().unwrap());
            let (head, _) = read_request(&mut reader);
            let _ = tx.send(head);
            if let Some(answer) = refuse {
                let _ = client.write_all(answer.as_bytes());
                continue;
            }
            let mut server = TcpStream::connect(&upstream).unwrap();
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .unwrap();
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(Shutdown::Write);
            });
            let _ = std::io::copy(&mut server, &mut client);
            let _ = client.shutdown(Shutdown::Write);
        }
    });
    (addr, rx)
}

fn proxy_env(pairs: Vec<(&'static str, String)>) -> ProxySettings {
    ProxySettings::from_lookup(|name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())).unwrap()
}

/// Posts [`PAYLOAD`] once to `ingest` with the proxy env `proxy` and the
/// TLS roots `roots`; the outcome.
fn post_coverage(ingest: &str, proxy: Vec<(&'static str, String)>, roots: TlsRoots) -> Outcome {
    let mut t = HttpTransport::with(ingest, "runtime-agent/0.1.0", &proxy_env(proxy), roots).unwrap();
    t.post(Kind::CollectionCoverage, PAYLOAD, Duration::from_secs(10))
        .outcome
}

fn basic(user_password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

#[test]
fn an_https_ingest_is_reached_through_a_connect_tunnel_with_the_proxy_credentials() {
    let (ingest, cert, received) = tls_ingest();
    let (proxy, heads) = connect_proxy(ingest, None);
    // ingest.invalid cannot resolve: only the proxy can have reached it.
    let outcome = post_coverage(
        "https://ingest.invalid",
        vec![("HTTPS_PROXY", format!("http://agent:pa%3Ass@{proxy}"))],
        TlsRoots::Pinned(vec![cert]),
    );
    assert_eq!(outcome, Outcome::Delivered);
    let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        head.starts_with("CONNECT ingest.invalid:443 HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l == format!("Proxy-Authorization: {}", basic("agent:pa:ss"))),
        "{head}"
    );
    let (origin_head, body) = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        origin_head.starts_with("POST /v1/ingest/collection_coverage HTTP/1.1\r\n"),
        "{origin_head}"
    );
    assert!(
        !origin_head.to_ascii_lowercase().contains("proxy-authorization"),
        "the proxy's credentials reached the ingest"
    );
    assert_eq!(gunzip(&body), PAYLOAD);
}

#[test]
fn a_refused_tunnel_defers() {
    for answer in [
        "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n",
        "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        let (proxy, heads) = connect_proxy(String::new(), Some(answer));
        let outcome = post_coverage(
            "https://ingest.invalid",
            vec![("https_proxy", format!("http://{proxy}"))],
            TlsRoots::Pinned(Vec::new()),
        );
        assert_eq!(outcome, Outcome::Deferred, "{answer}");
        let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(!head.contains("Proxy-Authorization"), "no credentials configured");
    }
}

/// A forward proxy answering every request itself with 204.
fn forward_proxy() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let seen = read_request(&mut BufReader::new(stream.try_clone().unwrap()));
            let _ = tx.send(seen);
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
        }
    });
    (addr, rx)
}

#[test]
fn an_http_ingest_goes_to_a_forward_proxy_in_absolute_form() {
    let (proxy, seen) = forward_proxy();
    let outcome = post_coverage(
        "http://ingest.invalid/base",
        vec![("HTTP_PROXY", format!("http://agent:secret@{proxy}"))],
        TlsRoots::WebPki,
    );
    assert_eq!(outcome, Outcome::Delivered);
    let (head, body) = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        head.starts_with("POST http://ingest.invalid/base/v1/ingest/collection_coverage HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("proxy-authorization: {}", basic("agent:secret"))))
    );
    assert_eq!(gunzip(&body), PAYLOAD);
}

#[test]
fn a_loopback_ingest_bypasses_the_proxy() {
    let (proxy, proxied) = forward_proxy();
    let (direct, seen) = forward_proxy();
    let outcome = post_coverage(
        &format!("http://{direct}"),
        vec![
            ("HTTP_PROXY", format!("http://{proxy}")),
            ("HTTPS_PROXY", format!("http://{proxy}")),
        ],
        TlsRoots::WebPki,
    );
    assert_eq!(outcome, Outcome::Delivered);
    let (head, _) = seen.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        head.starts_with("POST /v1/ingest/collection_coverage HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(proxied.try_recv().is_err(), "the proxy saw a loopback request");
}

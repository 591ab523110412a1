//! A git smart-HTTP server on loopback for the git smoke test: hyper over
//! TLS (a fresh CA and a serving certificate for `127.0.0.1`) in front of the
//! host's own `git http-backend`, run as a CGI (RFC 3875) once per request.
//! The image's git reaches it through `git-remote-https`, so the whole
//! client path an agent uses for an `https://` remote is exercised: libcurl,
//! GnuTLS, certificate verification, the smart protocol and a push.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

/// One request as the server answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub method: String,
    /// Path and query, e.g. `/served.git/info/refs?service=git-upload-pack`.
    pub target: String,
    pub status: u16,
}

/// The running server; stopped on drop.
pub struct GitServer {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The CA that signed the serving certificate, PEM: the client must be
    /// told to trust it (it is in no system bundle).
    pub ca_pem: String,
    log: Arc<Mutex<Vec<Served>>>,
    task: tokio::task::AbortHandle,
}

struct Tls {
    ca_pem: String,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

fn tls_material() -> Tls {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("serving key");
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).expect("serving params");
    leaf.subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let cert = leaf.signed_by(&key, &issuer).expect("serving certificate");
    Tls {
        ca_pem: ca_cert.pem(),
        cert: cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
    }
}

impl GitServer {
    /// Serves every repository under `project_root` (`GIT_PROJECT_ROOT`).
    /// A repository accepts pushes when its config sets `http.receivepack`.
    pub async fn start(project_root: &Path) -> GitServer {
        let tls = tls_material();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![tls.cert], tls.key)
            .expect("TLS config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (root, shared) = (project_root.to_path_buf(), log.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, root, log) = (acceptor.clone(), root.clone(), shared.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req| {
                        let (root, log) = (root.clone(), log.clone());
                        async move { Ok::<_, Infallible>(handle(&root, &log, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        })
        .abort_handle();
        GitServer {
            url,
            ca_pem: tls.ca_pem,
            log,
            task,
        }
    }

    /// Every request answered so far, in order.
    pub fn served(&self) -> Vec<Served> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

async fn handle(root: &Path, log: &Mutex<Vec<Served>>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().to_string();
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let resp = match cgi(root, req).await {
        Ok(r) => r,
        Err(e) => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("git http-backend: {e}\n"),
        ),
    };
    log.lock().unwrap_or_else(|e| e.into_inner()).push(Served {
        method,
        target,
        status: resp.status().as_u16(),
    });
    resp
}

/// One request through `git http-backend`: the request line and headers as
/// CGI variables, the body (hyper has undone any chunking) on its stdin, its
/// CGI header block turned back into an HTTP status and headers.
async fn cgi(root: &Path, req: Request<Incoming>) -> std::io::Result<Response<Full<Bytes>>> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(std::io::Error::other)?.to_bytes();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", root)
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let write = async move {
        stdin.write_all(&body).await?;
        stdin.shutdown().await
    };
    let (written, out) = tokio::join!(write, child.wait_with_output());
    let out = out?;
    // A backend that answers without reading the whole body closes its stdin
    // early: that is its answer, not a server failure.
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e);
    }
    parse_cgi(&out.stdout).ok_or_else(|| {
        std::io::Error::other(format!(
            "no CGI header block (exit {:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

/// A CGI response: header lines, an empty line, the body. `Status:` sets
/// the HTTP status (200 when absent).
fn parse_cgi(out: &[u8]) -> Option<Response<Full<Bytes>>> {
    let (head, body) = split_head(out)?;
    let mut resp = Response::builder().status(StatusCode::OK);
    for line in std::str::from_utf8(head).ok()?.lines() {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next()?.parse::<u16>().ok()?;
            resp = resp.status(code);
        } else {
            resp = resp.header(name.trim(), value);
        }
    }
    resp.body(Full::new(Bytes::copy_from_slice(body))).ok()
}

fn split_head(out: &[u8]) -> Option<(&[u8], &[u8])> {
    for (sep, len) in [(&b"\r\n\r\n"[..], 4), (&b"\n\n"[..], 2)] {
        if let Some(i) = out.windows(len).position(|w| w == sep) {
            return Some((&out[..i], &out[i + len..]));
        }
    }
    None
}

/// Runs host `git` with `args` in `dir` (no system or global config); its
/// stdout, trimmed. Panics with stderr on failure: every caller is a test step.
pub fn host_git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Host")
        .env("GIT_AUTHOR_EMAIL", "host@example.invalid")
        .env("GIT_COMMITTER_NAME", "Host")
        .env("GIT_COMMITTER_EMAIL", "host@example.invalid")
        .output()
        .expect("host git runs");
    assert!(
        out.status.success(),
        "host git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository `NAME.git` under `root` that accepts pushes over HTTP,
/// seeded with one commit on `main` (a `README`); returns its path.
pub fn seeded_repo(root: &Path, name: &str) -> PathBuf {
    let bare = root.join(format!("{name}.git"));
    std::fs::create_dir_all(&bare).unwrap();
    host_git(&bare, &["init", "-q", "--bare", "-b", "main"]);
    host_git(&bare, &["config", "http.receivepack", "true"]);
    let seed = tempfile::tempdir().unwrap();
    host_git(seed.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(seed.path().join("README"), "seeded on the host\n").unwrap();
    host_git(seed.path(), &["add", "README"]);
    host_git(seed.path(), &["commit", "-q", "-m", "seed"]);
    host_git(seed.path(), &["push", "-q", bare.to_str().unwrap(), "main"]);
    bare
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgi_status_line_sets_the_http_status_and_headers_pass_through() {
        let r = parse_cgi(b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nnope").unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(r.headers()["content-type"], "text/plain");
        let r = parse_cgi(b"Content-Type: application/x-git-upload-pack-advertisement\n\n0000").unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(parse_cgi(b"no header block").is_none());
    }
}

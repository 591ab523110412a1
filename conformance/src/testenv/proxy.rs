//! `FaultProxy`: a TLS-terminating reverse proxy between a client (usually the
//! provider binary under test) and the real apiserver, with its own
//! kubeconfigs. Each test scripts it to:
//! - strip or rewrite the `Date` response header (the GC same-clock rule's input);
//! - run a hook *before forwarding* a matching request (e.g. make a container
//!   run just before the DELETE that was authorised by an older observation);
//! - delay, fail (5xx) or reset chosen requests;
//! - forward a request, then fail (5xx) or reset its reply: the apiserver has
//!   committed the write, the client never hears it (review b30b1a0 #10, the
//!   apiserver side of the ingest's `drop_after_commit`);
//! - count requests by verb and resource (zero-mutation no-op proofs);
//! - keep the body of every DELETE (precondition and grace-period proofs).
//!
//! Requests are forwarded unchanged, bearer token included, so the apiserver
//! authenticates and authorises the real user. Responses stream, so watches work.

use super::{TestEnv, TestEnvError};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

type Result<T, E = TestEnvError> = std::result::Result<T, E>;
type ProxyBody = BoxBody<Bytes, hyper::Error>;
/// An async hook run before a matching request is forwarded.
pub type Hook = Arc<dyn Fn(RequestInfo) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Kubernetes API verb of a request, as RBAC names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    Other,
}

impl Verb {
    /// True for verbs that change state.
    pub fn is_mutation(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// What the proxy understood of a request.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    pub verb: Verb,
    pub method: Method,
    pub path: String,
    pub query: String,
    pub namespace: Option<String>,
    /// Resource plus subresource, e.g. `pods`, `pods/status`, `namespaces`.
    pub resource: String,
    pub name: Option<String>,
}

impl RequestInfo {
    /// Parses a Kubernetes API path (`/api/v1/...`, `/apis/<g>/<v>/...`).
    pub fn parse(method: &Method, path: &str, query: &str) -> RequestInfo {
        let segs: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let rest: &[&str] = match segs.first() {
            Some(&"api") if segs.len() >= 2 => &segs[2..],
            Some(&"apis") if segs.len() >= 3 => &segs[3..],
            _ => &[],
        };
        let (namespace, res, name, sub) = if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
            (Some(rest[1].to_string()), rest[2], rest.get(3), rest.get(4))
        } else {
            (
                None,
                rest.first().copied().unwrap_or(""),
                rest.get(1),
                rest.get(2),
            )
        };
        let resource = match sub {
            Some(s) => format!("{res}/{s}"),
            None => res.to_string(),
        };
        let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
        let verb = match (method.clone(), name.is_some()) {
            (Method::GET, _) if watch => Verb::Watch,
            (Method::GET, true) => Verb::Get,
            (Method::GET, false) => Verb::List,
            (Method::POST, _) => Verb::Create,
            (Method::PUT, _) => Verb::Update,
            (Method::PATCH, _) => Verb::Patch,
            (Method::DELETE, true) => Verb::Delete,
            (Method::DELETE, false) => Verb::DeleteCollection,
            _ => Verb::Other,
        };
        RequestInfo {
            verb,
            method: method.clone(),
            path: path.to_string(),
            query: query.to_string(),
            namespace,
            resource,
            name: name.map(|s| s.to_string()),
        }
    }
}

/// Selects requests; unset fields match anything.
#[derive(Clone, Debug, Default)]
pub struct Matcher {
    verb: Option<Verb>,
    resource: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

impl Matcher {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }
    /// Matches `verb` on `resource` (e.g. `Verb::Delete`, `"pods"`).
    pub fn new(verb: Verb, resource: &str) -> Self {
        Self {
            verb: Some(verb),
            resource: Some(resource.into()),
            ..Self::default()
        }
    }
    /// Restricts to a namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.into());
        self
    }
    /// Restricts to an object name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
    fn matches(&self, r: &RequestInfo) -> bool {
        self.verb.is_none_or(|v| v == r.verb)
            && self.resource.as_ref().is_none_or(|x| *x == r.resource)
            && self
                .namespace
                .as_ref()
                .is_none_or(|x| Some(x) == r.namespace.as_ref())
            && self.name.as_ref().is_none_or(|x| Some(x) == r.name.as_ref())
    }
}

/// How the proxy treats the upstream `Date` response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DateMode {
    /// Forward unchanged.
    Pass,
    /// Remove it.
    Strip,
    /// Shift it by this many seconds (negative = past).
    Skew(i64),
}

#[derive(Clone)]
enum Action {
    Hook(Hook),
    Delay(Duration),
    Fail(u16),
    Reset,
    /// Forward, wait for the whole upstream answer, then answer this status.
    FailAfterForward(u16),
    /// Forward, wait for the whole upstream answer, then drop the connection.
    ResetAfterForward,
}

/// What happens to the reply once the request was forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterForward {
    Pass,
    Fail(u16),
    Reset,
}

struct Rule {
    matcher: Matcher,
    action: Action,
    remaining: Option<u32>,
}

struct State {
    date: Mutex<DateMode>,
    rules: Mutex<Vec<Rule>>,
    counts: Mutex<BTreeMap<(Verb, String), u64>>,
    log: Mutex<Vec<RequestInfo>>,
    deletes: Mutex<Vec<(RequestInfo, Bytes)>>,
    upstream: String,
    client: HttpClient<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
}

/// A running proxy; dropping it stops accepting connections.
pub struct FaultProxy {
    url: String,
    state: Arc<State>,
    admin_kubeconfig: PathBuf,
    restricted_kubeconfig: PathBuf,
    task: tokio::task::AbortHandle,
    _dir: tempfile::TempDir,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(e: impl std::fmt::Display) -> TestEnvError {
    TestEnvError::Start(format!("proxy TLS: {e}"))
}

fn rewrite_kubeconfig(src: &Path, dst: &Path, server: &str) -> Result<()> {
    let text = std::fs::read_to_string(src)?;
    let mut doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TestEnvError::Start(e.to_string()))?;
    doc["clusters"][0]["cluster"]["server"] = server.into();
    super::write_private(dst, doc.to_string().as_bytes())?;
    Ok(())
}

impl FaultProxy {
    /// Starts a proxy for `env`'s apiserver on a random loopback port.
    pub async fn start(env: &TestEnv) -> Result<FaultProxy> {
        let serving = env.ca().issue_serving("buzz-fault-proxy", &[])?;
        let certs = vec![CertificateDer::from_pem_slice(serving.cert_pem.as_bytes()).map_err(tls_err)?];
        let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).map_err(tls_err)?;
        let mut server_cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(tls_err)?;
        server_cfg.alpn_protocols = vec![b"http/1.1".to_vec()];

        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(env.ca_pem().as_bytes()).map_err(tls_err)?)
            .map_err(tls_err)?;
        let client_cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // TCP_NODELAY both ways, as the apiserver's own sockets have it (Go's
        // default): with Nagle on, a response written as headers then body
        // waits for the client's delayed ACK, ~40 ms a request.
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(client_cfg)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        let _guard = env.handle().enter();
        let client = HttpClient::builder(TokioExecutor::new()).build(connector);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let url = format!("https://127.0.0.1:{port}");
        let dir = tempfile::Builder::new()
            .prefix("buzz-fault-proxy-")
            .tempdir_in(env.dir())?;
        let admin_kubeconfig = dir.path().join("admin.kubeconfig");
        let restricted_kubeconfig = dir.path().join("restricted.kubeconfig");
        rewrite_kubeconfig(env.admin_kubeconfig(), &admin_kubeconfig, &url)?;
        rewrite_kubeconfig(env.restricted_kubeconfig(), &restricted_kubeconfig, &url)?;

        let state = Arc::new(State {
            date: Mutex::new(DateMode::Pass),
            rules: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            log: Mutex::new(Vec::new()),
            deletes: Mutex::new(Vec::new()),
            upstream: env.server_url().to_string(),
            client,
        });
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_cfg));
        let st = state.clone();
        let task = env.handle().spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder.auto_date_header(false);
                    let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
                });
            }
        });
        Ok(FaultProxy {
            url,
            state,
            admin_kubeconfig,
            restricted_kubeconfig,
            task: task.abort_handle(),
            _dir: dir,
        })
    }

    /// `https://127.0.0.1:<port>` of the proxy.
    pub fn url(&self) -> &str {
        &self.url
    }
    /// The admin kubeconfig, pointed at the proxy.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }
    /// The restricted user's kubeconfig, pointed at the proxy.
    pub fn restricted_kubeconfig(&self) -> &Path {
        &self.restricted_kubeconfig
    }
    /// Sets how `Date` response headers are treated.
    pub fn set_date_mode(&self, mode: DateMode) {
        *lock(&self.state.date) = mode;
    }
    fn push(&self, matcher: Matcher, action: Action, times: Option<u32>) {
        lock(&self.state.rules).push(Rule {
            matcher,
            action,
            remaining: times,
        });
    }
    /// Runs `hook` before forwarding each matching request (`times` = None: always).
    pub fn on<F, Fut>(&self, matcher: Matcher, times: Option<u32>, hook: F)
    where
        F: Fn(RequestInfo) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let hook: Hook = Arc::new(move |r| Box::pin(hook(r)));
        self.push(matcher, Action::Hook(hook), times);
    }
    /// Delays matching requests before forwarding.
    pub fn delay(&self, matcher: Matcher, by: Duration, times: Option<u32>) {
        self.push(matcher, Action::Delay(by), times);
    }
    /// Answers matching requests with `status` (e.g. 503) without forwarding.
    pub fn fail(&self, matcher: Matcher, status: u16, times: Option<u32>) {
        self.push(matcher, Action::Fail(status), times);
    }
    /// Drops the connection of matching requests without a response.
    pub fn reset(&self, matcher: Matcher, times: Option<u32>) {
        self.push(matcher, Action::Reset, times);
    }
    /// Forwards matching requests, lets the apiserver answer in full (a
    /// write is committed), then answers the client `status` instead.
    pub fn fail_after_forward(&self, matcher: Matcher, status: u16, times: Option<u32>) {
        self.push(matcher, Action::FailAfterForward(status), times);
    }
    /// Forwards matching requests, lets the apiserver answer in full, then
    /// drops the client's connection without a reply.
    pub fn reset_after_forward(&self, matcher: Matcher, times: Option<u32>) {
        self.push(matcher, Action::ResetAfterForward, times);
    }
    /// Removes every rule.
    pub fn clear_rules(&self) {
        lock(&self.state.rules).clear();
    }
    /// Requests seen with this verb on this resource since the last reset.
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        lock(&self.state.counts)
            .get(&(verb, resource.to_string()))
            .copied()
            .unwrap_or(0)
    }
    /// All counts by (verb, resource).
    pub fn counts(&self) -> BTreeMap<(Verb, String), u64> {
        lock(&self.state.counts).clone()
    }
    /// Total requests since the last reset.
    pub fn total(&self) -> u64 {
        lock(&self.state.counts).values().sum()
    }
    /// Mutating requests (create/update/patch/delete) since the last reset.
    pub fn mutations(&self) -> u64 {
        lock(&self.state.counts)
            .iter()
            .filter(|((v, _), _)| v.is_mutation())
            .map(|(_, n)| n)
            .sum()
    }
    /// Every request seen since the last reset, in order.
    pub fn requests(&self) -> Vec<RequestInfo> {
        lock(&self.state.log).clone()
    }
    /// Every DELETE forwarded since the last reset, with its raw body
    /// (`DeleteOptions`: preconditions, grace period).
    pub fn deletes(&self) -> Vec<(RequestInfo, Bytes)> {
        lock(&self.state.deletes).clone()
    }
    /// Zeroes the counters, the request log and the DELETE bodies.
    pub fn reset_counts(&self) {
        lock(&self.state.counts).clear();
        lock(&self.state.log).clear();
        lock(&self.state.deletes).clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn status_body(code: u16) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by fault proxy: {code}"), "reason": "InternalError", "code": code,
    });
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|n| match n {})
            .boxed(),
    );
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> std::result::Result<Response<ProxyBody>, std::io::Error> {
    let info = RequestInfo::parse(req.method(), req.uri().path(), req.uri().query().unwrap_or(""));
    *lock(&state.counts)
        .entry((info.verb, info.resource.clone()))
        .or_default() += 1;
    lock(&state.log).push(info.clone());

    let actions: Vec<Action> = {
        let mut rules = lock(&state.rules);
        let mut out = Vec::new();
        for rule in rules.iter_mut() {
            if rule.remaining == Some(0) || !rule.matcher.matches(&info) {
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            out.push(rule.action.clone());
        }
        out
    };
    let mut after = AfterForward::Pass;
    for action in actions {
        match action {
            Action::Hook(h) => h(info.clone()).await,
            Action::Delay(d) => tokio::time::sleep(d).await,
            Action::Fail(code) => return Ok(status_body(code)),
            Action::Reset => return Err(injected_reset()),
            Action::FailAfterForward(code) => after = AfterForward::Fail(code),
            Action::ResetAfterForward => after = AfterForward::Reset,
        }
    }

    let (mut parts, body) = req.into_parts();
    let body = body.collect().await.map_err(std::io::Error::other)?.to_bytes();
    if matches!(info.verb, Verb::Delete | Verb::DeleteCollection) {
        lock(&state.deletes).push((info.clone(), body.clone()));
    }
    let pq = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    parts.uri = format!("{}{}", state.upstream, pq)
        .parse()
        .map_err(std::io::Error::other)?;
    parts.headers.remove(http::header::HOST);
    let upstream_req = Request::from_parts(parts, Full::new(body));
    let resp = match state.client.request(upstream_req).await {
        Ok(r) => r,
        Err(e) => return Ok(status_body_msg(502, &e.to_string())),
    };
    if after != AfterForward::Pass {
        // The whole answer first: the write is committed before the client
        // is told otherwise.
        let _ = resp.into_body().collect().await;
        return match after {
            AfterForward::Fail(code) => Ok(status_body(code)),
            _ => Err(injected_reset()),
        };
    }
    let (mut parts, body) = resp.into_parts();
    let mode = *lock(&state.date);
    match mode {
        DateMode::Pass => {}
        DateMode::Strip => {
            parts.headers.remove(http::header::DATE);
        }
        DateMode::Skew(secs) => {
            if let Some(d) = parts
                .headers
                .get(http::header::DATE)
                .and_then(|v| v.to_str().ok())
                && let Ok(t) = httpdate::parse_http_date(d)
            {
                let shifted = if secs >= 0 {
                    t + Duration::from_secs(secs as u64)
                } else {
                    t.checked_sub(Duration::from_secs(secs.unsigned_abs()))
                        .unwrap_or(SystemTime::UNIX_EPOCH)
                };
                if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(shifted)) {
                    parts.headers.insert(http::header::DATE, v);
                }
            }
        }
    }
    Ok(Response::from_parts(parts, body.boxed()))
}

fn injected_reset() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "injected reset")
}

fn status_body_msg(code: u16, msg: &str) -> Response<ProxyBody> {
    let mut r = status_body(code);
    let body = serde_json::json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code });
    *r.body_mut() = Full::new(Bytes::from(body.to_string()))
        .map_err(|n| match n {})
        .boxed();
    r
}

//! The probe endpoint and the `started` hook (issue 49 items 1 and 2; the
//! wire facts are [`buzz_contract::probe`]).
//!
//! **Why a listener, and why it opens after the startup checks.** A deployer
//! has to learn two things from outside the process: that the harness passed
//! its startup checks (identity, configuration, the agent command: everything
//! [`crate::entry`] refuses with a termination message), and whether it is
//! authenticated to its relay now. The entry point binds the listener only
//! after those checks, so its existence is the first fact
//! ([`STARTED_PATH`]); the run loop flips one flag on the relay's `Live`
//! and `Down`, which answers the second ([`READY_PATH`]). A pod's
//! `postStart` hook waits for the first ([`hook_main`]); its readiness probe
//! asks the second over HTTP, which costs the kubelet a connection, not a
//! process in the container (an `exec` probe would start one per period per
//! pod, and each would carry the container's environment, the key included).
//!
//! **What it exposes.** Anyone who can reach the pod's IP can ask; the answer
//! is one word, and says no more than the agent's presence already
//! publishes. A request is read for at most [`READ_BOUND`] and
//! [`MAX_HEAD`] bytes; at most [`MAX_CONNECTIONS`] are served at once, and
//! the rest are closed unanswered.

use buzz_contract::probe::{PROBE_ADDR_ENV, READY_PATH, STARTED_PATH, WAIT_FLAG};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest a request head may take to arrive.
pub const READ_BOUND: Duration = Duration::from_secs(2);
/// The most bytes of a request head read.
pub const MAX_HEAD: usize = 1024;
/// Connections answered at once; more are closed unanswered.
pub const MAX_CONNECTIONS: usize = 8;
/// The hook's bound when `--wait` is not given.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// How often the hook asks.
const HOOK_POLL: Duration = Duration::from_millis(20);

/// One answer: the status line's code and the one-word body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: &'static str,
    /// `HEAD`: the same status, no body.
    pub head_only: bool,
}

impl Answer {
    fn new(status: u16, body: &'static str) -> Answer {
        Answer {
            status,
            body,
            head_only: false,
        }
    }

    /// The whole HTTP/1.1 response.
    pub fn to_bytes(self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Service Unavailable",
        };
        let body = if self.head_only { "" } else { self.body };
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            self.status,
            self.body.len(),
        )
        .into_bytes()
    }
}

/// The answer to a request whose head starts with `head` (pure: one row per
/// path, [`buzz_contract::probe`]'s table). `live`: the relay session is
/// authenticated and live.
pub fn answer(head: &[u8], live: bool) -> Answer {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Answer::new(400, "bad request\n");
    };
    if !version.starts_with("HTTP/1.") {
        return Answer::new(400, "bad request\n");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Answer::new(405, "method not allowed\n"),
    };
    let path = target.split('?').next().unwrap_or_default();
    let a = match path {
        STARTED_PATH => Answer::new(200, "started\n"),
        READY_PATH if live => Answer::new(200, "online\n"),
        READY_PATH => Answer::new(503, "not connected\n"),
        _ => Answer::new(404, "not found\n"),
    };
    Answer { head_only, ..a }
}

/// Why the probe address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{PROBE_ADDR_ENV} must be host:port with a numeric host (e.g. 0.0.0.0:4785)")]
    Addr,
    #[error("{PROBE_ADDR_ENV}: cannot listen on {addr}: {cause}")]
    Bind { addr: SocketAddr, cause: String },
}

/// Parses the probe address (`ip:port`).
pub fn parse_addr(raw: &str) -> Result<SocketAddr, ProbeError> {
    raw.trim().parse().map_err(|_| ProbeError::Addr)
}

/// Binds the listener: called once the startup checks passed.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, ProbeError> {
    let bind_err = |e: std::io::Error| ProbeError::Bind {
        addr,
        cause: e.to_string(),
    };
    let l = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    l.set_nonblocking(true).map_err(bind_err)?;
    Ok(l)
}

/// The run loop's handle: whether the relay session is live now.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    live: Arc<AtomicBool>,
}

impl Probe {
    /// Serves `listener` (if any) until the runtime ends.
    pub fn serve(listener: Option<std::net::TcpListener>) -> Probe {
        let probe = Probe::default();
        if let Some(l) = listener {
            match tokio::net::TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::spawn(accept_loop(l, probe.live.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "the probe endpoint could not be served"),
            }
        }
        probe
    }

    /// The relay session went live (`true`) or down, or the harness is stopping.
    pub fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::Relaxed);
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, live: Arc<AtomicBool>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, most likely: let the agents have them a moment.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed unanswered
        };
        let live = live.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(READ_BOUND, respond(stream, &live)).await;
        });
    }
}

async fn respond(mut stream: tokio::net::TcpStream, live: &AtomicBool) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    while head.len() < MAX_HEAD && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let a = answer(&head, live.load(Ordering::Relaxed));
    stream.write_all(&a.to_bytes()).await?;
    stream.shutdown().await
}

/// The address the hook asks: the probe address, with an unspecified host
/// (`0.0.0.0`, `::`) replaced by the loopback of its family.
pub fn hook_target(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Parses the hook's arguments (after [`buzz_contract::probe::STARTED_ARG`]):
/// nothing, or `--wait <secs>`.
pub fn hook_wait(args: &[String]) -> Result<Duration, String> {
    match args {
        [] => Ok(DEFAULT_WAIT),
        [flag, secs] if flag == WAIT_FLAG => match secs.parse::<u64>() {
            Ok(s) if s > 0 => Ok(Duration::from_secs(s)),
            _ => Err(format!("{WAIT_FLAG} takes a whole number of seconds above zero")),
        },
        _ => Err(format!("usage: buzz-acp started [{WAIT_FLAG} SECONDS]")),
    }
}

/// One ask of [`STARTED_PATH`]: true on a `200`.
fn started_once(target: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&target, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let request = format!("GET {STARTED_PATH} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut status = [0u8; 12];
    s.read_exact(&mut status).is_ok() && &status == b"HTTP/1.1 200"
}

/// `buzz-acp started [--wait SECS]`: the container's `postStart` hook. It
/// exits 0 once the harness in this container answers [`STARTED_PATH`], and
/// 1 when the bound passes first. A harness that exits at startup ends the
/// container's processes, this one with them: the kubelet then reports the
/// harness's own exit code and termination message.
///
/// The hook runs with the container's environment, the agent's key in it:
/// it makes itself non-dumpable first, as PID 1 does, so no other process of
/// the container can read that environment through `/proc`.
pub fn hook_main(args: &[String]) -> ! {
    crate::pid1::seal_self();
    let wait = match hook_wait(args) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("buzz-acp started: {e}");
            std::process::exit(crate::exit::Exit::Config.code());
        }
    };
    let addr = match std::env::var(PROBE_ADDR_ENV).map(|a| parse_addr(&a)) {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            eprintln!("buzz-acp started: {e}");
            std::process::exit(crate::exit::Exit::Config.code());
        }
        Err(_) => {
            eprintln!(
                "buzz-acp started: {PROBE_ADDR_ENV} is not set; the hook asks the harness's probe endpoint"
            );
            std::process::exit(crate::exit::Exit::Config.code());
        }
    };
    let target = hook_target(addr);
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if started_once(target) {
            println!("the harness passed its startup checks");
            std::process::exit(0);
        }
        std::thread::sleep(HOOK_POLL);
    }
    eprintln!(
        "buzz-acp started: the harness did not pass its startup checks within {} s (its log says why)",
        wait.as_secs()
    );
    std::process::exit(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes()
    }

    #[test]
    fn ready_answers_200_only_while_live() {
        assert_eq!(answer(&get(READY_PATH), true).status, 200);
        assert_eq!(answer(&get(READY_PATH), false).status, 503);
        assert_eq!(answer(&get("/readyz?verbose"), true).status, 200);
    }

    #[test]
    fn started_answers_200_whatever_the_relay() {
        assert_eq!(answer(&get(STARTED_PATH), false).status, 200);
        assert_eq!(answer(&get(STARTED_PATH), true).status, 200);
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(answer(&get("/"), true).status, 404);
        assert_eq!(answer(b"POST /readyz HTTP/1.1\r\n\r\n", true).status, 405);
        assert_eq!(answer(b"GET /readyz\r\n\r\n", true).status, 400);
        assert_eq!(answer(b"\x16\x03\x01\x02\x00", true).status, 400);
        assert_eq!(answer(b"", true).status, 400);
    }

    #[test]
    fn head_has_the_status_and_no_body() {
        let a = answer(b"HEAD /readyz HTTP/1.1\r\n\r\n", true);
        assert_eq!((a.status, a.head_only), (200, true));
        let text = String::from_utf8(a.to_bytes()).unwrap();
        assert!(
            text.ends_with("\r\n\r\n") && text.contains("Content-Length: 7"),
            "{text}"
        );
    }

    #[test]
    fn the_hook_asks_loopback_for_an_unspecified_host() {
        let t = hook_target(parse_addr("0.0.0.0:4785").unwrap());
        assert_eq!(t.to_string(), "127.0.0.1:4785");
        let t = hook_target(parse_addr("[::]:9").unwrap());
        assert_eq!(t.to_string(), "[::1]:9");
        let t = hook_target(parse_addr("10.0.0.7:9").unwrap());
        assert_eq!(t.to_string(), "10.0.0.7:9");
        assert!(parse_addr("localhost:4785").is_err());
    }

    #[test]
    fn the_hook_takes_a_bound_or_none() {
        assert_eq!(hook_wait(&[]).unwrap(), DEFAULT_WAIT);
        let args = [WAIT_FLAG.to_string(), "5".to_string()];
        assert_eq!(hook_wait(&args).unwrap(), Duration::from_secs(5));
        assert!(hook_wait(&[WAIT_FLAG.to_string(), "0".to_string()]).is_err());
        assert!(hook_wait(&["--nope".to_string()]).is_err());
    }

    /// The real listener: the hook's ask succeeds only once it is bound, and
    /// readiness follows the flag.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_listener_answers_what_the_flag_says() {
        let l = bind(parse_addr("127.0.0.1:0").unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let free = {
            let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            other.local_addr().unwrap()
        };
        assert!(
            !tokio::task::spawn_blocking(move || started_once(free))
                .await
                .unwrap()
        );
        let probe = Probe::serve(Some(l));
        assert!(
            tokio::task::spawn_blocking(move || started_once(addr))
                .await
                .unwrap()
        );
        let ready = |addr| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(&get(READY_PATH)).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(ready(addr).await.starts_with("HTTP/1.1 503"));
        probe.set_live(true);
        let out = ready(addr).await;
        assert!(
            out.starts_with("HTTP/1.1 200") && out.ends_with("online\n"),
            "{out}"
        );
        probe.set_live(false);
        assert!(ready(addr).await.starts_with("HTTP/1.1 503"));
    }
}

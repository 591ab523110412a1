//! The Start page's request guard, pure: which requests are served.
//!
//! - `Host` must be exactly the bound loopback `address:port` (DNS rebinding:
//!   a foreign name resolving to 127.0.0.1 carries its own name in `Host`).
//! - `Origin`, when present, must be the page's own `http://address:port`
//!   (cross-site requests and other local ports are refused; CSRF).
//! - `Sec-Fetch-Site`, when present on an API call, must be `same-origin`.
//! - Every `/api/` call carries `Authorization: Bearer <token>`; the token is
//!   256 bits from the OS RNG, handed over once in the URL fragment printed at
//!   start (`#token=…`: a fragment never reaches a server, a log or a
//!   `Referer`). The page keeps it in `sessionStorage`. A custom header cannot
//!   be sent cross-origin without a CORS preflight, which is never answered.

use std::net::SocketAddr;

/// Why a request was refused (status and a fixed message; nothing echoed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 421: the `Host` is not the bound address.
    WrongHost,
    /// 403: a foreign `Origin` or a cross-site fetch.
    ForeignOrigin,
    /// 401: no token or a wrong one.
    NoToken,
}

impl Refusal {
    /// HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            Refusal::WrongHost => 421,
            Refusal::ForeignOrigin => 403,
            Refusal::NoToken => 401,
        }
    }

    /// The fixed message.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::WrongHost => "this page answers only to its own loopback address",
            Refusal::ForeignOrigin => "cross-origin requests are refused",
            Refusal::NoToken => "missing or wrong token: open the URL printed by `buzz-launcher ui`",
        }
    }
}

/// The guard for one bound address.
#[derive(Clone)]
pub struct Guard {
    host: String,
    origin: String,
    token: String,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The request headers the guard reads.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen<'a> {
    pub path: &'a str,
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
    pub authorization: Option<&'a str>,
}

/// Byte-wise comparison whose time does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Guard {
    /// A guard for `addr` with `token`.
    pub fn new(addr: SocketAddr, token: String) -> Guard {
        let host = addr.to_string();
        Guard {
            origin: format!("http://{host}"),
            host,
            token,
        }
    }

    /// `address:port` as the page's URL names it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The URL printed at start (the only place the token appears).
    pub fn start_url(&self) -> String {
        format!("{}/#token={}", self.origin, self.token)
    }

    /// Decides one request.
    pub fn check(&self, r: &Seen<'_>) -> Result<(), Refusal> {
        if !r.host.is_some_and(|h| h.eq_ignore_ascii_case(&self.host)) {
            return Err(Refusal::WrongHost);
        }
        if r.origin.is_some_and(|o| o != self.origin) {
            return Err(Refusal::ForeignOrigin);
        }
        if r.path.starts_with("/api/") {
            if r.sec_fetch_site.is_some_and(|s| s != "same-origin") {
                return Err(Refusal::ForeignOrigin);
            }
            let given = r
                .authorization
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap_or("");
            if !same(given.as_bytes(), self.token.as_bytes()) {
                return Err(Refusal::NoToken);
            }
        }
        Ok(())
    }
}

/// A fresh 256-bit token from the OS RNG, hex.
pub fn new_token() -> Result<String, rand::rand_core::OsError> {
    use rand::TryRngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut b)?;
    Ok(hex::encode(b))
}

/// True for a loopback listen address (the only kind the page binds).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g() -> Guard {
        Guard::new("127.0.0.1:4000".parse().unwrap(), "t".repeat(64))
    }

    fn api<'a>(auth: Option<&'a str>) -> Seen<'a> {
        Seen {
            path: "/api/agents",
            host: Some("127.0.0.1:4000"),
            authorization: auth,
            ..Seen::default()
        }
    }

    #[test]
    fn api_needs_the_token() {
        let good = format!("Bearer {}", "t".repeat(64));
        assert_eq!(g().check(&api(Some(&good))), Ok(()));
        assert_eq!(g().check(&api(None)), Err(Refusal::NoToken));
        assert_eq!(g().check(&api(Some("Bearer x"))), Err(Refusal::NoToken));
        // Static assets need no token but the right host.
        let page = Seen {
            path: "/",
            ..api(None)
        };
        assert_eq!(g().check(&page), Ok(()));
    }

    #[test]
    fn foreign_host_and_origin_are_refused() {
        let good = format!("Bearer {}", "t".repeat(64));
        let rebound = Seen {
            host: Some("evil.example:4000"),
            ..api(Some(&good))
        };
        assert_eq!(g().check(&rebound), Err(Refusal::WrongHost));
        let other_port = Seen {
            host: Some("127.0.0.1:4001"),
            ..api(Some(&good))
        };
        assert_eq!(g().check(&other_port), Err(Refusal::WrongHost));
        let no_host = Seen {
            host: None,
            ..api(Some(&good))
        };
        assert_eq!(g().check(&no_host), Err(Refusal::WrongHost));
        let foreign = Seen {
            origin: Some("http://127.0.0.1:4001"),
            ..api(Some(&good))
        };
        assert_eq!(g().check(&foreign), Err(Refusal::ForeignOrigin));
        let own = Seen {
            origin: Some("http://127.0.0.1:4000"),
            ..api(Some(&good))
        };
        assert_eq!(g().check(&own), Ok(()));
        let cross = Seen {
            sec_fetch_site: Some("same-site"),
            ..api(Some(&good))
        };
        assert_eq!(g().check(&cross), Err(Refusal::ForeignOrigin));
    }

    #[test]
    fn tokens_are_256_bit_and_fresh() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn only_loopback_listens() {
        assert!(is_loopback(&"127.0.0.1:1".parse().unwrap()));
        assert!(is_loopback(&"[::1]:1".parse().unwrap()));
        assert!(!is_loopback(&"0.0.0.0:1".parse().unwrap()));
        assert!(!is_loopback(&"192.0.2.1:1".parse().unwrap()));
    }
}

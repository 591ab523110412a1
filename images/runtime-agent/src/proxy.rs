//! Egress proxy settings and the route to the ingest (runtime-agent-backend-contract.md
//! §3: "The data plane MUST work over HTTP/1.1 through enterprise proxies"; review
//! b30b1a0 finding 15).
//!
//! The collector reads exactly [`PROXY_READ_NAMES`] through a lookup, apart from
//! [`crate::config`]'s settings, so the sidecar env allowlist can take these names in
//! one place. Each name is read upper case first, then lower case (as Go's
//! `httpproxy` does); an empty value counts as unset. Errors name the variable, never
//! its value (a proxy URL may carry credentials).
//!
//! - `HTTPS_PROXY` routes an `https://` ingest through the proxy with `CONNECT
//!   host:port` (the TLS session is end to end, the proxy sees only the authority).
//! - `HTTP_PROXY` routes an `http://` ingest through the proxy as a forward proxy
//!   (absolute-form request line).
//! - A proxy URL is `http://[user:password@]host[:port][/]` (port 80 by default; a bare
//!   `host:port` is taken as `http://`); `user:password` (percent-decoded) is sent as
//!   `Proxy-Authorization: Basic …` and appears in no `Debug` or error output. An
//!   `https://` proxy (TLS to the proxy itself) is refused as unsupported.
//! - `NO_PROXY`: comma- or space-separated entries, case-insensitive: `*` (nothing is
//!   proxied); a host name, which matches itself and its subdomains (`example.com`
//!   matches `ingest.example.com`), with or without a leading dot; an IP address; a
//!   CIDR block (`10.0.0.0/8`, `fd00::/8`); any of these with `:port` to match one
//!   port only.
//! - A loopback target (`localhost`, `*.localhost`, 127.0.0.0/8, ::1) is never proxied,
//!   as in Go's `httpproxy`: a proxy cannot reach the pod's own loopback.
//!
//! [`ProxySettings::route`] is pure; [`crate::http`] applies it once per transport,
//! since the ingest URL is fixed for the process.

use std::fmt;
use std::net::IpAddr;

use base64::Engine;

/// `HTTPS_PROXY`.
pub const HTTPS_PROXY: &str = "HTTPS_PROXY";
/// `HTTP_PROXY`.
pub const HTTP_PROXY: &str = "HTTP_PROXY";
/// `NO_PROXY`.
pub const NO_PROXY: &str = "NO_PROXY";

/// Every environment variable the proxy settings read (for the sidecar allowlist).
pub const PROXY_READ_NAMES: [&str; 6] = [
    HTTPS_PROXY,
    "https_proxy",
    HTTP_PROXY,
    "http_proxy",
    NO_PROXY,
    "no_proxy",
];

/// A proxy setting that cannot be used (the variable's name only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("{name} is invalid: {reason}")]
    Invalid {
        name: &'static str,
        reason: &'static str,
    },
}

/// One proxy: where it is and the credentials it wants.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `Basic <base64(user:password)>`, when the URL carried credentials.
    authorization: Option<String>,
}

impl Proxy {
    /// The `Proxy-Authorization` value, if any.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// `host:port` for a connect (IPv6 in brackets).
    pub fn authority(&self) -> String {
        authority(&self.host, self.port)
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// `host:port`, bracketing an IPv6 address.
pub fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NoProxyEntry {
    All,
    /// A host name suffix (lower case, no leading dot).
    Domain(String, Option<u16>),
    Ip(IpAddr, Option<u16>),
    Cidr(IpAddr, u8),
}

/// The egress proxy settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySettings {
    https: Option<Proxy>,
    http: Option<Proxy>,
    no_proxy: Vec<NoProxyEntry>,
}

/// How to reach a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// Connect to the target itself.
    Direct,
    /// `CONNECT` through this proxy, then TLS end to end (an `https://` target).
    Tunnel(&'a Proxy),
    /// Send the request to this proxy in absolute form (an `http://` target).
    Forward(&'a Proxy),
}

fn percent_decode(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parse one proxy URL (see the module doc).
fn parse_proxy(name: &'static str, value: &str) -> Result<Proxy, ProxyError> {
    let invalid = |reason| ProxyError::Invalid { name, reason };
    let value = value.trim();
    let rest = match value.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(invalid("an https:// proxy (TLS to the proxy) is not supported"));
        }
        Some(_) => return Err(invalid("not an http:// proxy URL")),
        None => value,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err(invalid("a proxy URL has no path, query or fragment"));
    }
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or(invalid("an unclosed IPv6 bracket"))?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or(invalid("the port is not a number in 1..=65535"))?,
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b':'));
    if !host_ok || (host.contains(':') && host.parse::<IpAddr>().is_err()) {
        return Err(invalid("the proxy host is not a host name or IP address"));
    }
    let authorization = match userinfo {
        None => None,
        Some(u) => {
            let (user, password) = u.split_once(':').unwrap_or((u, ""));
            let user =
                percent_decode(user).ok_or(invalid("the credentials are not percent-encoded UTF-8"))?;
            let password =
                percent_decode(password).ok_or(invalid("the credentials are not percent-encoded UTF-8"))?;
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            Some(format!("Basic {token}"))
        }
    };
    Ok(Proxy {
        host: host.to_ascii_lowercase(),
        port,
        authorization,
    })
}

fn parse_no_proxy(value: &str) -> Vec<NoProxyEntry> {
    value
        .split([',', ' '])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|entry| {
            let entry = entry.to_ascii_lowercase();
            if entry == "*" {
                return Some(NoProxyEntry::All);
            }
            if let Some((net, bits)) = entry.split_once('/') {
                let ip = net.parse::<IpAddr>().ok()?;
                let bits = bits.parse::<u8>().ok()?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                return (bits <= max).then_some(NoProxyEntry::Cidr(ip, bits));
            }
            if let Ok(ip) = entry.trim_matches(['[', ']']).parse::<IpAddr>() {
                return Some(NoProxyEntry::Ip(ip, None));
            }
            let (host, port) = match entry.rsplit_once(':') {
                Some((h, p)) => (h, Some(p.parse::<u16>().ok()?)),
                None => (entry.as_str(), None),
            };
            if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
                return Some(NoProxyEntry::Ip(ip, port));
            }
            let domain = host.trim_start_matches("*.").trim_start_matches('.');
            (!domain.is_empty()).then(|| NoProxyEntry::Domain(domain.to_owned(), port))
        })
        .collect()
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl ProxySettings {
    /// No proxy at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Read [`PROXY_READ_NAMES`] through `lookup` (the process env in the binary).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ProxyError> {
        let get = |upper: &'static str| {
            lookup(upper)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| lookup(&upper.to_ascii_lowercase()).filter(|v| !v.trim().is_empty()))
        };
        let proxy = |name: &'static str| get(name).map(|v| parse_proxy(name, &v)).transpose();
        Ok(Self {
            https: proxy(HTTPS_PROXY)?,
            http: proxy(HTTP_PROXY)?,
            no_proxy: get(NO_PROXY).map(|v| parse_no_proxy(&v)).unwrap_or_default(),
        })
    }

    /// Whether any proxy is configured.
    pub fn is_empty(&self) -> bool {
        self.https.is_none() && self.http.is_none()
    }

    fn excluded(&self, host: &str, port: u16) -> bool {
        let ip = host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
        self.no_proxy.iter().any(|e| match e {
            NoProxyEntry::All => true,
            NoProxyEntry::Domain(d, p) => {
                p.is_none_or(|p| p == port)
                    && (host == d
                        || host
                            .strip_suffix(d.as_str())
                            .is_some_and(|pre| pre.ends_with('.')))
            }
            NoProxyEntry::Ip(addr, p) => p.is_none_or(|p| p == port) && ip == Some(*addr),
            NoProxyEntry::Cidr(net, bits) => ip.is_some_and(|ip| in_cidr(ip, *net, *bits)),
        })
    }

    /// How to reach `scheme://host:port`.
    pub fn route(&self, scheme: &str, host: &str, port: u16) -> Route<'_> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host = host.trim_matches(['[', ']']);
        if is_loopback(host) || self.excluded(host, port) {
            return Route::Direct;
        }
        match scheme {
            "https" => self.https.as_ref().map_or(Route::Direct, Route::Tunnel),
            "http" => self.http.as_ref().map_or(Route::Direct, Route::Forward),
            _ => Route::Direct,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    fn settings(pairs: &[(&str, &str)]) -> ProxySettings {
        let env: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProxySettings::from_lookup(|n| env.get(n).cloned()).unwrap()
    }

    #[test]
    fn reads_exactly_the_proxy_names_upper_case_first() {
        // Nothing set: every name is asked for, and nothing else.
        let asked = RefCell::new(Vec::new());
        let none = ProxySettings::from_lookup(|n| {
            asked.borrow_mut().push(n.to_owned());
            None
        })
        .unwrap();
        assert!(none.is_empty());
        let mut asked = asked.into_inner();
        asked.sort();
        let mut expected: Vec<String> = PROXY_READ_NAMES.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(asked, expected);
        // Upper case wins; an empty value counts as unset.
        let s = ProxySettings::from_lookup(|n| match n {
            "https_proxy" => Some("http://lower:1".into()),
            "HTTPS_PROXY" => Some("http://upper:2".into()),
            "http_proxy" => Some("http://only-lower:3".into()),
            "HTTP_PROXY" => Some(" ".into()),
            other => {
                assert!(PROXY_READ_NAMES.contains(&other), "asked for {other}");
                None
            }
        })
        .unwrap();
        let Route::Tunnel(p) = s.route("https", "ingest.example.com", 443) else {
            panic!("not tunnelled")
        };
        assert_eq!((p.host.as_str(), p.port), ("upper", 2));
        let Route::Forward(p) = s.route("http", "ingest.example.com", 80) else {
            panic!("not forwarded")
        };
        assert_eq!(p.authority(), "only-lower:3");
    }

    #[test]
    fn proxy_urls_and_their_credentials() {
        let p = parse_proxy(HTTPS_PROXY, "http://us%40er:p%3Ass@Proxy.Corp:3128/").unwrap();
        assert_eq!(p.authority(), "proxy.corp:3128");
        // base64("us@er:p:ss")
        assert_eq!(p.authorization(), Some("Basic dXNAZXI6cDpzcw=="));
        assert!(!format!("{p:?}").contains("dXNA"), "credentials in Debug");
        assert_eq!(
            parse_proxy(HTTPS_PROXY, "proxy:8080").unwrap().authority(),
            "proxy:8080"
        );
        assert_eq!(parse_proxy(HTTPS_PROXY, "http://proxy").unwrap().port, 80);
        assert_eq!(
            parse_proxy(HTTPS_PROXY, "http://[fd00::1]:3128")
                .unwrap()
                .authority(),
            "[fd00::1]:3128"
        );
        for bad in [
            "https://proxy:443",
            "socks5://proxy:1080",
            "http://proxy:0",
            "http://proxy:99999",
            "http://proxy/path",
            "http://",
            "http://[fd00::1",
            "http://pro xy:1",
            "http://u:%zz@proxy:1",
        ] {
            let err = parse_proxy(HTTPS_PROXY, bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    ProxyError::Invalid {
                        name: HTTPS_PROXY,
                        ..
                    }
                ),
                "{bad}"
            );
            assert!(!err.to_string().contains("proxy:"), "the value leaked: {err}");
        }
        let err = ProxySettings::from_lookup(|n| (n == "http_proxy").then(|| "ftp://secret@x".to_owned()))
            .unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }

    #[test]
    fn no_proxy_entries_and_loopback() {
        let s = settings(&[
            (HTTPS_PROXY, "http://proxy:3128"),
            (HTTP_PROXY, "http://proxy:3128"),
            (
                NO_PROXY,
                "example.com, .corp.internal,10.0.0.0/8 fd00::/8,192.168.1.7,api.test:8443",
            ),
        ]);
        for (scheme, host, port) in [
            ("https", "example.com", 443),
            ("https", "ingest.EXAMPLE.com", 443),
            ("https", "a.corp.internal", 443),
            ("https", "corp.internal", 443),
            ("https", "10.1.2.3", 443),
            ("https", "[fd00::5]", 443),
            ("https", "192.168.1.7", 443),
            ("https", "api.test", 8443),
            ("http", "localhost", 80),
            ("http", "127.0.0.1", 8470),
            ("http", "[::1]", 8470),
            ("http", "ingest.localhost", 80),
        ] {
            assert_eq!(s.route(scheme, host, port), Route::Direct, "{host}:{port}");
        }
        for (scheme, host, port) in [
            ("https", "notexample.com", 443),
            ("https", "11.0.0.1", 443),
            ("https", "192.168.1.8", 443),
            ("https", "api.test", 443),
            ("http", "ingest.example.org", 80),
        ] {
            assert_ne!(s.route(scheme, host, port), Route::Direct, "{host}:{port}");
        }
        assert!(matches!(s.route("https", "x.org", 443), Route::Tunnel(_)));
        assert!(matches!(s.route("http", "x.org", 80), Route::Forward(_)));
        let all = settings(&[(HTTPS_PROXY, "http://proxy:3128"), ("no_proxy", "*")]);
        assert_eq!(all.route("https", "x.org", 443), Route::Direct);
        assert!(ProxySettings::none().is_empty());
        assert_eq!(ProxySettings::none().route("https", "x.org", 443), Route::Direct);
    }
}

//! The URLs this relay answers to, for NIP-42's `relay` tag check (pure, no
//! I/O: the bound address and the interface addresses come in as data).
//!
//! NIP-42: the relay MUST check that the AUTH event's `relay` tag names
//! *this* relay. Without the check an AUTH signed for another relay R′
//! (nostr-sdk signs any challenge at once, with `relay=R′`) can be forwarded
//! by R′'s operator within our auth window and admits them as the owner
//! (review b30b1a0 finding 2). The tag is compared after normalisation:
//!
//! - scheme `ws`/`wss` only, case-insensitive; host case-insensitive (the
//!   `url` crate's WHATWG parsing);
//! - the default port is explicit (`ws` 80, `wss` 443), so
//!   `wss://relay.example` equals `wss://relay.example:443`;
//! - one trailing `/` of the path is ignored (`ws://h:1/` equals `ws://h:1`);
//! - a query, a fragment or user info make a URL that is not ours.
//!
//! Our own URLs are `ws://<bound addr>`; for a loopback bind also
//! `ws://localhost:<port>`; for an unspecified bind (`0.0.0.0`, `::`, only
//! with `allow_public`) `ws://<each interface address>:<port>` plus the
//! loopback names; and every configured public URL (the `wss://…` of a TLS
//! reverse proxy in front of the relay, README "The embedded relay"). The
//! WebSocket handshake's `Host` header is never used: the peer writes it, so
//! a forwarding relay would simply send the name it signed for.

use nostr_sdk::prelude::Url;
use std::net::{IpAddr, SocketAddr};

/// A configured public URL that cannot be one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the public relay URL {url:?} is not usable: {reason}")]
pub struct BadPublicUrl {
    /// The URL as configured.
    pub url: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// A URL in comparable form: `scheme://host:port/path` (no trailing slash).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CanonicalUrl(String);

impl CanonicalUrl {
    /// The comparable text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a URL has no canonical relay form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlProblem {
    /// Not a URL at all.
    Unparsable,
    /// Not `ws://` or `wss://`.
    Scheme,
    /// No host.
    NoHost,
    /// Carries user info, a query or a fragment.
    Extras,
}

impl UrlProblem {
    fn text(self) -> &'static str {
        match self {
            UrlProblem::Unparsable => "it is not a URL",
            UrlProblem::Scheme => "its scheme is not ws:// or wss://",
            UrlProblem::NoHost => "it has no host",
            UrlProblem::Extras => "it carries user info, a query or a fragment",
        }
    }
}

/// The canonical form of a relay URL.
pub fn canonical(url: &str) -> Result<CanonicalUrl, UrlProblem> {
    let u = Url::parse(url.trim()).map_err(|_| UrlProblem::Unparsable)?;
    let scheme = u.scheme();
    if scheme != "ws" && scheme != "wss" {
        return Err(UrlProblem::Scheme);
    }
    if !u.username().is_empty() || u.password().is_some() || u.query().is_some() || u.fragment().is_some() {
        return Err(UrlProblem::Extras);
    }
    let host = u.host_str().filter(|h| !h.is_empty()).ok_or(UrlProblem::NoHost)?;
    let port = u.port_or_known_default().ok_or(UrlProblem::Scheme)?;
    let path = u.path().strip_suffix('/').unwrap_or(u.path());
    Ok(CanonicalUrl(format!("{scheme}://{host}:{port}{path}")))
}

fn ws_url(ip: IpAddr, port: u16) -> String {
    format!("ws://{}", SocketAddr::new(ip, port))
}

/// The set of URLs this relay answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnUrls(Vec<CanonicalUrl>);

impl OwnUrls {
    /// The URLs of a relay bound to `bound`. `interfaces` are this machine's
    /// addresses, used only when `bound` is unspecified; `public` are the
    /// configured public URLs.
    pub fn new(bound: SocketAddr, interfaces: &[IpAddr], public: &[String]) -> Result<OwnUrls, BadPublicUrl> {
        let port = bound.port();
        let mut raw = vec![ws_url(bound.ip(), port)];
        let ip = bound.ip();
        if ip.is_unspecified() {
            raw.extend(interfaces.iter().map(|a| ws_url(*a, port)));
        }
        if ip.is_loopback() || ip.is_unspecified() {
            raw.push(format!("ws://localhost:{port}"));
        }
        let mut urls: Vec<CanonicalUrl> = raw.iter().filter_map(|u| canonical(u).ok()).collect();
        for p in public {
            let c = canonical(p).map_err(|problem| BadPublicUrl {
                url: p.clone(),
                reason: problem.text(),
            })?;
            urls.push(c);
        }
        urls.sort();
        urls.dedup();
        Ok(OwnUrls(urls))
    }

    /// Whether `tag_value` (an AUTH event's `relay` tag) names this relay.
    pub fn contains(&self, tag_value: &str) -> bool {
        canonical(tag_value).is_ok_and(|c| self.0.contains(&c))
    }

    /// The URLs, canonical (for a refusal's text: they are public).
    pub fn list(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(CanonicalUrl::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(bound: &str, public: &[&str]) -> OwnUrls {
        let public: Vec<String> = public.iter().map(|s| s.to_string()).collect();
        OwnUrls::new(bound.parse().unwrap(), &[], &public).unwrap()
    }

    #[test]
    fn the_bound_address_matches_with_or_without_a_trailing_slash_and_in_any_case() {
        let o = own("127.0.0.1:7777", &[]);
        for ok in [
            "ws://127.0.0.1:7777",
            "ws://127.0.0.1:7777/",
            "WS://127.0.0.1:7777",
            " ws://127.0.0.1:7777 ",
            "ws://localhost:7777",
            "ws://LOCALHOST:7777/",
        ] {
            assert!(o.contains(ok), "{ok}");
        }
        for bad in [
            "ws://127.0.0.1:7778",
            "wss://127.0.0.1:7777",
            "ws://127.0.0.1:7777/other",
            "ws://127.0.0.1:7777/?x=1",
            "ws://127.0.0.1:7777#f",
            "ws://user@127.0.0.1:7777",
            "http://127.0.0.1:7777",
            "ws://10.0.0.1:7777",
            "wss://evil.example",
            "",
            "not a url",
        ] {
            assert!(!o.contains(bad), "{bad}");
        }
    }

    #[test]
    fn a_public_url_matches_with_its_default_port_spelled_or_not() {
        let o = own("127.0.0.1:7777", &["wss://Relay.Example.com/"]);
        assert!(o.contains("wss://relay.example.com"));
        assert!(o.contains("wss://relay.example.com:443/"));
        assert!(!o.contains("ws://relay.example.com"));
        assert!(!o.contains("wss://relay.example.com:8443"));
        let p = own("127.0.0.1:7777", &["ws://box.lan:80/nostr"]);
        assert!(p.contains("ws://box.lan/nostr/"));
        assert!(!p.contains("ws://box.lan/"));
    }

    #[test]
    fn an_unspecified_bind_answers_to_each_interface_address_only() {
        let lan: IpAddr = "192.168.1.5".parse().unwrap();
        let v6: IpAddr = "fd00::5".parse().unwrap();
        let o = OwnUrls::new("0.0.0.0:9000".parse().unwrap(), &[lan, v6], &[]).unwrap();
        assert!(o.contains("ws://192.168.1.5:9000"));
        assert!(o.contains("ws://[fd00::5]:9000/"));
        assert!(o.contains("ws://localhost:9000"));
        assert!(!o.contains("ws://192.168.1.6:9000"));
        // Interfaces only count for an unspecified bind.
        let lo = OwnUrls::new("127.0.0.1:9000".parse().unwrap(), &[lan], &[]).unwrap();
        assert!(!lo.contains("ws://192.168.1.5:9000"));
    }

    #[test]
    fn an_unusable_public_url_is_refused_by_name() {
        let bad = |u: &str| OwnUrls::new("127.0.0.1:1".parse().unwrap(), &[], &[u.to_string()]).unwrap_err();
        assert_eq!(bad("https://relay.example").reason, UrlProblem::Scheme.text());
        assert_eq!(bad("relay.example").reason, UrlProblem::Unparsable.text());
        assert_eq!(bad("wss://relay.example/?k=v").reason, UrlProblem::Extras.text());
        assert!(
            bad("https://relay.example")
                .to_string()
                .contains("\"https://relay.example\"")
        );
    }
}

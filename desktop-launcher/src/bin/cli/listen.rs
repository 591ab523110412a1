//! `--listen HOST:PORT` of `ui` and `relay` (issue 24 item 5 "`ui` accepts
//! `localhost:PORT`"): a socket address (`127.0.0.1:8080`, `[::1]:8080`)
//! or a host name and a port. `localhost` is 127.0.0.1 without a lookup (a
//! hosts file may list `::1` first, and the page's URL should not depend on
//! it); another name is resolved and its first loopback address taken,
//! else its first address, which `ui` then refuses by its loopback rule
//! (`relay` by its own, unless `--allow-public`).

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};

const SHAPE: &str =
    "expected HOST:PORT, such as localhost:8080, 127.0.0.1:8080 or [::1]:8080 (PORT 0 picks a free one)";

/// Parses a `--listen` value (a clap value parser).
pub(crate) fn parse(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| SHAPE.to_string())?;
    let port: u16 = port.parse().map_err(|_| SHAPE.to_string())?;
    if host.is_empty() || host.contains(':') {
        return Err(SHAPE.to_string());
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}; {SHAPE}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.ip().is_loopback())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{host} has no address; {SHAPE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_localhost_are_accepted() {
        assert_eq!(parse("127.0.0.1:8080"), Ok("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(parse("[::1]:0"), Ok("[::1]:0".parse().unwrap()));
        assert_eq!(parse("localhost:8080"), Ok("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(parse(" LOCALHOST:0 "), Ok("127.0.0.1:0".parse().unwrap()));
        assert_eq!(parse("0.0.0.0:1"), Ok("0.0.0.0:1".parse().unwrap()));
    }

    #[test]
    fn other_shapes_are_refused_with_examples() {
        for bad in [
            "localhost",
            "8080",
            ":8080",
            "localhost:http",
            "localhost:70000",
            "::1:80",
        ] {
            assert_eq!(parse(bad), Err(SHAPE.to_string()), "{bad}");
        }
    }
}

use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const PK: &str = "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2";
const OTHER: &str = "ffb2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2";

fn relay() -> Destinations {
    Destinations {
        relay: vec![(IpAddr::V4(Ipv4Addr::new(10, 213, 0, 1)), 7777)],
        telemetry: vec![],
    }
}

fn in_cidr(cidr: &str, ip: IpAddr) -> bool {
    let (net, prefix) = cidr.split_once('/').unwrap();
    let (net, prefix): (IpAddr, u8) = (net.parse().unwrap(), prefix.parse().unwrap());
    net.is_ipv4() == ip.is_ipv4() && mask(ip, prefix) == net
}

/// NetworkPolicy's egress semantics, as the API documents them: a
/// connection is let through when some rule has a peer that holds the
/// address (an ipBlock's CIDR minus its excepts; no `to` is any address)
/// and a port entry that holds the port and protocol (no `ports` is any).
fn allows(p: &NetworkPolicy, ip: IpAddr, port: u16, proto: &str) -> bool {
    let spec = p.spec.as_ref().unwrap();
    spec.egress.iter().flatten().any(|r| {
        let to = r.to.as_ref().is_none_or(|peers| {
            peers.iter().any(|peer| {
                let b = peer.ip_block.as_ref().unwrap();
                in_cidr(&b.cidr, ip) && !b.except.iter().flatten().any(|e| in_cidr(e, ip))
            })
        });
        let ports = r.ports.as_ref().is_none_or(|ps| {
            ps.iter().any(|q| {
                let IntOrString::Int(first) = q.port.clone().unwrap() else {
                    panic!("named port")
                };
                let last = q.end_port.unwrap_or(first);
                q.protocol.as_deref() == Some(proto) && (first..=last).contains(&i32::from(port))
            })
        });
        to && ports
    })
}

#[test]
fn the_mode_is_default_unless_none_and_none_takes_no_rules() {
    assert_eq!(parse(None, None).unwrap(), Some(EgressSpec::default()));
    assert_eq!(parse(Some("default"), None).unwrap(), Some(EgressSpec::default()));
    assert_eq!(parse(Some("none"), None).unwrap(), None);
    let e = parse(Some("none"), Some("10.0.0.0/8")).unwrap_err().to_string();
    assert!(e.contains("clear one of them"), "{e}");
    let e = parse(Some("off"), None).unwrap_err().to_string();
    assert!(e.contains("`default`") && e.contains("`none`"), "{e}");
}

#[test]
fn allow_entries_are_cidrs_with_optional_ports() {
    let one = |s: &str| parse_allow(s).unwrap().remove(0);
    let tcp = |first, last| {
        Some(Ports {
            first,
            last,
            protocol: Protocol::Tcp,
        })
    };
    assert_eq!(
        one("10.1.0.0/16"),
        Allow {
            cidr: "10.1.0.0/16".into(),
            ports: None
        }
    );
    assert_eq!(one("10.0.0.5").cidr, "10.0.0.5/32");
    assert_eq!(one("10.0.0.0/8:8080").ports, tcp(8080, None));
    assert_eq!(one("192.168.1.0/24:8000-8100").ports, tcp(8000, Some(8100)));
    assert_eq!(
        one("10.0.0.1:53/UDP").ports,
        Some(Ports {
            first: 53,
            last: None,
            protocol: Protocol::Udp
        })
    );
    assert_eq!(
        one("[fd00::/8]:443"),
        Allow {
            cidr: "fd00::/8".into(),
            ports: tcp(443, None)
        }
    );
    assert_eq!(
        one("fd00::/8"),
        Allow {
            cidr: "fd00::/8".into(),
            ports: None
        }
    );
    assert_eq!(one("[::1]").cidr, "::1/128");
    assert_eq!(
        parse_allow(" 10.0.0.0/8 , ,172.16.0.0/12:5432 ").unwrap().len(),
        2
    );
    assert_eq!(parse_allow("").unwrap(), vec![]);
}

#[test]
fn a_bad_allow_entry_is_named_with_the_form_to_use() {
    for (entry, why) in [
        ("10.1.2.3/8", "the network is 10.0.0.0/8"),
        ("10.0.0.0/33", "not a prefix length"),
        ("relay.local", "not an IP address"),
        ("10.0.0.0/8:0", "not a port"),
        ("10.0.0.0/8:70000", "not a port"),
        ("10.0.0.0/8:90-80", "does not go up"),
        ("10.0.0.0/8:80/icmp", "not tcp, udp or sctp"),
        ("[fd00::/8", "without its `]`"),
        ("[fd00::/8]443", "not `:PORT`"),
        ("fd00::/8:443", "not a prefix length"),
    ] {
        let e = parse_allow(entry).unwrap_err().to_string();
        assert!(
            e.contains(why) && e.contains(entry) && e.contains("[fd00::/8]:443"),
            "{entry}: {e}"
        );
    }
    let many = vec!["10.0.0.0/8"; MAX_ALLOW + 1].join(",");
    assert!(parse_allow(&many).unwrap_err().to_string().contains("at most"));
}

#[test]
fn the_blocked_ranges_are_canonical_cidrs() {
    for (cidr, _) in BLOCKED_V4.iter().chain(BLOCKED_V6.iter()) {
        assert_eq!(canonical_cidr(cidr).as_deref(), Ok(*cidr));
    }
}

#[test]
fn an_endpoint_is_the_urls_host_and_port_or_its_schemes_default() {
    assert_eq!(
        endpoint("wss://relay.example.com"),
        Some(("relay.example.com".into(), 443))
    );
    assert_eq!(
        endpoint("ws://relay.example.com/x"),
        Some(("relay.example.com".into(), 80))
    );
    assert_eq!(endpoint("ws://10.0.0.7:7777"), Some(("10.0.0.7".into(), 7777)));
    assert_eq!(endpoint("ws://[fd00::1]:7"), Some(("fd00::1".into(), 7)));
    assert_eq!(
        endpoint("https://ingest.example.com/v1"),
        Some(("ingest.example.com".into(), 443))
    );
    assert_eq!(endpoint("not a url"), None);
}

#[test]
fn the_policy_selects_exactly_the_agents_pod_and_lets_nothing_in() {
    let p = policy(PK, &EgressSpec::default(), &relay());
    assert_eq!(p.metadata.name.as_deref(), Some(policy_name(PK).as_str()));
    assert_eq!(ownership(&p.metadata, PK), Ownership::Ours);
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(
        spec.pod_selector.as_ref().unwrap().match_labels.as_ref(),
        Some(&crate::podspec::labels(PK))
    );
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_string(), "Egress".to_string()][..])
    );
    assert_eq!(
        spec.ingress.as_deref(),
        Some(&[][..]),
        "no ingress rule: nothing in"
    );
}

#[test]
fn the_default_lets_out_dns_the_relay_and_public_443_only() {
    let p = policy(PK, &EgressSpec::default(), &relay());
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(
        allows(&p, ip("10.213.0.1"), 7777, "TCP"),
        "the relay, on a private range"
    );
    assert!(
        !allows(&p, ip("10.213.0.1"), 7778, "TCP"),
        "the relay's host on another port"
    );
    assert!(!allows(&p, ip("10.213.0.1"), 10250, "TCP"), "the kubelet");
    assert!(allows(&p, ip("10.96.0.10"), 53, "UDP") && allows(&p, ip("10.96.0.10"), 53, "TCP"));
    assert!(allows(&p, ip("104.18.0.1"), 443, "TCP"), "a public model API");
    assert!(
        allows(&p, ip("2606:4700::1"), 443, "TCP"),
        "a public model API over IPv6"
    );
    assert!(!allows(&p, ip("104.18.0.1"), 80, "TCP"));
    assert!(!allows(&p, ip("104.18.0.1"), 443, "UDP"));
    for blocked in [
        "169.254.169.254",
        "10.96.0.1",
        "172.20.0.5",
        "192.168.1.1",
        "100.64.0.1",
        "127.0.0.1",
    ] {
        assert!(!allows(&p, ip(blocked), 443, "TCP"), "{blocked}:443");
    }
    for blocked in ["fd00:ec2::254", "fe80::1", "::1"] {
        assert!(!allows(&p, ip(blocked), 443, "TCP"), "[{blocked}]:443");
    }
}

#[test]
fn the_ingest_and_egress_allow_add_their_own_rules() {
    let to = Destinations {
        telemetry: vec![(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9)), 8443)],
        ..relay()
    };
    let spec = EgressSpec {
        allow: parse_allow("10.50.0.0/16:8000-8100, 192.168.7.7").unwrap(),
    };
    let p = policy(PK, &spec, &to);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(allows(&p, ip("fd00::9"), 8443, "TCP"));
    assert!(!allows(&p, ip("fd00::9"), 8444, "TCP"));
    assert!(allows(&p, ip("10.50.3.4"), 8050, "TCP") && !allows(&p, ip("10.50.3.4"), 8101, "TCP"));
    assert!(allows(&p, ip("192.168.7.7"), 22, "TCP") && allows(&p, ip("192.168.7.7"), 5, "UDP"));
    assert!(!allows(&p, ip("192.168.7.8"), 443, "TCP"));
}

/// An address inside blocked range `i` of [`BLOCKED_V4`] then [`BLOCKED_V6`].
fn in_blocked(i: usize, bits: u128) -> IpAddr {
    let all: Vec<&str> = BLOCKED_V4
        .iter()
        .chain(BLOCKED_V6.iter())
        .map(|(c, _)| *c)
        .collect();
    let (net, prefix) = all[i % all.len()].split_once('/').unwrap();
    let (net, prefix): (IpAddr, u32) = (net.parse().unwrap(), prefix.parse().unwrap());
    match net {
        IpAddr::V4(a) => {
            let host = (bits as u32).checked_shr(prefix).unwrap_or(0);
            IpAddr::V4((u32::from(a) | host).into())
        }
        IpAddr::V6(a) => {
            let host = bits.checked_shr(prefix).unwrap_or(0);
            IpAddr::V6((u128::from(a) | host).into())
        }
    }
}

proptest! {
    /// Nothing on a blocked range is reachable, on 443 least of all, but
    /// DNS and what the config names: the relay here.
    #[test]
    fn no_private_or_link_local_address_is_let_out(
        i in 0usize..BLOCKED_V4.len() + BLOCKED_V6.len(),
        bits in any::<u128>(),
        port in prop_oneof![Just(443u16), Just(80u16), Just(7777u16), 1u16..],
    ) {
        let p = policy(PK, &EgressSpec::default(), &relay());
        let ip = in_blocked(i, bits);
        let relay = (IpAddr::V4(Ipv4Addr::new(10, 213, 0, 1)), 7777);
        if port != 53 && (ip, port) != relay {
            prop_assert!(!allows(&p, ip, port, "TCP"), "{ip}:{port}");
        }
    }
}

fn stored(p: &NetworkPolicy) -> NetworkPolicy {
    // What a read gives back: the apiserver omits an empty list.
    let mut v = serde_json::to_value(p).unwrap();
    v["spec"].as_object_mut().unwrap().remove("ingress");
    v["metadata"]["resourceVersion"] = "7".into();
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_found_policy_is_judged_by_owner_then_rules() {
    let wanted = policy(PK, &EgressSpec::default(), &relay());
    assert_eq!(judge(None, PK, &wanted), Judgement::Absent);
    assert_eq!(judge(Some(&stored(&wanted)), PK, &wanted), Judgement::Current);
    let moved = Destinations {
        relay: vec![(IpAddr::V4(Ipv4Addr::new(10, 213, 0, 2)), 7777)],
        ..relay()
    };
    let old = stored(&policy(PK, &EgressSpec::default(), &moved));
    assert_eq!(judge(Some(&old), PK, &wanted), Judgement::Stale);
    let theirs = stored(&policy(OTHER, &EgressSpec::default(), &relay()));
    assert_eq!(
        judge(Some(&theirs), PK, &wanted),
        Judgement::NotOurs(Mismatch::Label)
    );
    let mut unmarked = stored(&wanted);
    unmarked
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_MANAGED_BY);
    assert_eq!(judge(Some(&unmarked), PK, &wanted), Judgement::Unmarked);
    let mut going = stored(&wanted);
    going.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    assert_eq!(judge(Some(&going), PK, &wanted), Judgement::Terminating);
}

//! The agent pod's NetworkPolicy (issue 53): what an agent's pod may reach.
//! Spec §Pod shape gives the pod no API token and no ingress need (the
//! harness dials out to its relay, spec I1); this adds the network's half:
//! by default, one NetworkPolicy per agent key that lets the pod reach only
//! DNS, its relay, its collector's ingest and public addresses on 443 (the
//! model APIs). Pure: the config's two fields, the policy this provider
//! would create, and the judgement of a policy it found. The shell is
//! `reconcile::egress`; `undeploy` removes the policy.
//!
//! ## The default policy
//! - **No ingress.** The harness listens for nothing but the kubelet's
//!   readiness probe, and traffic from a pod's own node is let through by
//!   every enforcer the Kubernetes docs describe (kube-router among them).
//! - **DNS**: UDP and TCP port 53 to any address. Where a pod's resolver
//!   is differs by cluster (the DNS Service, NodeLocal DNSCache on a
//!   link-local address, the node's own resolver with `dnsPolicy:
//!   Default`), and a pod selector of `kube-dns` fits only some clusters;
//!   port 53 carries DNS wherever the resolver is, and nothing else is let
//!   through to a private address on it.
//! - **The relay**: every address its host resolves to *from the
//!   provider* (an IP literal is itself), on the URL's port (`ws` 80, `wss`
//!   443 when none is given), each as its own rule, so a relay on a
//!   private range, as on most self-hosted clusters, is reachable while the
//!   range stays closed. The same for `telemetry_url`, the collector's
//!   ingest. A relay host that does not resolve from here fails the deploy
//!   unless `egress_allow` names something (then it is the user's to
//!   cover); an ingest host that does not is said and left out (the
//!   collector spools what it cannot ship).
//! - **Public addresses on TCP 443**: `0.0.0.0/0` and `::/0` with every
//!   range in [`BLOCKED_V4`] and [`BLOCKED_V6`] cut out: private, shared
//!   (CGNAT, often a cluster's pod or node range), loopback, link-local
//!   (the cloud metadata endpoint 169.254.169.254 among them) and the IPv6
//!   unique-local and link-local ranges (fd00:ec2::254 among them).
//!   agent-sandbox's default cuts out the same private and link-local
//!   ranges on all ports; model APIs need only 443.
//! - **`egress_allow`**: the user's own rules, each a CIDR with an optional
//!   port or port range and protocol, for an in-cluster model gateway or a
//!   proxy. A rule only adds: NetworkPolicy rules are a union.
//! - `network_policy: none` creates no policy, and removes the one an
//!   earlier default Start made (it would still confine the pod): `none`
//!   means the pod reaches what the cluster network lets it.
//!
//! ## Rules
//! - **One policy per agent key**, named [`policy_name`], carrying the
//!   same identity and marker as the pod and selecting the pod by its
//!   identity label and marker: a policy at that name is adopted only when
//!   it is [`Ownership::Ours`]; anything else is refused in-band, naming it.
//! - **Created before the Secret and the pod**, so the pod never runs
//!   without it on a cluster that enforces policies. An adopted policy
//!   whose rules differ from this deploy's (the relay moved, the config
//!   changed) is replaced, fenced by its resourceVersion.
//! - **Whether it is enforced is the cluster's.** A cluster whose network
//!   plugin does not implement NetworkPolicy stores it and ignores it; the
//!   deploy cannot tell, and says so once per namespace: when it creates
//!   the first policy of this provider there ([`UNENFORCED_NOTE`]).

use crate::consts::*;
use crate::error::{ConfigError, ConfigErrorKind as K, DeployError};
use crate::ownership::{Mismatch, Ownership, ownership};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;

pub mod error;
pub use error::EgressError;

/// The field that turns the policy off.
pub const MODE_FIELD: &str = "network_policy";
/// The field that adds rules.
pub const ALLOW_FIELD: &str = "egress_allow";
/// At most this many `egress_allow` entries (a bound, not a Kubernetes limit).
pub const MAX_ALLOW: usize = 32;
/// At most this many characters of `egress_allow` (info's `maxLength`).
pub const MAX_ALLOW_LEN: usize = 2048;

/// IPv4 ranges the public-443 rule cuts out, with why.
pub const BLOCKED_V4: [(&str, &str); 7] = [
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    (
        "100.64.0.0/10",
        "shared address space (CGNAT), often a cluster's own range",
    ),
    ("127.0.0.0/8", "loopback"),
    (
        "169.254.0.0/16",
        "link-local, the cloud metadata endpoint among it",
    ),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.168.0.0/16", "private (RFC 1918)"),
];
/// IPv6 ranges the public-443 rule cuts out, with why.
pub const BLOCKED_V6: [(&str, &str); 3] = [
    ("::1/128", "loopback"),
    (
        "fc00::/7",
        "unique local, a cloud's IPv6 metadata endpoint among it",
    ),
    ("fe80::/10", "link-local"),
];
/// The port the model APIs answer on.
pub const PUBLIC_PORT: i32 = 443;

/// Said once per namespace, when the deploy creates this provider's first
/// policy there.
pub const UNENFORCED_NOTE: &str = "egress: agent pods in this namespace get a NetworkPolicy (only DNS, the relay and public addresses on 443); whether it is enforced depends on the cluster's network plugin, which the provider cannot see (docs/provider.md \"Contained agents\")";

/// What `provider_config` asks of the pod's network policy: `None` in
/// [`crate::config::ProviderConfig::egress`] is `network_policy: none`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressSpec {
    /// `egress_allow`, in the order given.
    pub allow: Vec<Allow>,
}

/// One `egress_allow` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    /// Canonical CIDR (`10.1.0.0/16`, `fd00::/8`).
    pub cidr: String,
    /// `None` = every port and protocol.
    pub ports: Option<Ports>,
}

/// A port or a port range, with its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub first: u16,
    /// `Some` for a range `first-last`.
    pub last: Option<u16>,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

fn bad(field: &str, msg: String) -> DeployError {
    ConfigError::new(K::Invalid, Some(field), msg).into()
}

/// The two fields, validated before any cluster contact: `None` for
/// `network_policy: none`.
pub fn parse(mode: Option<&str>, allow: Option<&str>) -> Result<Option<EgressSpec>, DeployError> {
    let allow = match allow {
        Some(s) => parse_allow(s)?,
        None => Vec::new(),
    };
    match mode.map(str::trim) {
        None | Some("default") => Ok(Some(EgressSpec { allow })),
        Some("none") if allow.is_empty() => Ok(None),
        Some("none") => Err(ConfigError::new(
            K::Conflict,
            Some(ALLOW_FIELD),
            "provider_config.egress_allow adds to the agent's NetworkPolicy, and network_policy none creates none; clear one of them".to_string(),
        )
        .into()),
        Some(_) => Err(bad(
            MODE_FIELD,
            "provider_config.network_policy is `default` (the agent's pod may reach only DNS, its relay and public addresses on 443, plus egress_allow) or `none` (no NetworkPolicy: the pod reaches whatever the cluster network lets it)".into(),
        )),
    }
}

/// `egress_allow`: comma-separated `CIDR[:PORT[-LAST]][/PROTOCOL]`, an
/// IPv6 CIDR in brackets when a port follows (`[fd00::/8]:8443`); a bare
/// address is its /32 or /128. Empty means none.
pub fn parse_allow(s: &str) -> Result<Vec<Allow>, DeployError> {
    if s.len() > MAX_ALLOW_LEN {
        return Err(bad(
            ALLOW_FIELD,
            format!(
                "provider_config.egress_allow is {} characters long; at most {MAX_ALLOW_LEN}",
                s.len()
            ),
        ));
    }
    let entries: Vec<&str> = s.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
    if entries.len() > MAX_ALLOW {
        return Err(bad(
            ALLOW_FIELD,
            format!(
                "provider_config.egress_allow has {} entries; at most {MAX_ALLOW}",
                entries.len()
            ),
        ));
    }
    entries.into_iter().map(allow_entry).collect()
}

fn allow_entry(entry: &str) -> Result<Allow, DeployError> {
    let err = |why: &str| {
        bad(
            ALLOW_FIELD,
            format!(
                "provider_config.egress_allow entry `{entry}`: {why}; write each entry as CIDR, CIDR:PORT, CIDR:PORT-LAST or CIDR:PORT/udp (IPv6 in brackets when a port follows: [fd00::/8]:443), separated by commas"
            ),
        )
    };
    let (net, port) = split_entry(entry).map_err(err)?;
    let cidr = canonical_cidr(net).map_err(|why| err(&why))?;
    let ports = port.map(ports).transpose().map_err(|why| err(&why))?;
    Ok(Allow { cidr, ports })
}

/// `[V6]:PORT`, `[V6]`, `V6` (two colons or more: no port), `V4:PORT`, `V4`.
fn split_entry(entry: &str) -> Result<(&str, Option<&str>), &'static str> {
    if let Some(inner) = entry.strip_prefix('[') {
        let (net, rest) = inner.split_once(']').ok_or("a `[` without its `]`")?;
        return match rest {
            "" => Ok((net, None)),
            r => r
                .strip_prefix(':')
                .map(|p| (net, Some(p)))
                .ok_or("text after `]` that is not `:PORT`"),
        };
    }
    if entry.matches(':').count() >= 2 {
        return Ok((entry, None));
    }
    Ok(match entry.split_once(':') {
        Some((net, port)) => (net, Some(port)),
        None => (entry, None),
    })
}

fn ports(s: &str) -> Result<Ports, String> {
    let (range, protocol) = match s.split_once('/') {
        None => (s, Protocol::Tcp),
        Some((r, p)) => (
            r,
            match p.to_ascii_lowercase().as_str() {
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "sctp" => Protocol::Sctp,
                _ => return Err(format!("protocol `{p}` is not tcp, udp or sctp")),
            },
        ),
    };
    let port = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{p}` is not a port (1 to 65535)")),
    };
    let (first, last) = match range.split_once('-') {
        None => (port(range)?, None),
        Some((a, b)) => {
            let (a, b) = (port(a)?, port(b)?);
            if b <= a {
                return Err(format!("the range {a}-{b} does not go up"));
            }
            (a, Some(b))
        }
    };
    Ok(Ports {
        first,
        last,
        protocol,
    })
}

/// `net` as the apiserver stores it: an address and a prefix no longer
/// than its family's, with no host bits set (`10.1.2.3/8` is refused,
/// naming `10.0.0.0/8`). A bare address gets the full prefix.
pub fn canonical_cidr(net: &str) -> Result<String, String> {
    let (addr, prefix) = match net.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (net, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{addr}` is not an IP address"))?;
    let bits = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= bits => n,
            _ => return Err(format!("`/{p}` is not a prefix length (0 to {bits})")),
        },
    };
    let masked = mask(ip, prefix);
    if masked != ip {
        return Err(format!(
            "`{net}` has bits set past its prefix; the network is {masked}/{prefix}"
        ));
    }
    Ok(format!("{ip}/{prefix}"))
}

fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// `buzz-agent-<first 12 hex>-egress`.
pub fn policy_name(pubkey: &str) -> String {
    format!("{NAME_PREFIX}{}-egress", &pubkey[..12])
}

/// A host:port the pod dials out to (the relay, the collector's ingest),
/// from its URL: `None` when the URL has no host or no known port.
pub fn endpoint(url: &str) -> Option<(String, u16)> {
    let u = nostr::Url::parse(url).ok()?;
    let port = u.port_or_known_default()?;
    let host = u.host_str()?.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Where the pod must be able to dial, resolved by the shell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destinations {
    /// The relay's addresses and port.
    pub relay: Vec<(IpAddr, u16)>,
    /// The collector's ingest addresses and port, when `telemetry_url` is set.
    pub telemetry: Vec<(IpAddr, u16)>,
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".into()),
        port: Some(IntOrString::Int(port)),
        end_port: None,
    }
}

fn block(cidr: &str, except: &[(&str, &str)]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: (!except.is_empty()).then(|| except.iter().map(|(c, _)| c.to_string()).collect()),
        }),
        ..Default::default()
    }
}

fn host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(_) => format!("{ip}/32"),
        IpAddr::V6(_) => format!("{ip}/128"),
    }
}

/// The egress rules for `spec` and `to`, in a stable order: DNS, the
/// relay, the ingest, public 443, then `egress_allow` as given.
pub fn rules(spec: &EgressSpec, to: &Destinations) -> Vec<NetworkPolicyEgressRule> {
    let dial = |addrs: &[(IpAddr, u16)]| -> Vec<NetworkPolicyEgressRule> {
        addrs
            .iter()
            .map(|(ip, port)| NetworkPolicyEgressRule {
                to: Some(vec![block(&host(*ip), &[])]),
                ports: Some(vec![tcp(i32::from(*port))]),
            })
            .collect()
    };
    let mut rules = vec![NetworkPolicyEgressRule {
        to: None,
        ports: Some(vec![
            NetworkPolicyPort {
                protocol: Some("UDP".into()),
                port: Some(IntOrString::Int(53)),
                end_port: None,
            },
            tcp(53),
        ]),
    }];
    rules.extend(dial(&to.relay));
    rules.extend(dial(&to.telemetry));
    rules.push(NetworkPolicyEgressRule {
        to: Some(vec![block("0.0.0.0/0", &BLOCKED_V4), block("::/0", &BLOCKED_V6)]),
        ports: Some(vec![tcp(PUBLIC_PORT)]),
    });
    rules.extend(spec.allow.iter().map(|a| NetworkPolicyEgressRule {
        to: Some(vec![block(&a.cidr, &[])]),
        ports: a.ports.map(|p| {
            vec![NetworkPolicyPort {
                protocol: Some(p.protocol.as_str().into()),
                port: Some(IntOrString::Int(i32::from(p.first))),
                end_port: p.last.map(i32::from),
            }]
        }),
    }));
    rules
}

/// The policy this provider creates for `pubkey`.
pub fn policy(pubkey: &str, spec: &EgressSpec, to: &Destinations) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(policy_name(pubkey)),
            labels: Some(crate::podspec::labels(pubkey)),
            annotations: Some(BTreeMap::from([(
                ANN_PUBKEY_FULL.to_string(),
                pubkey.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(crate::podspec::labels(pubkey)),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(Vec::new()),
            egress: Some(rules(spec, to)),
        }),
    }
}

/// What a policy found at the agent's name means for this deploy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Absent,
    /// Ours, and its rules are this deploy's.
    Current,
    /// Ours, with other rules: replaced, fenced by its resourceVersion.
    Stale,
    NotOurs(Mismatch),
    Unmarked,
    Terminating,
}

/// Judges `found` against the policy this deploy wants.
pub fn judge(found: Option<&NetworkPolicy>, pubkey: &str, wanted: &NetworkPolicy) -> Judgement {
    let Some(p) = found else {
        return Judgement::Absent;
    };
    match ownership(&p.metadata, pubkey) {
        Ownership::NotOurs(m) => return Judgement::NotOurs(m),
        Ownership::Unmarked => return Judgement::Unmarked,
        Ownership::Ours => {}
    }
    if p.metadata.deletion_timestamp.is_some() {
        return Judgement::Terminating;
    }
    if normalized(&p.spec) == normalized(&wanted.spec) {
        Judgement::Current
    } else {
        Judgement::Stale
    }
}

/// A spec as JSON with empty lists and nulls dropped: the apiserver omits
/// an empty `ingress` that was sent, and defaults nothing this provider
/// leaves out (every port names its protocol).
fn normalized(spec: &Option<NetworkPolicySpec>) -> Value {
    fn strip(v: Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::Array(a) if a.is_empty() => None,
            Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(strip).collect())),
            Value::Object(o) => Some(Value::Object(
                o.into_iter()
                    .filter_map(|(k, v)| strip(v).map(|v| (k, v)))
                    .collect(),
            )),
            other => Some(other),
        }
    }
    strip(serde_json::to_value(spec).unwrap_or(Value::Null)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;

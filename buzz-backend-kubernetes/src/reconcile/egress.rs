//! The NetworkPolicy's step of the deploy (issue 53): the shell around the
//! pure [`crate::egress`]. Runs after the workspace claim and before the
//! attempt, so the pod never runs without its policy: resolve where the pod
//! must dial (the relay, the collector's ingest), read the policy at the
//! agent's name (quorum), judge it, and create it when absent or replace it
//! (fenced by the resourceVersion read) when its rules are another
//! deploy's. A create that loses to a concurrent deploy, and a replace that
//! meets a change, read again and judge once more.

use super::Loop;
use crate::cluster::{Cluster, ClusterError, Created, Replaced};
use crate::consts::*;
use crate::diag;
use crate::egress::{self, Destinations, EgressError, EgressSpec, Judgement};
use crate::error::DeployError;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use std::net::IpAddr;
use std::time::Duration;

/// How long a host the pod dials may take to resolve.
const RESOLVE_BOUND: Duration = Duration::from_secs(5);

impl<C: Cluster> Loop<'_, C> {
    fn policy_err(&self, verb: &'static str, e: ClusterError) -> DeployError {
        let namespace = self.plan.namespace.clone();
        match e {
            ClusterError::Api {
                code: 403, message, ..
            } if !message.contains("exceeded quota") => EgressError::Forbidden {
                verb,
                namespace,
                message,
            }
            .into(),
            ClusterError::Api { code, message, .. }
                if matches!(verb, "create" | "update") && (400..500).contains(&code) =>
            {
                EgressError::Refused {
                    policy: egress::policy_name(&self.plan.pubkey),
                    namespace,
                    message,
                }
                .into()
            }
            other => self.cluster_err(&format!("{verb} the agent's NetworkPolicy"), other),
        }
    }

    async fn read_policy(&self, name: &str) -> Result<Option<NetworkPolicy>, DeployError> {
        self.retry_until(self.act_until, || self.cluster.get_policy(name))
            .await
            .map_err(|e| self.policy_err("get", e))
    }

    /// Creates, adopts or brings up to date the agent's NetworkPolicy;
    /// with `network_policy: none`, removes the one an earlier Start made.
    pub(super) async fn ensure_policy(&self) -> Result<(), DeployError> {
        let Some(spec) = &self.plan.egress else {
            return self.drop_policy().await;
        };
        let to = self.destinations(spec).await?;
        let wanted = egress::policy(&self.plan.pubkey, spec, &to);
        let name = egress::policy_name(&self.plan.pubkey);
        let mut found = self.read_policy(&name).await?;
        // A lost create race or a replace that met a change: judged again.
        for _ in 0..3 {
            match egress::judge(found.as_ref(), &self.plan.pubkey, &wanted) {
                Judgement::Current => {
                    diag::line(&format!("egress: using NetworkPolicy {name}"));
                    return Ok(());
                }
                Judgement::Absent => {
                    let marker = format!("{LABEL_MANAGED_BY}={MANAGED_BY}");
                    let first = self
                        .retry_until(self.act_until, || self.cluster.list_policies(&marker, 1))
                        .await
                        .map_err(|e| self.policy_err("list", e))?
                        .is_empty();
                    let created = self
                        .retry_until(self.act_until, || self.cluster.create_policy(&wanted))
                        .await
                        .map_err(|e| self.policy_err("create", e))?;
                    match created {
                        Created::Created(_) => {
                            diag::line(&format!("egress: created NetworkPolicy {name}"));
                            if first {
                                diag::line(egress::UNENFORCED_NOTE);
                            }
                            return Ok(());
                        }
                        Created::AlreadyExists => found = self.read_policy(&name).await?,
                        // A Start into a namespace that is not there yet:
                        // made as the pod's create would make it.
                        Created::NamespaceMissing => self.ensure_namespace().await?,
                        Created::ServiceAccountMissing { .. } | Created::RuntimeClassMissing { .. } => {
                            return Err(EgressError::Refused {
                                policy: name,
                                namespace: self.plan.namespace.clone(),
                                message: "the apiserver answered with an admission error for a pod".into(),
                            }
                            .into());
                        }
                    }
                }
                Judgement::Stale => {
                    let mut next = wanted.clone();
                    next.metadata.resource_version =
                        found.as_ref().and_then(|p| p.metadata.resource_version.clone());
                    let replaced = self
                        .retry_until(self.act_until, || self.cluster.replace_policy(&next))
                        .await
                        .map_err(|e| self.policy_err("update", e))?;
                    match replaced {
                        Replaced::Replaced => {
                            diag::line(&format!(
                                "egress: updated NetworkPolicy {name} (its rules had changed)"
                            ));
                            return Ok(());
                        }
                        Replaced::Moved => found = self.read_policy(&name).await?,
                    }
                }
                other => return Err(self.policy_refusal(&name, other).into()),
            }
        }
        Err(self.cluster_err(
            "create the agent's NetworkPolicy",
            ClusterError::Transient("it kept changing under this deploy".into()),
        ))
    }

    /// `network_policy: none`: the policy of an earlier default Start
    /// would still confine the pod, so it goes (fenced), before the pod is
    /// made. A user who may not read policies has none of this provider's
    /// to lose: said once, and the deploy goes on.
    async fn drop_policy(&self) -> Result<(), DeployError> {
        let name = egress::policy_name(&self.plan.pubkey);
        let found = match self
            .retry_until(self.act_until, || self.cluster.get_policy(&name))
            .await
        {
            Ok(found) => found,
            Err(ClusterError::Api { code: 403, .. }) => {
                diag::line(&format!(
                    "egress: network_policy none, and may not read networkpolicies here; a NetworkPolicy {name} an earlier Start made, if there is one, still applies (kubectl delete networkpolicy {name} -n {})",
                    self.plan.namespace
                ));
                return Ok(());
            }
            Err(e) => return Err(self.policy_err("get", e)),
        };
        let Some(p) = found else {
            return Ok(());
        };
        // Another's policy at the name is not ours to remove; one being
        // deleted is going anyway.
        let ours =
            crate::ownership::ownership(&p.metadata, &self.plan.pubkey) == crate::ownership::Ownership::Ours;
        if !ours || p.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let fence = crate::gc::Fenced {
            name: name.clone(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            resource_version: p.metadata.resource_version.clone().unwrap_or_default(),
        };
        self.retry_until(self.act_until, || self.cluster.delete_policy(&fence))
            .await
            .map_err(|e| self.policy_err("delete", e))?;
        diag::line(&format!(
            "egress: deleted NetworkPolicy {name} (network_policy none: the pod is not confined)"
        ));
        Ok(())
    }

    fn policy_refusal(&self, policy: &str, j: Judgement) -> EgressError {
        let (policy, namespace) = (policy.to_string(), self.plan.namespace.clone());
        match j {
            Judgement::NotOurs(m) => EgressError::NotOurs {
                policy,
                namespace,
                why: m.describe(),
            },
            Judgement::Unmarked => EgressError::Unmarked { policy, namespace },
            Judgement::Terminating => EgressError::Terminating { policy, namespace },
            Judgement::Absent | Judgement::Current | Judgement::Stale => unreachable!("not a refusal"),
        }
    }

    /// The relay's and the ingest's addresses, as this process resolves
    /// them. A relay host that does not resolve fails the deploy, unless
    /// `egress_allow` names something: then covering it is the user's. An
    /// ingest host that does not resolve is said, and left out.
    async fn destinations(&self, spec: &EgressSpec) -> Result<Destinations, DeployError> {
        let mut to = Destinations::default();
        let urls = [
            ("relay", Some(self.plan.agent.relay_url.as_str())),
            ("telemetry_url", self.plan.intent.telemetry_url.as_deref()),
        ];
        for (what, url) in urls {
            let Some((host, port)) = url.and_then(egress::endpoint) else {
                continue;
            };
            let addrs = match resolve(&host, port).await {
                Ok(a) => a,
                // The collector spools what it cannot ship: an ingest the
                // policy does not name costs its figures, never the Start.
                Err(message) if what == "telemetry_url" || !spec.allow.is_empty() => {
                    diag::line(&format!(
                        "egress: the {what}'s host {host} does not resolve from here ({message}); the NetworkPolicy lets the pod reach it only through egress_allow"
                    ));
                    continue;
                }
                Err(message) => {
                    return Err(EgressError::Unresolved {
                        what,
                        host,
                        port,
                        message,
                    }
                    .into());
                }
            };
            let list = if what == "relay" {
                &mut to.relay
            } else {
                &mut to.telemetry
            };
            list.extend(addrs.into_iter().map(|ip| (ip, port)));
        }
        Ok(to)
    }
}

/// `host`'s addresses, sorted and without repeats (an IP literal is itself).
async fn resolve(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let found = tokio::time::timeout(RESOLVE_BOUND, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| format!("no answer in {} s", RESOLVE_BOUND.as_secs()))?
        .map_err(|e| e.to_string())?;
    let mut ips: Vec<IpAddr> = found.map(|a| a.ip()).collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err("no address".into());
    }
    Ok(ips)
}

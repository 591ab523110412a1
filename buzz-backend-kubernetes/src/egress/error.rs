//! Why a deploy could not make sure of the agent's NetworkPolicy
//! ([`super`], issue 53): one sentence each, naming the policy and the way
//! out. Typed by kind; callers match on the variant, never the text.

use crate::consts::*;

/// A NetworkPolicy failure, in-band.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// A policy at the agent's name that is not this agent's.
    #[error(
        "NetworkPolicy {policy} exists in namespace {namespace} but is not this agent's ({why}); nothing was changed: rename or delete it, or use another namespace"
    )]
    NotOurs {
        policy: String,
        namespace: String,
        why: &'static str,
    },
    /// This agent's identity without the management marker.
    #[error(
        "NetworkPolicy {policy} in namespace {namespace} carries this agent's identity but not the label {LABEL_MANAGED_BY}={MANAGED_BY}, so this provider did not create it and will not adopt it; nothing was changed: delete it yourself if it is stale (kubectl delete networkpolicy {policy} -n {namespace})"
    )]
    Unmarked { policy: String, namespace: String },
    /// The policy is marked for deletion.
    #[error(
        "the agent's NetworkPolicy {policy} in namespace {namespace} is being deleted; Start again in a moment, once it is gone; nothing was changed"
    )]
    Terminating { policy: String, namespace: String },
    /// RBAC refused a verb on policies.
    #[error(
        "your kubeconfig user may not {verb} networkpolicies in namespace {namespace} ({message}), which the agent's default NetworkPolicy needs; ask a cluster admin to apply the current deploy/kubernetes/provider-rbac.yaml (networkpolicies: get, list, create, update, delete), or set provider_config.network_policy to none for a pod the cluster network does not confine. Nothing was created"
    )]
    Forbidden {
        verb: &'static str,
        namespace: String,
        message: String,
    },
    /// The apiserver refused the policy (validation, an admission policy).
    #[error(
        "the apiserver refused the agent's NetworkPolicy {policy} in namespace {namespace}: {message}. Nothing was created"
    )]
    Refused {
        policy: String,
        namespace: String,
        message: String,
    },
    /// A host the pod must reach does not resolve from the provider.
    #[error(
        "the {what}'s host {host} does not resolve from here ({message}), and the agent's NetworkPolicy must name its address; give the address in provider_config.egress_allow (for example 10.0.0.5/32:{port}), or set network_policy to none. Nothing was created"
    )]
    Unresolved {
        /// `relay` or `telemetry_url`.
        what: &'static str,
        host: String,
        port: u16,
        message: String,
    },
}

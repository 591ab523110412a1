//! `undeploy`: remove every trace of one agent from the namespace (issue 21
//! part 1; spec §Stop and Delete, §K8s GC, §Deploy State Machine step 1 and
//! the auto-repair fence, "Destructive decisions come from views you
//! control"; open decision I, the stuck-deployment way out). This module is
//! the pure core: request parsing and the per-pass plan. The loop is
//! [`run`].
//!
//! ## Rules, in order
//! 1. **No secret crosses.** The request names the agent by its public key
//!    (64 lowercase hex, else an in-band error that never echoes the value);
//!    `provider_config` is validated by the same [`ProviderConfig::parse`]
//!    deploy uses. A stray `private_key_nsec` is ignored and redacted.
//! 2. **Select, then verify.** Objects are listed by the truncated identity
//!    label and each is judged by [`ownership`] — the one check the state
//!    machine and the GC pass use. Only [`Ownership::Ours`] (full-pubkey
//!    annotation + management marker) is ever deleted; everything else is
//!    reported as left, untouched.
//! 3. **Pods first.** Every verified pod not yet marked for deletion gets a
//!    fenced (UID + resourceVersion), graceful delete: no grace override, so
//!    the pod's own `terminationGracePeriodSeconds` applies and a live
//!    harness gets SIGTERM and publishes `offline`.
//! 4. **Then Secrets.** A verified Secret is deleted (fenced) when every pod
//!    that references it is a verified pod this undeploy is removing
//!    (**doomed**), or when no pod references it and it is older than the
//!    orphan age gate on the apiserver's clock (§K8s GC, the same gate and
//!    the same-clock rule: no `Date`, no orphan deletion), or when its
//!    owner pod is proved gone ([`crate::gc::owners_to_check`], issue 30
//!    item 5: a pod deleted by other hands dooms its Secret). A young
//!    unreferenced Secret may belong to a Start between its Secret create and
//!    its pod create, so it is left and reported, exactly as GC leaves it.
//! 5. **Then the workspace claim** ([`crate::workspace`], issue 32 item 2),
//!    unless the request says `"keep_workspace": true`: a verified claim is
//!    deleted (fenced) once a pass lists no pod of the agent at all, so no
//!    pod of ours is still using it ([`plan_claims`]). While this undeploy
//!    removes pods, the claim waits for the next pass; a pod it may not touch
//!    keeps the claim too, reported as left. The claims are listed whatever
//!    the config says, so a workspace_size cleared since the Start still
//!    has its claim removed; a user whose RBAC has no claim rights, with no
//!    workspace_size, is told once on stderr and the claim (if any) is left.
//! 6. **Then the NetworkPolicy** ([`crate::egress`], issue 53), by the
//!    claim's rule: a verified policy is deleted (fenced) once a pass lists
//!    no pod of the agent, so a pod still stopping stays confined to the
//!    end ([`plan_policies`]). Listed whatever the config says, like the
//!    claims; a user whose RBAC has no policy rights, with `network_policy:
//!    none`, is told once and the policy (if any) is left.
//! 7. **Wait** until a quorum list shows nothing of this agent left to act
//!    on, within the bound ([`crate::consts::UNDEPLOY_DEADLINE`]: the pods'
//!    60 s grace plus a 30 s margin, from process start).
//!
//! ## Why a race with `deploy` converges
//! Claim: after a concurrent `deploy` D and `undeploy` U of one key both
//! return, either nothing of the agent exists, or exactly one live pod whose
//! deploy reported success.
//! - At most one pod exists at any time (deterministic name), so "exactly
//!   one" is never in doubt; the question is only whether a leftover pod is
//!   live and D reported success.
//! - U deletes a pod only with the UID + resourceVersion it just observed. If
//!   the kubelet started the container or D replaced the pod since, the
//!   delete fails with `Conflict` and U re-lists and re-verifies: it never
//!   deletes an object it did not see. A pod U deleted is gone for good
//!   (D's `WaitGone` row waits for it; D's one-create-per-call rule turns its
//!   own pod vanishing into an error, never a success on a dying pod).
//! - **D's pod created after U's last pod list** references D's fresh Secret.
//!   That Secret is either absent from U's Secret list (created later) or
//!   present and unreferenced in U's view and younger than the gate, so U
//!   leaves it (rule 4). D's pod therefore starts, and D reports success:
//!   one live pod whose deploy succeeded. U reports the young Secret it left.
//! - **D's pod seen by U** is deleted (fenced, rule 3); its Secret is doomed
//!   and deleted (rule 4). D observes the deletion mark, waits for the
//!   disappearance, and fails ("disappeared") — or it already succeeded on a
//!   running pod that U then removed. Nothing of the agent is left.
//! - **D's GC and U delete the same object**: delete-of-absent is success on
//!   both sides and is not counted in `removed`.
//! - U never deletes a Secret a live pod still needs: a referenced Secret is
//!   deleted only once all its referencing pods are verified, doomed pods.
//!   Pods are listed before Secrets, so a pod created between the two lists
//!   references a Secret that is young, hence untouched.
//!
//! Stuck deployments (open decision I): a never-started pod — Pending,
//! unschedulable, image pull failing — is a verified pod like any other, so
//! U removes it and its Secret; the next Start finds no instance and creates
//! afresh.
//!
//! The workspace claim is deleted only in a pass that lists no pod of the
//! agent. A deploy that adopted the claim just before and creates its pod
//! after that list finds its pod unable to start (the scheduler refuses a
//! claim being deleted), so it fails and never reports a success; the next
//! Start names the claim being deleted, and an undeploy clears both.

use crate::config::ProviderConfig;
use crate::error::DeployError;
use crate::gc::Fenced;
use crate::ownership::{Mismatch, Ownership, ownership};
use error::Kind;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ObjectMeta;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

pub mod error;
pub mod run;

pub use error::{Left, LeftWhy, UndeployError};

/// A validated `undeploy` request: no secret in it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The record's name, for messages only (bounded).
    pub name: String,
    /// The agent's public key, 64 lowercase hex.
    pub pubkey: String,
    pub config: ProviderConfig,
    /// `"keep_workspace": true`: the workspace claim is left, and named.
    pub keep_workspace: bool,
}

pub use buzz_provider::request::is_pubkey_hex;

/// Parses `agent` and `provider_config` strictly; never echoes a value.
pub fn parse(
    agent: &Value,
    config: &Value,
    keep_workspace: bool,
    default_image: Option<&str>,
) -> Result<Target, DeployError> {
    let buzz_provider::request::UndeployTarget { name, pubkey } =
        buzz_provider::request::undeploy_target(agent)?;
    let config = ProviderConfig::parse(config, default_image)?;
    Ok(Target {
        name,
        pubkey,
        config,
        keep_workspace,
    })
}

/// A pod marked for deletion that this undeploy waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminating {
    pub name: String,
    pub resource_version: Option<String>,
}

/// One pass: what to delete, what to wait for, what is left untouched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Verified pods not yet marked for deletion: fenced graceful deletes.
    pub pods: Vec<Fenced>,
    /// Verified pods already marked for deletion: waited on.
    pub terminating: Vec<Terminating>,
    /// Secrets referenced by the pods above, from now on deletable.
    pub doomed: BTreeSet<String>,
    /// Verified Secrets to delete (fenced), once every pod delete of the pass is accepted.
    pub secrets: Vec<Fenced>,
    /// Verified Secrets already marked for deletion (finalizers): waited on.
    pub secrets_terminating: usize,
    /// Verified workspace claims to delete (fenced): only in a pass that
    /// lists no pod of the agent ([`plan_claims`]).
    pub claims: Vec<Fenced>,
    /// Verified claims marked for deletion: waited on.
    pub claims_terminating: usize,
    /// Verified NetworkPolicies to delete (fenced): only in a pass that
    /// lists no pod of the agent ([`plan_policies`]).
    pub policies: Vec<Fenced>,
    /// Verified policies marked for deletion: waited on.
    pub policies_terminating: usize,
    /// Objects this undeploy may not touch, with the reason.
    pub left: Vec<Left>,
}

impl Plan {
    /// True when nothing of this agent remains to delete or wait for.
    pub fn settled(&self) -> bool {
        self.pods.is_empty()
            && self.terminating.is_empty()
            && self.secrets.is_empty()
            && self.secrets_terminating == 0
            && self.claims.is_empty()
            && self.claims_terminating == 0
            && self.policies.is_empty()
            && self.policies_terminating == 0
    }
}

fn fenced(meta: &ObjectMeta) -> Option<Fenced> {
    Some(Fenced {
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        resource_version: meta.resource_version.clone()?,
    })
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_else(|| "?".into())
}

fn left_why(o: Ownership) -> Option<LeftWhy> {
    match o {
        Ownership::Ours => None,
        Ownership::Unmarked => Some(LeftWhy::Unmarked),
        Ownership::NotOurs(Mismatch::Annotation) => Some(LeftWhy::ForeignAnnotation),
        Ownership::NotOurs(Mismatch::Label) => Some(LeftWhy::ForeignLabel),
    }
}

/// Plans one pass over a fresh (quorum) observation. `doomed` carries the
/// Secret names referenced by verified pods earlier passes deleted or saw
/// terminating; `gone` the owner pod UIDs proved absent after the Secret
/// list; `server_now` is the `Date` of the Secret list.
pub fn plan(
    pubkey: &str,
    pods: &[Pod],
    secrets: &[Secret],
    doomed: &BTreeSet<String>,
    gone: &BTreeSet<String>,
    server_now: Option<SystemTime>,
    min_orphan_age: Duration,
) -> Plan {
    let mut out = Plan {
        doomed: doomed.clone(),
        ..Default::default()
    };
    // Secrets a pod we may not remove still references: never touched.
    let mut kept_refs: BTreeSet<String> = BTreeSet::new();
    for pod in pods {
        let refs = crate::classify::referenced_secrets(pod);
        if let Some(why) = left_why(ownership(&pod.metadata, pubkey)) {
            out.left.push(Left::pod(name_of(&pod.metadata), why));
            kept_refs.extend(refs);
            continue;
        }
        match (&pod.metadata.deletion_timestamp, fenced(&pod.metadata)) {
            (Some(_), _) => out.terminating.push(Terminating {
                name: name_of(&pod.metadata),
                resource_version: pod.metadata.resource_version.clone(),
            }),
            (None, Some(f)) => out.pods.push(f),
            // An API object always has name, UID and resourceVersion; one
            // without them cannot be fenced, so it is not deleted.
            (None, None) => {
                out.left
                    .push(Left::pod(name_of(&pod.metadata), LeftWhy::Unfenceable));
                kept_refs.extend(refs);
                continue;
            }
        }
        out.doomed.extend(refs);
    }
    let live_refs: BTreeSet<&String> = kept_refs.iter().collect();
    for s in secrets {
        let name = name_of(&s.metadata);
        if let Some(why) = left_why(ownership(&s.metadata, pubkey)) {
            out.left.push(Left::secret(name, why));
            continue;
        }
        if s.metadata.deletion_timestamp.is_some() {
            out.secrets_terminating += 1;
            continue;
        }
        if live_refs.contains(&name) {
            out.left
                .push(Left::secret(name, LeftWhy::ReferencedByUntouchedPod));
            continue;
        }
        let created = s
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|c| SystemTime::from(c.0));
        let deletable = if out.doomed.contains(&name) || crate::gc::owner_gone(s, gone) {
            true
        } else {
            match (server_now, created) {
                (Some(now), Some(created)) => {
                    now.duration_since(created).is_ok_and(|age| age > min_orphan_age)
                }
                (None, _) => {
                    out.left.push(Left::secret(name, LeftWhy::AgeUnknown));
                    continue;
                }
                (Some(_), None) => false,
            }
        };
        match (deletable, fenced(&s.metadata)) {
            (true, Some(f)) => out.secrets.push(f),
            (true, None) => out.left.push(Left::secret(name, LeftWhy::Unfenceable)),
            (false, _) => out
                .left
                .push(Left::young(name, created.map(|c| c + min_orphan_age))),
        }
    }
    out
}

/// Adds the workspace claims to a pass's plan (rule 5). `pods` is the
/// pass's pod list: a claim is deleted only when it is empty. While this
/// undeploy still removes or waits on pods, the claim waits for a later
/// pass; when only pods it may not touch remain, the claim is left with
/// them.
pub fn plan_claims(p: &mut Plan, pubkey: &str, pods: &[Pod], claims: &[PersistentVolumeClaim]) {
    let metas = claims.iter().map(|c| &c.metadata);
    (p.claims, p.claims_terminating) = after_pods(p, pubkey, pods, metas, Kind::Claim);
}

/// Adds the agent's NetworkPolicies to a pass's plan (rule 6), by the
/// claims' rule: deleted only in a pass that lists no pod of the agent.
pub fn plan_policies(p: &mut Plan, pubkey: &str, pods: &[Pod], policies: &[NetworkPolicy]) {
    let metas = policies.iter().map(|n| &n.metadata);
    (p.policies, p.policies_terminating) = after_pods(p, pubkey, pods, metas, Kind::NetworkPolicy);
}

/// The objects of `kind` that go once no pod of the agent is listed: the
/// fenced deletes, and how many are already being deleted. The rest goes
/// to `p.left` with why.
fn after_pods<'a>(
    p: &mut Plan,
    pubkey: &str,
    pods: &[Pod],
    objects: impl Iterator<Item = &'a ObjectMeta>,
    kind: Kind,
) -> (Vec<Fenced>, usize) {
    let removing_pods = !p.pods.is_empty() || !p.terminating.is_empty();
    let (mut delete, mut terminating) = (Vec::new(), 0);
    for meta in objects {
        let name = name_of(meta);
        if let Some(why) = left_why(ownership(meta, pubkey)) {
            p.left.push(Left::of(kind, name, why));
            continue;
        }
        if meta.deletion_timestamp.is_some() {
            terminating += 1;
            continue;
        }
        if !pods.is_empty() {
            if !removing_pods {
                p.left
                    .push(Left::of(kind, name, LeftWhy::ReferencedByUntouchedPod));
            }
            continue;
        }
        match fenced(meta) {
            Some(f) => delete.push(f),
            None => p.left.push(Left::of(kind, name, LeftWhy::Unfenceable)),
        }
    }
    (delete, terminating)
}

#[cfg(test)]
mod tests;

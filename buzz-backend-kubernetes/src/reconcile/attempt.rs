//! One create attempt (spec §Deploy State Machine "one create attempt per
//! call", §K8s Secrets "per-attempt Secret"): mint a generation, write its
//! Secret, create the pod that references it.
//!
//! A create retried after a transient failure may meet its own committed
//! first try (review b30b1a0 #10): an etcd "request timed out" 500 or a load
//! balancer's 504 can answer a write that was stored, and a connection can
//! drop after the request was sent. So an `AlreadyExists` is never taken at
//! its word:
//!
//! - **Secret.** Its name carries this attempt's fresh 128-bit generation, so
//!   only this attempt can have taken it. After a quorum read confirms the
//!   generation and pubkey annotations ([`secret_is_ours`]) the create is a
//!   success; anything else is `GenerationTaken`.
//! - **Pod.** The pod at our name is read back ([`whose_pod`]). One that
//!   references this attempt's Secret (or carries its generation) is ours:
//!   the Secret stays and the call goes on as the creator. One that does not
//!   won a race: only our own Secret is dropped and the winner adopted. When
//!   the read cannot tell, nothing is deleted (a Secret a live pod may need
//!   outweighs reaping it early; the GC removes it once unreferenced and past
//!   the age gate) and the pod is adopted.
//!
//! The same read settles a pod create still unanswered when acting must
//! stop. The decisions are pure functions of the objects read; the I/O is
//! the reconcile loop's.

use super::Loop;
use crate::classify::{CallState, referenced_secrets};
use crate::cluster::{Cluster, ClusterError, Created, NamespaceCreate};
use crate::consts::*;
use crate::diag;
use crate::envtiers;
use crate::error::{ClusterFailure, DeployError};
use crate::gc::Fenced;
use crate::podspec;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use std::time::Duration;

/// Whose pod stands at the agent's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodAtName {
    /// This attempt's pod (it references this attempt's Secret or carries
    /// its generation), with its UID.
    Ours(String),
    /// Someone else's: a concurrent deploy won the create race.
    Other,
    /// No pod.
    Absent,
    /// The read failed or timed out, or the pod had no UID.
    Unknown,
}

/// Decides [`PodAtName`] from a successful read of the pod at our name.
pub fn whose_pod(pod: Option<&Pod>, own_secret: &str, generation: &str) -> PodAtName {
    let Some(p) = pod else {
        return PodAtName::Absent;
    };
    let references = referenced_secrets(p).iter().any(|s| s == own_secret);
    let same_generation = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_GENERATION))
        .is_some_and(|g| g == generation);
    match (references || same_generation, p.metadata.uid.clone()) {
        (true, Some(uid)) => PodAtName::Ours(uid),
        (true, None) => PodAtName::Unknown,
        (false, _) => PodAtName::Other,
    }
}

/// True when a Secret read back after `AlreadyExists` is this attempt's:
/// it carries this generation and this agent's full pubkey.
pub fn secret_is_ours(meta: &ObjectMeta, pubkey: &str, generation: &str) -> bool {
    let ann = |k: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    ann(ANN_GENERATION) == Some(generation) && ann(ANN_PUBKEY_FULL) == Some(pubkey)
}

impl<C: Cluster> Loop<'_, C> {
    /// Creates the namespace a namespaced create found missing.
    pub(super) async fn ensure_namespace(&self) -> Result<(), DeployError> {
        let namespace = self.plan.namespace.clone();
        match self.create_namespace().await? {
            NamespaceCreate::Created | NamespaceCreate::Exists => Ok(()),
            NamespaceCreate::Forbidden => Err(ClusterFailure::NamespaceMissing { namespace }.into()),
        }
    }

    /// True while a missing ServiceAccount `name` may still appear: the
    /// namespace-`default` admission race, or the ServiceAccount this pod names
    /// while the namespace this call created is younger than [`NAMED_SA_GRACE`].
    fn service_account_may_appear(&self, name: &str) -> bool {
        let named = self.plan.intent.service_account.as_deref();
        if name == "default" && named.is_none_or(|n| n == "default") {
            return true;
        }
        named == Some(name)
            && self
                .namespace_created
                .get()
                .is_some_and(|at| at.elapsed() < NAMED_SA_GRACE)
    }

    /// Mints a generation, writes its Secret, creates the pod.
    /// Returns the pod as the apiserver stored it when this call created it.
    pub(super) async fn create_attempt(&self, st: &mut CallState) -> Result<Option<Pod>, DeployError> {
        if self.remaining().is_zero() {
            return Err(self.out_of_time("create the agent Secret"));
        }
        let generation = podspec::new_generation();
        let mut auth = self.plan.authoritative.clone();
        auth.generation = generation.clone();
        let env = envtiers::assemble(&self.plan.agent, &auth)?;
        let secret = podspec::secret(&self.plan.pubkey, &generation, env);
        let secret_name = podspec::secret_name(&self.plan.pubkey, &generation);
        let created = loop {
            if self.remaining().is_zero() {
                return Err(self.out_of_time("create the agent Secret"));
            }
            match self
                .retry("create the agent Secret", || self.cluster.create_secret(&secret))
                .await?
            {
                Created::Created(s) => break s.metadata,
                Created::NamespaceMissing => self.ensure_namespace().await?,
                Created::AlreadyExists => {
                    // The name holds this attempt's fresh generation: only a
                    // try of this very create, committed while its answer
                    // was lost, can have taken it.
                    let found = self
                        .retry("read the agent Secret", || self.cluster.secret_meta(&secret_name))
                        .await?;
                    match found {
                        Some(m) if secret_is_ours(&m, &self.plan.pubkey, &generation) => {
                            diag::line(&format!(
                                "the Secret {secret_name} was created by a try whose answer was lost; using it"
                            ));
                            break m;
                        }
                        Some(_) => return Err(ClusterFailure::GenerationTaken.into()),
                        // Gone again before the read: create it anew.
                        None => {}
                    }
                }
                Created::ServiceAccountMissing { .. } | Created::RuntimeClassMissing { .. } => {
                    return Err(ClusterFailure::Internal {
                        what: "a Secret create was refused for a pod's ServiceAccount or RuntimeClass".into(),
                    }
                    .into());
                }
            }
        };
        let own_secret = Fenced {
            name: created.name.clone().unwrap_or_default(),
            uid: created.uid.clone().unwrap_or_default(),
            resource_version: created.resource_version.clone().unwrap_or_default(),
        };
        let pod = podspec::pod(&self.plan.pubkey, &self.plan.intent, &generation);
        let mut announced = false;
        loop {
            if self.remaining().is_zero() {
                self.drop_own_secret(&own_secret).await;
                return Err(self.out_of_time("create the agent pod"));
            }
            let outcome = match self
                .retry_until(self.act_until, || self.cluster.create_pod(&pod))
                .await
            {
                Ok(o) => o,
                Err(ClusterError::OutOfTime) => {
                    // The create is unanswered: keep the Secret unless the
                    // pod at our name is known not to be this attempt's.
                    return match self.pod_at_name(&own_secret.name, &generation).await {
                        PodAtName::Ours(uid) => {
                            self.attach_owner(&own_secret.name, &uid).await;
                            st.created_uid = Some(uid);
                            Ok(None)
                        }
                        PodAtName::Unknown => {
                            diag::line(&format!(
                                "could not tell whether {} is this attempt's; keeping its Secret {} (GC reaps it once unreferenced)",
                                self.plan.agent_id, own_secret.name
                            ));
                            Err(self.out_of_time("create the agent pod"))
                        }
                        PodAtName::Absent | PodAtName::Other => {
                            self.drop_own_secret(&own_secret).await;
                            Err(self.out_of_time("create the agent pod"))
                        }
                    };
                }
                Err(e) => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(self.cluster_err("create the agent pod", e));
                }
            };
            match outcome {
                Created::Created(p) => {
                    st.created_uid = p.metadata.uid.clone();
                    diag::line(&format!(
                        "created pod {} (generation {generation})",
                        self.plan.agent_id
                    ));
                    if let Some(uid) = &p.metadata.uid {
                        self.attach_owner(&own_secret.name, uid).await;
                    }
                    return Ok(Some(p));
                }
                Created::AlreadyExists => {
                    return Ok(self.after_pod_exists(st, &own_secret, &generation).await);
                }
                Created::ServiceAccountMissing { name } if self.service_account_may_appear(&name) => {
                    if self.remaining() <= Duration::from_millis(300) {
                        self.drop_own_secret(&own_secret).await;
                        return Err(ClusterFailure::DefaultServiceAccountLate {
                            namespace: self.plan.namespace.clone(),
                        }
                        .into());
                    }
                    if !announced {
                        diag::line(&format!(
                            "waiting for the ServiceAccount {name} of namespace {}",
                            self.plan.namespace
                        ));
                        announced = true;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Created::RuntimeClassMissing { name } => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(DeployError::RuntimeClassMissing { name });
                }
                Created::ServiceAccountMissing { name } => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(DeployError::ServiceAccountMissing {
                        namespace: self.plan.namespace.clone(),
                        name,
                    });
                }
                Created::NamespaceMissing => {
                    self.drop_own_secret(&own_secret).await;
                    return Err(ClusterFailure::DefaultServiceAccountLate {
                        namespace: self.plan.namespace.clone(),
                    }
                    .into());
                }
            }
        }
    }

    /// A pod create answered `AlreadyExists`. Either a concurrent deploy
    /// won the race (drop only our own Secret, adopt the winner) or an
    /// earlier try of this very create was committed and its answer lost
    /// (the pod references our Secret: it is ours, keep going). When the
    /// read cannot tell, nothing is deleted and the winner is adopted.
    async fn after_pod_exists(
        &self,
        st: &mut CallState,
        own_secret: &Fenced,
        generation: &str,
    ) -> Option<Pod> {
        let id = &self.plan.agent_id;
        match self.pod_at_name(&own_secret.name, generation).await {
            PodAtName::Ours(uid) => {
                self.attach_owner(&own_secret.name, &uid).await;
                st.created_uid = Some(uid);
                diag::line(&format!(
                    "created pod {id} (generation {generation}); its create was committed though the answer was lost"
                ));
            }
            PodAtName::Other | PodAtName::Absent => {
                self.drop_own_secret(own_secret).await;
                st.adopting = true;
                diag::line(&format!("another deploy created {id} first; adopting it"));
            }
            PodAtName::Unknown => {
                st.adopting = true;
                diag::line(&format!(
                    "{id} already exists and could not be read; keeping this attempt's Secret {} (GC reaps it once unreferenced) and adopting the pod",
                    own_secret.name
                ));
            }
        }
        None
    }

    /// Whose pod stands at our name: a quorum read with transient retries,
    /// bounded by the cleanup point.
    async fn pod_at_name(&self, own_secret: &str, generation: &str) -> PodAtName {
        match self
            .retry_until(self.cleanup_until, || self.cluster.get_pod(&self.plan.agent_id))
            .await
        {
            Ok(pod) => whose_pod(pod.as_ref(), own_secret, generation),
            Err(_) => PodAtName::Unknown,
        }
    }

    /// Makes this attempt's pod the owner of its Secret, so the cluster's
    /// garbage collector removes the Secret with the pod whoever deletes it
    /// (issue 30 item 5; [`crate::ownership::owner_reference`]). Best
    /// effort and non-fatal (spec §K8s GC): a failure (no `patch` on
    /// secrets, say) leaves the age-gated sweep as the backstop, bounded by
    /// the point where acting stops.
    async fn attach_owner(&self, secret: &str, pod_uid: &str) {
        let owner = crate::ownership::owner_reference(&self.plan.agent_id, pod_uid);
        let outcome = self
            .retry_until(self.act_until, || self.cluster.set_secret_owner(secret, &owner))
            .await;
        if let Err(e) = outcome {
            diag::line(&format!(
                "could not make {} the owner of its Secret {secret} ({e}); the Secret is removed by a later GC once unreferenced and past the age gate",
                self.plan.agent_id
            ));
        }
    }

    /// Deletes this attempt's own Secret (ownership, not age, is the safety
    /// argument), bounded by the cleanup point.
    async fn drop_own_secret(&self, s: &Fenced) {
        match tokio::time::timeout_at(self.cleanup_until, self.cluster.delete_secret(s)).await {
            Ok(Ok(_)) => diag::line(&format!("removed this attempt's Secret {}", s.name)),
            Ok(Err(e)) => diag::line(&format!(
                "could not delete this attempt's Secret {}: {e}; GC reaps it later",
                s.name
            )),
            Err(_) => diag::line(&format!(
                "no time left to delete this attempt's Secret {}; GC reaps it later",
                s.name
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podspec::sample_intent;

    const PK: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const GEN: &str = "00112233445566778899aabbccddeeff";

    fn stored(mut p: Pod) -> Pod {
        p.metadata.uid = Some("uid-1".into());
        p
    }

    #[test]
    fn a_pod_referencing_this_attempts_secret_is_ours() {
        let own = podspec::secret_name(PK, GEN);
        let ours = stored(podspec::pod(PK, &sample_intent(), GEN));
        assert_eq!(whose_pod(Some(&ours), &own, GEN), PodAtName::Ours("uid-1".into()));
        // The generation annotation alone also says so.
        let mut by_annotation = ours.clone();
        by_annotation.spec.as_mut().unwrap().containers[0].env_from = None;
        assert_eq!(
            whose_pod(Some(&by_annotation), &own, GEN),
            PodAtName::Ours("uid-1".into())
        );
        let mut no_uid = ours;
        no_uid.metadata.uid = None;
        assert_eq!(whose_pod(Some(&no_uid), &own, GEN), PodAtName::Unknown);
    }

    #[test]
    fn a_race_winners_pod_is_not_ours_and_no_pod_is_absent() {
        let other_gen = "ffeeddccbbaa99887766554433221100";
        let own = podspec::secret_name(PK, GEN);
        let winner = stored(podspec::pod(PK, &sample_intent(), other_gen));
        assert_eq!(whose_pod(Some(&winner), &own, GEN), PodAtName::Other);
        assert_eq!(whose_pod(None, &own, GEN), PodAtName::Absent);
    }

    #[test]
    fn a_secret_is_ours_only_with_this_generation_and_pubkey() {
        let s = podspec::secret(PK, GEN, Default::default());
        assert!(secret_is_ours(&s.metadata, PK, GEN));
        assert!(!secret_is_ours(
            &s.metadata,
            PK,
            "ffeeddccbbaa99887766554433221100"
        ));
        assert!(!secret_is_ours(&s.metadata, &"f".repeat(64), GEN));
        assert!(!secret_is_ours(&ObjectMeta::default(), PK, GEN));
    }
}

//! The process contract (spec §Provider Protocol, §Invocation; [L2] item 1):
//! the request, the redaction of every output, and the deploy's run. The
//! checks that come before any mutation are [`prepare`].
//!
//! One JSON object in (≤ 16 MiB, `op` = `info` | `deploy` | `undeploy`
//! ([`crate::undeploy`]), optional string `request_id`, unknown fields
//! ignored), parsed as every provider parses it
//! ([`buzz_provider::request`]); one JSON object out ([`success`],
//! [`failure`]). Every failure the provider can describe is an in-band
//! `{"ok":false,"error":…}` with exit code 0; the binary exits non-zero
//! only on crash paths.

mod prepare;
pub use prepare::prepare;

use crate::config::default_image;
use crate::consts::*;
use crate::diag::{self, Redactor};
use crate::error::DeployError;
use crate::kubeconfig;
use crate::reconcile::{self, Timing};
use serde_json::{Value, json};
use std::time::Instant;

pub use buzz_provider::redact::redactor_for;
pub use buzz_provider::request::{Request, failure};

/// A deploy's answer: `{"ok":true,"agent_id":…}` (spec §`deploy`), with
/// the running pod's `generation` when it has one: a field the spec's
/// response does not name, which a launcher that does not know it ignores.
/// The launcher's Start reads it to tell a stopped run still reported
/// running (the kubelet reports a container's exit a moment late) from a
/// fresh one (`desktop-launcher`'s `restart`).
pub fn success(started: &reconcile::Started) -> Value {
    let mut v = json!({ "ok": true, "agent_id": started.agent_id });
    if let Some(g) = &started.generation {
        v["generation"] = json!(g);
    }
    v
}

/// Parses the raw stdin bytes into a request ([`buzz_provider::request::parse`]).
pub fn parse_request(bytes: &[u8]) -> Result<Request, DeployError> {
    Ok(buzz_provider::request::parse(bytes)?)
}

/// The redactor of everything a deploy or undeploy writes: the payload's
/// secrets and the kubeconfig's credentials ([`kubeconfig::file_secrets`]).
pub fn output_redactor(agent: &Value) -> Redactor {
    redactor_for(agent).with(kubeconfig::file_secrets())
}

/// The budget in force, measured from `started` (the process start):
/// 600 s or `BUZZ_K8S_DEPLOY_DEADLINE_SECS`; see [`crate::timing`].
pub fn timing(started: Instant) -> Timing {
    Timing::from_env(started)
}

/// Runs a deploy end to end; the caller redacts the error. `started` is the
/// process start, from which the deadline is measured.
pub async fn deploy(
    agent: &Value,
    provider_config: &Value,
    started: Instant,
) -> Result<reconcile::Started, DeployError> {
    let plan = prepare(agent, provider_config, default_image().as_deref())?;
    let context = provider_config
        .get("context")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let connected = kubeconfig::connect(context).await?;
    let cluster = crate::cluster::KubeCluster::new(connected.client, &plan.namespace);
    reconcile::deploy(&cluster, &plan, timing(started))
        .await
        .map_err(|e| kubeconfig::name_endpoint(kubeconfig::name_exec_plugin(e, context), &connected.endpoint))
}

/// Prepends the spec's PATH entries so kubeconfig exec plugins resolve (§K8s Auth).
/// Call while the process is still single-threaded.
pub fn augment_path() {
    let mut parts = path_prepend();
    if let Some(p) = std::env::var_os("PATH") {
        parts.extend(std::env::split_paths(&p).map(|p| p.to_string_lossy().into_owned()));
    }
    let mut seen = std::collections::HashSet::new();
    parts.retain(|p| seen.insert(p.clone()));
    if let Ok(joined) = std::env::join_paths(parts) {
        // SAFETY: called from main before any thread is spawned.
        unsafe { std::env::set_var("PATH", joined) };
    }
}

/// Handles one request and returns the response object (never panics on
/// input). `started` is the process start (the deadline's origin).
pub fn handle(bytes: &[u8], started: Instant) -> Value {
    let request = match parse_request(bytes) {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    match request {
        Request::Info => crate::info::response(default_image().as_deref()),
        Request::Deploy {
            agent,
            provider_config,
        } => {
            let redactor = output_redactor(&agent);
            diag::set_redactor(redactor.clone());
            augment_path();
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return failure(&format!("could not start the async runtime: {e}")),
            };
            match rt.block_on(deploy(&agent, &provider_config, started)) {
                Ok(started) => success(&started),
                Err(e) => failure(&redactor.scrub(&e.to_string())),
            }
        }
        Request::Undeploy {
            agent,
            provider_config,
            keep_workspace,
        } => crate::undeploy::run::handle(&agent, &provider_config, keep_workspace, started),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deploy_answer_names_the_generation_only_when_the_pod_has_one() {
        let started = |generation: Option<&str>| reconcile::Started {
            agent_id: "buzz-agent-0123456789ab".into(),
            generation: generation.map(str::to_string),
        };
        assert_eq!(
            success(&started(Some("0123456789abcdef0123456789abcdef"))),
            json!({ "ok": true, "agent_id": "buzz-agent-0123456789ab",
                    "generation": "0123456789abcdef0123456789abcdef" })
        );
        assert_eq!(
            success(&started(None)),
            json!({ "ok": true, "agent_id": "buzz-agent-0123456789ab" })
        );
    }
}

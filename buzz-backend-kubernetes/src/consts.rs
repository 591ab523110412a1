//! Every name, limit and timeout of the Kubernetes binding, each with the
//! spec section that fixes it (DESIGN.md Decision 7).

use std::time::Duration;

/// Provider name in `info` (wire-facts §7).
pub const PROVIDER_NAME: &str = "kubernetes";
/// Software version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Management-marker value of `app.kubernetes.io/managed-by` (§Pod shape).
pub const MANAGED_BY: &str = "buzz-backend-kubernetes";
/// Binding schema version label value (§Pod shape).
pub const BINDING_VERSION: &str = "1";

/// Label: first 32 hex of the agent pubkey — the selector (§Pod shape).
pub const LABEL_PUBKEY: &str = "buzz.block.xyz/agent-pubkey";
/// Label: management marker, part 1.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: management marker, part 2.
pub const LABEL_BINDING_VERSION: &str = "buzz.block.xyz/binding-version";
/// Annotation: full 64-hex pubkey — the load-bearing identity check (§Deploy State Machine step 1).
pub const ANN_PUBKEY_FULL: &str = "buzz.block.xyz/agent-pubkey-full";
/// Annotation: create-intent fingerprint (§Deploy State Machine, fingerprint).
pub const ANN_CREATE_INTENT: &str = "buzz.block.xyz/create-intent";
/// Annotation: image reference used, replaced by the resolved image ID once running (§Image).
pub const ANN_IMAGE: &str = "buzz.block.xyz/image";
/// Annotation: generation token, for log correlation (§K8s GC).
pub const ANN_GENERATION: &str = "buzz.block.xyz/generation";
/// Annotation: provider version, for log correlation (§K8s GC).
pub const ANN_PROVIDER_VERSION: &str = "buzz.block.xyz/provider-version";
/// Annotation the PV controller sets (`yes`) on a claim when it, not the
/// claim's author, wrote `spec.volumeName`: a workspace claim with a
/// `volumeName` and without it was created bound to a volume, which this
/// provider never does (`workspace::judge`, review afa2bf1 finding 9).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

/// Pod / agent_id prefix: `buzz-agent-<12 hex>` (§Pod shape).
pub const NAME_PREFIX: &str = "buzz-agent-";
/// The container running the harness (wire-facts §7).
pub const CONTAINER: &str = "agent";
/// The harness's command in every conforming image (spec §Entrypoint: the
/// entrypoint ends in `exec buzz-acp`): the `postStart` hook runs it.
pub const HARNESS_COMMAND: &str = "buzz-acp";
/// The `postStart` hook's bound (`buzz-acp started --wait`): the harness's
/// startup checks take milliseconds; a minute allows a node starting many
/// pods at once, and a harness still not past them is killed and reported
/// (`podspec::started_hook`, issue 49 item 1).
pub const STARTED_HOOK_WAIT: Duration = Duration::from_secs(60);
/// The readiness probe's period: a pod whose harness lost its relay reads
/// not `Ready` within it (issue 49 item 2). One HTTP GET per period.
pub const READY_PERIOD_SECONDS: i32 = 2;
/// The readiness probe's timeout: the harness answers from memory.
pub const READY_TIMEOUT_SECONDS: i32 = 2;
/// Where the harness writes why it exits at startup (issue 30 item 3).
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The longest harness termination message shown, in characters (the
/// kubelet keeps at most 4096 bytes of it anyway).
pub const MAX_TERMINATION_MESSAGE_CHARS: usize = 4096;
/// The workspace volume's name: an `emptyDir`, or the agent's claim
/// ([`crate::workspace`]).
pub const WORKSPACE_VOLUME: &str = "workspace";
/// How long a deploy's pod may wait for its workspace claim to bind before
/// the Start fails naming why ([`crate::workspace`], issue 32 item 2): cloud
/// disks provision in seconds to a minute; a claim still unbound after two
/// has no provisioner, an unknown class or no capacity, and the claim's
/// events say which.
pub const WORKSPACE_BIND_BOUND: Duration = Duration::from_secs(120);
/// Overrides [`WORKSPACE_BIND_BOUND`], in seconds (tests).
pub const WORKSPACE_BIND_ENV: &str = "BUZZ_K8S_WORKSPACE_BIND_SECS";
/// `HOME` and working directory inside the pod (§Entrypoint "Working directory").
pub const HOME: &str = "/home/agent";
/// The agent sessions' working directory (`BUZZ_ACP_CWD`): inside `HOME`,
/// never the reverse, so the agents' transcripts and the harness's receipts
/// under `HOME` are outside the directory a session's tools work in (review
/// afa2bf1 finding 1). The harness itself still runs in `HOME`, as the spec
/// says; it creates this directory at start. On the same volume, so the
/// agent's files outlive a pod exactly as its conversations do.
pub const SESSION_CWD: &str = "/home/agent/work";
/// The collector's spool directory: on the workspace `emptyDir`, so unshipped
/// windows, OOM events and `state/alive` survive an `OnFailure` container
/// restart (collector-design §5 "an emptyDir (survives container restarts,
/// not pod replacement)", §8; review b30b1a0 #7). The collector's own default
/// is on the container's writable layer, which a restart discards.
pub const COLLECTOR_SPOOL_DIR: &str = "/home/agent/.runtime-agent";
/// Fixed non-root UID/GID (§Pod shape, hardening defaults): the sprig image's
/// `agent` user (images/sprig/Containerfile).
pub const RUN_AS: i64 = 10001;
/// `terminationGracePeriodSeconds` — the declared shutdown budget (§Pod shape).
pub const GRACE_SECONDS: i64 = 60;
/// Image-local MCP server (§Entrypoint mapping table).
pub const MCP_COMMAND: &str = "buzz-dev-mcp";

/// The deploy operation deadline, measured from process start (§Deploy State
/// Machine; §deploy timeout 600 s from the launcher's spawn).
pub const DEPLOY_DEADLINE: Duration = Duration::from_secs(600);
/// Env var that changes the deadline (tests, impatient operators). It never
/// moves the orphan-Secret age gate (see [`crate::timing`]).
pub const DEADLINE_ENV: &str = "BUZZ_K8S_DEPLOY_DEADLINE_SECS";
/// Test-only env var: the orphan-Secret age gate in seconds (default 1200).
/// Never set it outside a test cluster: a gate shorter than 2 × 600 s lets
/// this provider delete a concurrent default-deadline deploy's in-flight Secret.
pub const TEST_ORPHAN_AGE_ENV: &str = "BUZZ_K8S_TEST_ONLY_ORPHAN_MIN_AGE_SECS";
/// How long a ServiceAccount named in `service_account` may be missing while
/// the namespace this call created is that young (provisioners add it).
pub const NAMED_SA_GRACE: Duration = Duration::from_secs(10);
/// The `undeploy` bound, from process start (issue 21): the pods' own grace
/// ([`GRACE_SECONDS`], the harness's whole shutdown budget) plus a 30 s margin
/// for the lists, deletes and the kubelet's final status write.
pub const UNDEPLOY_DEADLINE: Duration = Duration::from_secs(GRACE_SECONDS as u64 + 30);
/// Env var that changes the undeploy bound (tests).
pub const UNDEPLOY_DEADLINE_ENV: &str = "BUZZ_K8S_UNDEPLOY_DEADLINE_SECS";
/// Bounded safety-net re-read while waiting on a watch.
pub const WATCH_SAFETY_NET: Duration = Duration::from_secs(5);

/// Default resources (§Pod shape "Resources"; wire-facts §7).
pub const DEFAULT_CPU_REQUEST: &str = "1";
pub const DEFAULT_MEMORY_REQUEST: &str = "2Gi";
pub const DEFAULT_CPU_LIMIT: &str = "2";
pub const DEFAULT_MEMORY_LIMIT: &str = "4Gi";
/// Schema default of `inactivity_seconds` (§Auto-Stop; wire-facts §7).
pub const DEFAULT_INACTIVITY_SECONDS: u64 = 7200;
/// Schema default of `doze_seconds` (issue 50): an idle agent's processes
/// end after 5 minutes and its pod stays, answering the next mention.
pub const DEFAULT_DOZE_SECONDS: u64 = 300;

/// Run-time override of the default image (registry mirrors; tests simulating
/// a provider upgrade). The same name at compile time bakes the default into
/// the binary (`main.rs`, [`crate::config::bake_default_image`]; §Image).
pub const DEFAULT_IMAGE_ENV: &str = "BUZZ_K8S_DEFAULT_IMAGE";

/// Kubernetes caps a Secret's data at 1 MiB.
pub const SECRET_MAX_BYTES: usize = 1024 * 1024;

/// Entries prepended to PATH before the kube client is built, so kubeconfig
/// `exec` plugins resolve from a GUI-launched desktop (§K8s Auth).
pub fn path_prepend() -> Vec<String> {
    let mut v = vec!["/opt/homebrew/bin".to_string(), "/usr/local/bin".to_string()];
    if let Some(home) = std::env::var_os("HOME") {
        v.push(format!("{}/.local/bin", home.to_string_lossy()));
    }
    v
}

/// The `inactivity_seconds: 0` → `restartPolicy: OnFailure` mapping is enabled
/// only because the harness's exit-code contract is pinned by a test
/// (spec §Pod shape, I5 ordering rule) and the crash-loop row exists in
/// `classify` (see README, "Exit codes").
pub const ON_FAILURE_ENABLED: bool = true;

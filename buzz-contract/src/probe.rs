//! The harness's probe endpoint (issue 49 items 1 and 2): what a
//! deployer and the harness agree on so that a container's `running` means
//! "the harness passed its startup checks" and its `Ready` means "the
//! harness is authenticated to its relay".
//!
//! A deployer that sets [`PROBE_ADDR_ENV`] gets, once the harness's startup
//! checks passed (identity, configuration, the agent command), a plain
//! HTTP/1.1 listener at that address that answers two paths:
//!
//! | request | answer |
//! |---|---|
//! | `GET` [`STARTED_PATH`] | `200` (the listener exists only after the startup checks) |
//! | `GET` [`READY_PATH`] | `200` while the relay session is authenticated and live; `503` while connecting, reconnecting or stopping |
//!
//! The answers carry a one-word body and nothing else: no key, no owner, no
//! relay URL, nothing the agent's presence does not already publish. Without
//! the variable (a laptop, a VPS) the harness listens nowhere.
//!
//! The first argument [`STARTED_ARG`] runs the harness binary as the
//! container's `postStart` hook: it waits until [`STARTED_PATH`] answers on
//! the loopback port of [`PROBE_ADDR_ENV`], bounded by [`WAIT_FLAG`].

/// The address the harness's probe endpoint listens on (`host:port`;
/// `0.0.0.0:<port>` in a pod, so the kubelet reaches it on the pod's IP).
pub const PROBE_ADDR_ENV: &str = "BUZZ_ACP_PROBE_ADDR";
/// The port a pod's harness listens on. Chosen away from the ports coding
/// agents' dev servers take (3000, 5173, 8000, 8080, …): the harness binds it
/// before any agent runs, so an agent's server on it would fail, not the
/// harness.
pub const POD_PROBE_PORT: u16 = 4785;
/// Answers `200` once the harness passed its startup checks.
pub const STARTED_PATH: &str = "/startz";
/// Answers `200` only while the harness is authenticated to its relay.
pub const READY_PATH: &str = "/readyz";
/// The first argument that runs `buzz-acp` as the `postStart` hook.
pub const STARTED_ARG: &str = "started";
/// The hook's bound, in whole seconds (`started --wait <secs>`).
pub const WAIT_FLAG: &str = "--wait";

//! `desktop-launcher`: the desktop's door to Buzz agents (spec §System Model,
//! §Launchers; DESIGN.md "Launcher"). Functional core, imperative shell:
//!
//! Pure core (no I/O, clock or randomness inside):
//! - [`record`]: agent records, settings and deploy bookkeeping (spec §System Model "agent record").
//! - [`runtime`]: the runtime metadata table (spec §Launch data).
//! - [`presets`]: the agent presets (`buzz_contract::agents`) in the launcher: fill, secret env names, install hints (spec §Launch data).
//! - [`envfile`]: the strict `KEY=VALUE` format of `--env-file`/`--env-stdin` (secrets never on argv).
//! - [`resolve`]: THE launch resolver, shared by local spawn and deploy (spec §Launch data, Known Defect 3, I1).
//! - [`payload`]: the deploy payload builder and `provider_config` normalisation (spec §deploy, I2, Known Defect 8).
//! - [`redact`]: scrubbing of provider output (spec §Provider Output Is Untrusted).
//! - [`secrets`]: what is a secret, one set for the gate and the Start page (fail closed).
//! - [`procid`]: "is this process ours" (pid + start time + boot + exe), pidfd signalling.
//! - [`response`]: the strict provider response rules (spec §Invocation, wire-facts §8 item 5).
//! - [`presence`]: presence derivation and change-only events (spec I3, wire-facts §3).
//! - [`waits`]: what `chat`, `stop` and `status` know before a wait and say during one (issue 24).
//! - [`harness_exit`]: the harness's exit codes and a run's log lines, in words (issue 24).
//! - [`restart`]: a Start right after a stop, while the cluster still reports the stopped run.
//!
//! Shell (one narrow module per boundary):
//! - [`app`]: the commands (start, stop, chat, delete) over the modules below.
//! - [`relay_ops`]: the commands that wait on a running agent (stop, chat, a local start).
//! - [`status_watch`]: what `status` listens for: deployed agents' presence, local agents' verified harness.
//! - [`child_watch`]: a local harness's run: its fresh log, its reaping and how it ended.
//! - [`store`]: the state directory, key files at `0600`.
//! - [`lock`]: advisory locks in the state dir (relay start, agent start, deploy state).
//! - [`discovery`]: provider discovery with diagnostics (spec §Discovery, Known Defect 1).
//! - [`invoke`]: bounded provider invocation (spec §Invocation).
//! - [`gate`]: the pre-secret negotiation gate (spec §Discovery, Known Defect 5).
//! - [`stage`]: the sealed in-memory copy the gate executes, and its threat model.
//! - [`status_lines`]: the provider's stderr split into status lines as they arrive.
//! - [`relay`]: `!shutdown`, chat and the presence subscription over the relay (spec §Stop, I3, M1).
//! - [`local`]: the local backend, spawning the harness from the same resolver.
//! - [`embedded`]: the embedded default relay as launcher state (port, pid, background start).
//! - [`teardown`]: `undeploy` and the `delete` of a deployed agent through the gate (issue 21, spec §Stop and Delete).
//! - [`demo`]: `buzz-launcher demo`, the whole loop on embedded defaults.
//! - [`relayd`]: the embedded relay (`buzz-launcher relay`), NIP-42 and NIP-OA admission over `nostr-relay-builder`.

pub mod app;
pub mod child_watch;
pub mod demo;
pub mod discovery;
pub mod embedded;
pub mod envfile;
pub mod gate;
pub mod harness_exit;
pub mod invoke;
pub mod limits;
pub mod local;
pub mod lock;
pub mod payload;
pub mod presence;
pub mod presets;
pub mod procid;
pub mod record;
pub mod redact;
pub mod relay;
pub mod relay_ops;
pub mod relayd;
pub mod resolve;
pub mod response;
pub mod restart;
pub mod runtime;
pub mod secrets;
pub mod stage;
pub mod status_lines;
pub mod status_watch;
pub mod store;
pub mod teardown;
pub mod ui;
pub mod waits;

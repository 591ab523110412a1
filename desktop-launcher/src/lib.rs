//! `desktop-launcher`: the desktop's door to Buzz agents (spec §System Model,
//! §Launchers; DESIGN.md "Launcher"). Functional core, imperative shell, in
//! layers that read top-down: each module uses only the layers below it, and
//! no two modules use each other (`tests/layers.rs` holds the order and fails
//! on an arrow that runs up).
//!
//! The front ends (top): the CLI (`src/bin/`), the Start page ([`ui`]) and
//! [`demo`]. They call the operations, and only them (`tests/layers.rs`).
//!
//! The operations: [`app`], the one API (issue 31): the commands (init,
//! agents, start, stop, chat, status, undeploy, delete, providers, the
//! embedded relay, the presence feed) over the modules below, and the
//! vocabulary they take and return; `app::relay_ops` waits on a running
//! agent, `app::status_watch` is what `status` listens for, `app::teardown`
//! undeploys (issue 21, spec §Stop and Delete).
//!
//! What is public, and why: [`app`], [`ui`] and [`demo`] for the binary;
//! below them, the modules the conformance suite, the benchmarks and the
//! fuzz targets drive on their own (the state dir, the records, the gate,
//! discovery, the payload and response rules, the redactor, the relay
//! client, presence, the embedded relay's state, the limits). The rest is
//! crate-private: the harness's process bookkeeping, locks, presets, the
//! env file format and the words of a wait, which only `app` composes.
//!
//! The relay client, the local harness and the embedded relay's state:
//! - [`relay`]: `!shutdown`, chat and the presence subscription over the relay (spec §Stop, I3, M1).
//! - [`child_watch`]: a local harness's run: its fresh log, its reaping and how it ended.
//! - [`local`]: the local backend, spawning the harness from the same resolver.
//! - [`embedded`]: the embedded default relay as launcher state (port, pid, background start).
//!
//! Resolution, presets and the provider gate:
//! - [`presets`]: the agent presets (`buzz_contract::agents`) in the launcher: fill, secret env names, install hints (spec §Launch data).
//! - [`resolve`]: THE launch resolver, shared by local spawn and deploy (spec §Launch data, Known Defect 3, I1).
//! - [`payload`]: the deploy payload builder and `provider_config` normalisation (spec §deploy, I2, Known Defect 8).
//! - [`discovery`]: provider discovery with diagnostics (spec §Discovery, Known Defect 1).
//! - [`stage`]: the sealed in-memory copy the gate executes, and its threat model.
//! - [`invoke`]: bounded provider invocation (spec §Invocation).
//! - [`gate`]: the pre-secret negotiation gate (spec §Discovery, Known Defect 5).
//!
//! The state dir, records and keys:
//! - [`lock`]: advisory locks in the state dir (relay start, agent start, deploy state).
//! - [`store`]: the state directory, key files at `0600`; it refuses a record that shows a key and keeps no error unredacted.
//! - `secret_store`: the agent's secret env (`keys/<name>.env`), part of [`store::Store`].
//! - [`enrolled`]: the agents the embedded relay (the `buzz-relay` crate, `buzz-launcher relay`) admits: the records, through its directory trait.
//!
//! The pure rules and data (bottom; no I/O, clock or randomness inside):
//! - [`limits`], [`runtime`] (the runtime metadata table, spec §Launch data), [`procid`] ("is this process ours").
//! - [`presence`]: presence derivation and change-only events (spec I3, wire-facts §3).
//! - [`response`]: the strict provider response rules (spec §Invocation, wire-facts §8 item 5).
//! - [`harness_exit`]: the harness's exit codes and a run's log lines, in words (issue 24).
//! - [`restart`]: a Start right after a stop, while the cluster still reports the stopped run.
//! - [`secrets`]: what is a secret, one set for the gate and the Start page; [`redact`]: scrubbing with it (spec §Provider Output Is Untrusted).
//! - [`record`]: agent records, settings, identities and deploy bookkeeping (spec §System Model "agent record").
//! - [`shared_record`]: an agent record as the owner's private head (kind 30179, upstream's format) that the owner's other desktops read (issue 52).
//! - [`sync_plan`]: what a desktop does with the owner's shared records it read (issue 52 item 3), pure.
//! - [`shown`]: the record fields that name files or are listed, and the key shape they must not have (I2).
//! - [`envfile`]: the strict `KEY=VALUE` format of `--env-file`/`--env-stdin` (secrets never on argv).
//! - [`status_lines`]: the provider's stderr split into status lines as they arrive.
//! - [`waits`]: what `chat`, `stop` and `status` know before a wait and say during one (issue 24).
//! - [`wake`]: wake on mention: sleeping or stopped, what wakes an agent, how often (issue 33).
//! - [`activity`]: what an agent is doing now, from its observer frames.
//! - [`usage_view`], [`conversation_view`]: a turn's usage and its sums, an
//!   agent's conversation by turn, and how they read (issue 34);
//!   [`usage_plot`]: the usage panel's inline SVG.

pub mod activity;
pub mod app;
pub(crate) mod child_watch;
pub mod conversation_view;
pub mod demo;
pub mod discovery;
pub mod embedded;
pub mod enrolled;
pub(crate) mod envfile;
pub mod gate;
pub(crate) mod harness_exit;
pub(crate) mod invoke;
pub mod limits;
pub(crate) mod local;
pub(crate) mod lock;
pub mod measured;
pub mod payload;
pub mod presence;
pub(crate) mod presets;
pub(crate) mod procid;
pub mod record;
pub mod redact;
pub mod relay;
pub mod resolve;
pub mod response;
pub(crate) mod restart;
pub(crate) mod runtime;
pub(crate) mod secrets;
pub mod shared_record;
pub(crate) mod shown;
pub mod stage;
pub(crate) mod status_lines;
pub mod store;
pub mod sync_plan;
pub mod ui;
pub mod usage_plot;
pub mod usage_view;
pub(crate) mod waits;
pub mod wake;

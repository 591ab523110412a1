//! `buzz-acp`: the Buzz agent harness (spec `remote-agents.md` §Launchers
//! layer 1, I1, I3, I5, §Stop and Delete, §Auto-Stop, §Conformance \[L1\];
//! wire-facts §1–6).
//!
//! Pure decision core (DESIGN.md Decision 1): [`config`] (identity and
//! validation), [`args`], [`backoff`], [`budget`], [`inbound`] (owner control
//! and the gate), [`events`] (tag shapes), [`schedule`] (turn queueing and the
//! inactivity rule), [`exit`] (the pinned exit-code table), [`replies`]
//! (what an unanswered asker is told), [`scrub`] (the one scrub of every
//! published text), [`receipts`] (which saved session a conversation may
//! use after a restart, and how it comes back), [`history`] (the channel's
//! history for a new session of a known conversation), [`asks`] (the
//! owner's open permission questions), [`metrics`] (a turn's usage as
//! Buzz's kind-44200 payload), and inside [`acp`]: `setup` (model
//! and mode), `permission` (the policy's answers), `launch` (presets'
//! extras, command resolution).
//! Imperative shell: [`relay`] (nostr-sdk), [`acp`] (agent processes over the
//! official `agent-client-protocol` crate), [`procs`] (process groups,
//! orphan reaping), [`pid1`] (forwarding the stop to the container's other
//! processes when the harness is PID 1), [`run`] (the main loop and the budgeted shutdown),
//! [`observer`] (the ACP frame mirror, kind 24200),
//! [`entry`] (the binary edge, shared with the conformance suite), [`cli`]
//! (every knob as a clap argument with its env name), [`agent_spec`] (the
//! agent spec from the configuration), [`termination`] (the
//! container's termination message), [`probe`] (the started and ready
//! endpoint a pod's hook and readiness probe ask), [`notify`] (systemd's
//! readiness notification for a `Type=notify` unit), [`echo_agent`] (the
//! built-in smoke-test ACP agent, `BUZZ_ACP_AGENT_COMMAND=builtin:echo`).

pub mod acp;
pub mod agent_spec;
pub mod args;
pub mod asks;
pub mod backoff;
pub mod budget;
pub mod cli;
pub mod config;
pub mod echo_agent;
pub mod entry;
pub mod events;
pub mod exit;
pub mod history;
pub mod inbound;
pub mod metrics;
pub mod notify;
pub mod observer;
pub mod pid1;
pub mod probe;
pub mod procs;
pub mod receipts;
pub mod relay;
pub mod replies;
pub mod run;
pub mod schedule;
pub mod scrub;
pub mod termination;

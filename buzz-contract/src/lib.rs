//! `buzz-contract`: what the launcher, the provider and the harness must agree
//! on, with no I/O and no async (shared/DESIGN.md §Layout, dependency rule:
//! this crate depends on nothing of ours).
//!
//! - [`agents`]: the agent presets (claude, codex, gemini, goose, echo) and
//!   the permission policy, shared by the launcher and the harness.
//! - [`env`]: harness env var names, the reserved and host-resolved key sets,
//!   POSIX key shape (wire-facts §5, spec §Launch data).
//! - [`keys`]: private-key parsing (nsec or hex, trimmed) and hex helpers (wire-facts §1).
//! - [`nip_oa`]: the NIP-OA owner attestation, verify and mint (wire-facts §1).
//! - [`presence`]: presence kind, contents, bounds and run tags (spec I3, wire-facts §3).
//! - [`probe`]: the harness's started and ready endpoint a deployer's
//!   hook and probe read (issue 49).
//! - [`gate`]: the respond-to gate's modes and allowlist (wire-facts §4).
//! - [`wire`]: the provider protocol's request/response shapes and a strict,
//!   secret-safe payload parser (spec §Provider Protocol, wire-facts §7).
//! - [`i2`]: `provider_config` validation (spec I2).
//! - [`redact`]: secret scrubbing of text shown or stored (spec §Provider Output Is Untrusted).
//! - [`relay_url`]: the relay URL rule of every front end (issue 24 item 3).
//! - [`sidecar`]: the sidecars' env allowlist and its deployer-only names,
//!   shared by the image entrypoint, the collector and the provider.
//! - [`turn_metric`], [`observer`]: what an agent reports to its owner
//!   (issue 34): per-turn usage (kind 44200) and the ACP frame mirror
//!   (kind 24200), both sealed to the owner; [`awake`]: when it was awake,
//!   dozing, asleep or stopped (kind 44201, issue 50).
//! - [`managed_record`]: the owner's private record of an agent, kind 30179,
//!   upstream's format, sealed to the owner (issue 52).
//! - [`wake`]: wake on mention (issue 33): why a harness stopped, and the
//!   mentions and floor a woken harness is handed.

pub mod agents;
pub mod awake;
pub mod env;
pub mod exit;
pub mod gate;
pub mod i2;
pub mod keys;
pub mod managed_record;
pub mod nip_oa;
pub mod observer;
pub mod presence;
pub mod probe;
pub mod redact;
pub mod relay_url;
pub mod sidecar;
pub mod turn_metric;
pub mod wake;
pub mod wire;

//! The commands behind the desktop's buttons (issue 5 "Commands"), as library
//! functions the binary formats and the conformance suite drives.
//!
//! This is the one module the front ends use: the CLI (`src/bin/`), the
//! Start page ([`crate::ui`]) and [`crate::demo`] call its operations and
//! speak its vocabulary, and `tests/layers.rs` fails on a front end that
//! reaches past it (issue 31). What they get here:
//!
//! - the operations: agent create and edit ([`agents`]), start, stop,
//!   chat, status ([`status_watch`]), undeploy and delete ([`teardown`],
//!   [`delete`]), [`providers`], the embedded relay ([`embedded_relay`]),
//!   the presence feed ([`presence_feed`]), each agent's [`usage`],
//!   [`conversation`] and live activity ([`activity_feed`]; issue 34), and a local agent's state;
//! - the vocabulary they take and return: the state dir handle
//!   ([`Store`]; reading a record through it is not an operation), the
//!   record types, presence's derived states and reports, the errors, and
//!   the few limits a front end shows or waits by;
//! - [`rules`]: the pure field rules both forms of a record (the CLI's
//!   flags, the page's form) validate with, so the two cannot disagree.
//!
//! Each front end turns its input into one of these calls and formats the
//! typed result or [`AppError`] its own way.
//!
//! Layered top-down, no submodule reaching back up: `error` and `agent`
//! at the bottom, then `agents` (creating and editing records), `start`
//! and `delete`, `providers` and `embedded_relay`, then the commands that
//! wait on a running agent (`relay_ops`, `presence_feed`, `status_watch`)
//! and the deployed agent's teardown (`teardown`), then the [`waker`] that
//! starts sleeping agents on a mention (issue 33). This file only names
//! them.
//!
//! Every refusal the spec requires before anything is invoked (I1, owner,
//! relay-mesh, I2, POSIX keys) happens in [`start_provider`] before discovery
//! runs a single process. A local start refuses a preset agent whose binary
//! the harness would not find ([`crate::presets::missing_binary`]) before
//! the harness is spawned; a deploy never does (the image resolves the name).

pub mod activity_feed;
mod agent;
pub mod agents;
pub mod conflict;
pub mod conversation;
mod delete;
pub mod embedded_relay;
mod error;
mod local_state;
pub mod presence_feed;
pub mod providers;
pub mod relay_ops;
pub mod share;
mod start;
pub mod status_watch;
pub mod sync;
pub mod teardown;
pub mod usage;
pub mod waker;

pub use agent::{
    StartOptions, inactivity_text, is_deployed, is_live, presence_ttl, set_config_field, silence,
    waker_running, waker_text,
};
pub use delete::delete;
pub use error::AppError;
pub use local_state::{last_error, live_local, rest_now, terminate_local};
pub use relay_ops::{
    StartOutcome, StopOptions, Stopped, Watched, WatchedStart, chat, chat_with, reach_relay,
    start_local_watched, stop, stop_with, until_after_second, wait_online,
};
pub use start::{LocalStart, start_local, start_local_with, start_provider, start_provider_with};
pub use status_watch::{PresenceWatch, expected_live, local_status, running_local};

// ---- the vocabulary ------------------------------------------------------------------------

pub use crate::envfile::EnvChanges;
pub use crate::gate::{GateError, InfoOutcome, Undeployed};
pub use crate::limits::{
    CHAT_WAIT, HARNESS_BIN_ENV, PRESENCE_REPUBLISH, STATUS_LISTEN, STATUS_LOCAL_LISTEN, STOP_WAIT,
};
pub use crate::local::{Running, find_harness, harness_program, on_path, running_from};
pub use crate::payload::ConfigError;
pub use crate::presence::{
    Change, Derived, Report, Tags as PresenceTags, Tracker, dozing, drift, fleet_line_with, supersedes,
};
pub use crate::record::{AgentRecord, Backend, DeployState};
pub use crate::redact::Redactor;
pub use crate::relay::unix_now;
pub use crate::response::sanitize_text;
pub use crate::store::{Store, StoreError, write_private};
pub use crate::{activity, conversation_view, measured, usage_plot, usage_view};
pub use buzz_contract::awake::AwakeState;

/// The pure rules a record's fields are checked with, the same for the
/// CLI's flags and the Start page's form (spec §Launch data, I2).
pub mod rules {
    pub use crate::discovery::valid_id as valid_provider_id;
    pub use crate::envfile::{check_key, parse_bytes as parse_env_file};
    pub use crate::payload::{missing_required, normalize_provider_config};
    pub use crate::presets::{
        MissingBinary, apply as apply_preset, check_permission_mode, check_preset_and_command,
        lookup as lookup_preset, missing_binary, permission_policy, secret_env_name,
    };
}

#[cfg(test)]
mod tests;

//! The commands behind the desktop's buttons (issue 5 "Commands"), as library
//! functions the binary formats and the conformance suite drives.
//!
//! Layered top-down, no submodule reaching back up: `error` and `agent`
//! at the bottom, then `agents` (creating and editing records), `start`
//! and `delete`, then the commands that wait
//! on a running agent (`relay_ops`, `status_watch`) and the deployed
//! agent's teardown (`teardown`). This file only names them.
//!
//! Every refusal the spec requires before anything is invoked (I1, owner,
//! relay-mesh, I2, POSIX keys) happens in [`start_provider`] before discovery
//! runs a single process. A local start refuses a preset agent whose binary
//! the harness would not find ([`crate::presets::missing_binary`]) before
//! the harness is spawned; a deploy never does (the image resolves the name).

mod agent;
pub mod agents;
mod delete;
mod error;
pub mod relay_ops;
mod start;
pub mod status_watch;
pub mod teardown;

pub use agent::{StartOptions, is_deployed, is_live, presence_ttl, set_config_field};
pub use delete::delete;
pub use error::AppError;
pub use relay_ops::{
    StartOutcome, StopOptions, Stopped, Watched, WatchedStart, chat, chat_with, start_local_watched, stop,
    stop_with, until_after_second, wait_online,
};
pub use start::{LocalStart, start_local, start_provider};
pub use status_watch::{PresenceWatch, expected_live, local_status, running_local};

#[cfg(test)]
mod tests;

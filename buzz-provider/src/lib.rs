//! `buzz-provider`: what every Buzz provider binary shares (issue 51 item
//! 5; spec §Provider Protocol, §Invocation, §Launch data, §Conformance
//! \[L2\]). `buzz-backend-kubernetes` and `buzz-backend-ssh` are each a
//! binding of this one protocol to a place agents run.
//!
//! - [`envelope`]: the process. One JSON object in (≤ 16 MiB), one JSON
//!   line out in a single write, exit 0 whenever a response was written,
//!   one crash code with nothing on stdout otherwise; `--help` and
//!   `--version`.
//! - [`request`]: the request's parse (`info`, `deploy`, `undeploy`) with
//!   errors typed by kind and field that never echo a value, the undeploy
//!   target (`{name, pubkey}`: no secret crosses), and the answers'
//!   shapes ([`request::failure`]).
//! - [`redact`]: every secret value a payload carries, scrubbed from every
//!   output ([L2] item 5).
//! - [`diag`]: progress lines on stderr, redacted, bounded, without repeats.
//! - [`payload`]: the checks of the deploy payload before any mutation
//!   (identity, owner, relay, `respond_to`, the command), typed by rule
//!   ([`refusal`]); [`config`]: `provider_config`'s shape and fields.
//! - [`info`]: `info`'s answer and its schema's pieces.
//! - [`envtiers`]: the harness's environment from the payload's tiers and
//!   the provider's authoritative values (§Launch data "Environment
//!   precedence", §Reserved-key rule).
//!
//! Pure but for [`envelope`] (stdin, stdout) and [`diag`] (stderr).

pub mod config;
pub mod diag;
pub mod envelope;
pub mod envtiers;
pub mod info;
pub mod payload;
pub mod redact;
pub mod refusal;
pub mod request;

//! The Start page (issue 11): the desktop's Start button as a local web page,
//! `buzz-launcher ui`. An embedded single page and a small JSON API over the
//! very functions the CLI calls ([`crate::app`], [`crate::store`],
//! [`crate::gate`], [`crate::discovery`]), so the page and the CLI cannot drift.
//!
//! - [`guard`]: loopback only, the token, `Host`/`Origin` checks (DNS rebinding, CSRF).
//! - [`form`]: `config_schema` rendering rules and field-keyed I2 errors
//!   (spec §Provider Protocol `info`, I2, Known Defect 8).
//! - [`server`]: the routes, the presence tracker feeding Server-Sent Events
//!   (spec I3), Start progress (the provider's status lines, already redacted
//!   by the gate), Stop as `!shutdown` (spec §Stop).
//!
//! No secret reaches the browser: records are sent with env *names* only, no
//! key material is ever read into a response, and every string of every
//! response and event is passed through a [`crate::redact::Redactor`] built
//! from the state dir's secrets as a last line of defence.

pub mod form;
pub mod guard;
pub mod server;

pub use server::{UiError, serve};

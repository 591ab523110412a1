//! Diagnostics: progress lines to stderr, bounded and redacted (spec L2 item
//! 5), as every provider writes them ([`buzz_provider::diag`]).

pub use buzz_provider::diag::{line, redactor, set_redactor};
pub use buzz_provider::redact::Redactor;

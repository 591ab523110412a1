//! The typed refusals every provider shares (spec §Deploy State Machine
//! step 0, I1, I2, §Launch data): a payload refused before any mutation
//! ([`Refusal`], by the rule it broke) and an invalid `provider_config`
//! ([`ConfigError`], by kind and field). Each renders as one sentence a
//! person can act on, and none carries a value that could be a secret.

/// The rule a payload broke (§Deploy State Machine step 0, I1, §Launch data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalRule {
    /// I1: the private key is empty or malformed.
    Identity,
    /// The owner is missing, malformed, unverifiable or the agent itself.
    Owner,
    /// The relay-mesh provider only works on the owner's computer.
    RelayMesh,
    /// The relay URL is empty or not ws(s)://.
    Relay,
    /// `respond_to` or its allowlist is invalid.
    RespondTo,
    /// The agent command is a host path, not a name resolved where it runs.
    AgentCommand,
    /// An env key is not POSIX, suppresses presence (I3), or a value cannot
    /// be carried where the agent runs.
    Env,
    /// The environment does not fit where the provider keeps it.
    EnvTooLarge,
}

/// A payload refused before any mutation: the rule it broke, the sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub rule: RefusalRule,
    message: String,
}

impl Refusal {
    pub fn new(rule: RefusalRule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }
}

/// What is wrong with `provider_config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The I2 lint refused it (a secret-looking key or value).
    SecretLint,
    /// `provider_config` is not an object.
    NotAnObject,
    /// A field this provider does not define (typos are errors, not ignored).
    UnknownField,
    /// A field with the wrong JSON type (or an empty string for a number).
    WrongType,
    /// A required field is absent.
    Missing,
    /// A field's value is not valid for its kind (name, quantity, image).
    Invalid,
    /// Two fields contradict each other (request above limit).
    Conflict,
    /// A valid value this build refuses (no inactivity bound without OnFailure).
    Unsupported,
    /// The baked default image is unusable.
    DefaultImage,
}

/// An invalid `provider_config`: its kind, the field at fault, the sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    /// The `provider_config` field at fault; `None` for the object as a whole.
    pub field: Option<String>,
    message: String,
}

impl ConfigError {
    pub fn new(kind: ConfigErrorKind, field: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            kind,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }
}

//! The agent environment (spec §Launch data "Environment precedence",
//! §Reserved-key rule, §Entrypoint "Payload → environment mapping"): the
//! tiers every provider assembles ([`buzz_provider::envtiers`]), and what
//! this binding adds: a refused key is a [`RefusalRule::Env`] refusal, and
//! the env's size in a Secret.

use crate::error::{DeployError, Refusal, RefusalRule};
use std::collections::BTreeMap;

pub use buzz_provider::envtiers::{Authoritative, EnvRefused, assemble, authoritative_tier, lower_tiers};

impl From<EnvRefused> for DeployError {
    fn from(e: EnvRefused) -> Self {
        Refusal::new(RefusalRule::Env, e.0).into()
    }
}

/// Bytes the env occupies in a Secret's data.
pub fn secret_size(env: &BTreeMap<String, String>) -> usize {
    env.iter().map(|(k, v)| k.len() + v.len()).sum()
}

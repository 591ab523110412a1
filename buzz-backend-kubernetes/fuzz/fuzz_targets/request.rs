//! The request parser and `prepare` (every check before cluster contact) on
//! arbitrary bytes: no panic, and every accepted deploy yields a well-formed plan.
#![cfg_attr(fuzzing, no_main)]

use buzz_backend_kubernetes::protocol::{Request, parse_request, prepare};

const DEFAULT_IMAGE: &str =
    "registry.test/buzz-sprig@sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let request = match parse_request(data) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let Request::Deploy {
        agent,
        provider_config,
    } = request
    else {
        return;
    };
    for default in [None, Some(DEFAULT_IMAGE)] {
        match prepare(&agent, &provider_config, default) {
            Ok(plan) => {
                assert_eq!(plan.pubkey.len(), 64);
                assert_eq!(plan.agent_id, format!("buzz-agent-{}", &plan.pubkey[..12]));
                assert_eq!(plan.fingerprint.len(), 64);
                assert!(!plan.intent.image.ends_with(":latest"));
                assert_ne!(
                    plan.authoritative.owner_pubkey.as_deref(),
                    Some(plan.pubkey.as_str())
                );
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

//! Record, settings and bookkeeping parsing on arbitrary bytes (the state
//! directory is user-editable): parsing never panics, what parses
//! round-trips, and the launch resolver never panics on any parsed record.
#![cfg_attr(fuzzing, no_main)]

use desktop_launcher::record::Identity;
use desktop_launcher::record::{AgentRecord, DeployState, Settings};
use desktop_launcher::resolve::{Target, resolve_launch};

// A fixed TEST key pair, published on purpose: never use it.
const AGENT_NSEC_HEX: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    if let Ok(rec) = serde_json::from_slice::<AgentRecord>(data) {
        let back: AgentRecord = serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
        assert_eq!(back, rec);
        let _ = rec.launch_digest();
        let keys = buzz_contract::keys::parse_private_key(AGENT_NSEC_HEX).unwrap();
        let mut rec = rec;
        rec.pubkey = buzz_contract::keys::pubkey_hex(&keys);
        let id = Identity {
            nsec: AGENT_NSEC_HEX.to_string(),
            auth_tag: None,
            owner_pubkey: Some("11".repeat(32)),
            secret_env: Default::default(),
        };
        let settings = Settings::default();
        for t in [Target::Local, Target::Remote] {
            let _ = resolve_launch(&rec, &settings, &id, t);
        }
    }
    if let Ok(s) = serde_json::from_slice::<Settings>(data) {
        let back: Settings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
    if let Ok(d) = serde_json::from_slice::<DeployState>(data) {
        let back: DeployState = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(back, d);
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

//! Inbound event parsing and gating: a relay message as received (JSON),
//! its event turned into the gate's input, decided under every respond-to
//! mode with and without a channel scope, and the reply/typing tags built
//! from it. Nothing may panic, and the owner-control invariants must hold.
#![cfg_attr(fuzzing, no_main)]

use buzz_acp::events::{reply_tags, typing_tags};
use buzz_acp::inbound::{Decision, InboundEvent, Policy, SeenIds, decide};
use buzz_contract::gate::RespondTo;
use nostr_sdk::prelude::{Event, JsonUtil, RelayMessage};

const AGENT: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn check_event(ev: &InboundEvent) {
    for mode in [
        RespondTo::OwnerOnly,
        RespondTo::Allowlist,
        RespondTo::Anyone,
        RespondTo::Nobody,
    ] {
        for channels in [vec![], vec!["c1".to_string()]] {
            let owner = if ev.author == AGENT {
                "0".repeat(64)
            } else {
                ev.author.clone()
            };
            let policy = Policy {
                agent: AGENT.into(),
                owner,
                respond_to: mode,
                allowlist: vec![ev.author.clone()],
                channels,
                run_start: 1_000_000,
            };
            let d = decide(&policy, ev);
            if ev.author == AGENT {
                assert!(matches!(d, Decision::Drop(_)), "self-authored events are dropped");
            }
            // Nothing from before the run's start has any effect.
            if ev.created_at < policy.run_start {
                assert!(
                    matches!(d, Decision::Drop(_)),
                    "an earlier run's event is dropped"
                );
            }
            // The owner's exact !shutdown of this run, addressed to the agent, always stops it.
            if ev.kind == 9
                && ev.created_at >= policy.run_start
                && ev.author == policy.owner
                && ev.author != AGENT
                && ev.addresses(AGENT)
                && ev.content.trim() == "!shutdown"
            {
                assert_eq!(d, Decision::Shutdown);
            }
            if let Decision::Dispatch { channel, .. } = &d {
                let _ = reply_tags(ev, channel, true);
                let _ = typing_tags(ev, channel);
            }
        }
    }
    let mut seen = SeenIds::new(4);
    assert!(seen.insert(&ev.id));
    assert!(!seen.insert(&ev.id));
}

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // As a relay frame (what the relay task parses) ...
    if let Ok(RelayMessage::Event { event, .. }) = RelayMessage::from_json(text) {
        check_event(&InboundEvent::from_event(&event));
    }
    // ... and as a bare event.
    if let Ok(event) = Event::from_json(text) {
        let _ = event.verify();
        check_event(&InboundEvent::from_event(&event));
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

//! Configuration and environment parsing: arbitrary arguments (NUL-separated
//! `--name value` tokens, as the environment would deliver them) through the
//! CLI parser and the pure validation. Nothing may panic; an accepted
//! configuration keeps its documented bounds; no refusal message carries a
//! key-shaped private key value.
#![cfg_attr(fuzzing, no_main)]

use buzz_acp::cli::Cli;
use buzz_acp::config::{Ambient, Config, MAX_AGENTS, MAX_PRESENCE_INTERVAL_SECS};
use buzz_acp::exit::Exit;
use clap::Parser;
use std::path::PathBuf;

/// One input through every check of this target; a panic is a finding.
/// `cargo fuzz` runs it, and the suite replays the corpus through it
/// (conformance/tests/fuzz_corpus.rs).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut argv = vec!["buzz-acp".to_string()];
    argv.extend(text.split('\0').map(str::to_string));
    let Ok(cli) = Cli::try_parse_from(&argv) else {
        return;
    };
    let ambient = Ambient {
        now_secs: 1_800_000_000,
        cwd: Some(PathBuf::from("/work")),
    };
    match Config::from_cli(&cli, &ambient, || "0".repeat(32)) {
        Ok(c) => {
            assert!((1..=MAX_AGENTS as usize).contains(&c.agents));
            assert!(c.presence_interval.as_secs() <= MAX_PRESENCE_INTERVAL_SECS);
            assert_ne!(c.identity.owner, c.identity.pubkey, "the agent never owns itself");
            assert!(c.cwd.is_absolute());
            assert_eq!(c.run_nonce.len(), 32);
        }
        Err(e) => {
            assert!(matches!(e.exit(), Exit::Config | Exit::Identity | Exit::Internal));
            let looks_secret = |k: &&str| {
                k.starts_with("nsec1") || (k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()))
            };
            if let Some(k) = cli.private_key.as_deref().map(str::trim).filter(looks_secret) {
                assert!(!e.to_string().contains(k), "a refusal echoed the key");
            }
        }
    }
}

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));

//! Launcher conformance (issue 5 "Tests"; spec §Discovery, §Invocation,
//! §Provider Output Is Untrusted, I1, I2, I3, Known Defects 3/5/8).
//!
//! Providers are the fake built from `src/bin/fake-provider.rs`, installed as
//! `buzz-backend-<behaviour>`; presence runs over nostr-relay-builder's real
//! in-process relay; the local backend runs the real harness. One module per
//! case family of the issue.

mod deadline;
mod discovery_cases;
mod gate;
mod hostile;
mod local;
mod presence;
mod secrets;
mod validation;

use buzz_conformance::launcher_support::{World, wait_gone};
use desktop_launcher::app::{self, AppError};
use desktop_launcher::discovery;
use desktop_launcher::presence::{Derived, Tracker};
use desktop_launcher::record::Backend;
use desktop_launcher::relay;
use nostr_relay_builder::prelude::{LocalRelay, RelayBuilder};
use nostr_sdk::prelude::*;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const FAKE: &str = env!("CARGO_BIN_EXE_fake-provider");

fn fake() -> &'static Path {
    Path::new(FAKE)
}

fn start(w: &World) -> (Result<desktop_launcher::gate::Deployed, AppError>, Vec<String>) {
    let mut lines = Vec::new();
    let r = app::start_provider(&w.store, "agent", &w.options(None), &mut |l| {
        lines.push(l.to_string())
    });
    (r, lines)
}

fn err_text(r: Result<desktop_launcher::gate::Deployed, AppError>) -> String {
    match r {
        Ok(d) => panic!("expected a failure, got agent_id {}", d.agent_id),
        Err(e) => e.to_string(),
    }
}

fn set_config(w: &World, cfg: serde_json::Value) {
    let mut rec = w.store.agent("agent").unwrap();
    if let Backend::Provider { config, .. } = &mut rec.backend {
        *config = cfg.as_object().unwrap().clone();
    }
    w.store.save_agent(&rec).unwrap();
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

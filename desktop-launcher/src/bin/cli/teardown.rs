//! `undeploy` and `delete` of `buzz-launcher` (issue 21 part 1; spec §Stop
//! and Delete): thin printing over [`desktop_launcher::app::teardown`]. What was
//! removed goes to stdout, the provider's progress and the orphan warning to
//! stderr.

use super::{emit, out};
use anyhow::Result;
use desktop_launcher::app::teardown;
use desktop_launcher::app::{StartOptions, Store, Undeployed};

fn progress(line: &str) {
    eprintln!("  provider: {line}");
}

fn print_undeployed(name: &str, u: &Undeployed) {
    out!(
        "{name} undeployed: removed {}",
        teardown::removed_text(&u.removed)
    );
    out!("  provider {} (sha256 {})", u.path.display(), u.sha256);
}

/// `undeploy AGENT`: tears the agent down on its provider, keeps the record.
pub(crate) fn undeploy(store: &Store, name: &str) -> Result<()> {
    let opts = StartOptions::from_env(store)?;
    eprintln!("{name}: discovering provider, staging and checking it before `undeploy`");
    let u = teardown::undeploy(store, name, &opts, &mut progress)?;
    print_undeployed(name, &u);
    Ok(())
}

/// `delete AGENT [--force-remote-delete]` (and `agent delete`): a deployed
/// agent is undeployed first.
pub(crate) fn delete(store: &Store, name: &str, force_remote_delete: bool) -> Result<()> {
    let opts = StartOptions::from_env(store)?;
    let d = teardown::delete(store, name, &opts, force_remote_delete, &mut progress)?;
    if let Some(u) = &d.undeployed {
        print_undeployed(name, u);
    }
    if let Some(w) = &d.orphan_warning {
        eprintln!("warning: {w}");
    }
    out!("deleted {name}");
    Ok(())
}

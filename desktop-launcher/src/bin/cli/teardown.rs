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
    if let Some(w) = teardown::workspace_text(u) {
        out!("  {w}");
    }
    out!("  provider {} (sha256 {})", u.path.display(), u.sha256);
}

fn workspace(keep: bool) -> teardown::Workspace {
    if keep {
        teardown::Workspace::Keep
    } else {
        teardown::Workspace::Remove
    }
}

/// `undeploy AGENT [--keep-workspace]`: tears the agent down on its
/// provider, keeps the record.
pub(crate) fn undeploy(store: &Store, name: &str, keep_workspace: bool) -> Result<()> {
    let opts = StartOptions::from_env(store)?;
    eprintln!("{name}: discovering provider, staging and checking it before `undeploy`");
    let u = teardown::undeploy(store, name, &opts, workspace(keep_workspace), &mut progress)?;
    print_undeployed(name, &u);
    Ok(())
}

/// `delete AGENT [--force-remote-delete] [--keep-workspace]` (and `agent
/// delete`): a deployed agent is undeployed first.
pub(crate) fn delete(
    store: &Store,
    name: &str,
    force_remote_delete: bool,
    keep_workspace: bool,
) -> Result<()> {
    let opts = StartOptions::from_env(store)?;
    let d = teardown::delete(
        store,
        name,
        &opts,
        force_remote_delete,
        workspace(keep_workspace),
        &mut progress,
    )?;
    if let Some(u) = &d.undeployed {
        print_undeployed(name, u);
    }
    if let Some(w) = &d.orphan_warning {
        eprintln!("warning: {w}");
    }
    if let Some(n) = d.shared.note() {
        eprintln!("note: {n}");
    }
    out!("deleted {name}");
    Ok(())
}

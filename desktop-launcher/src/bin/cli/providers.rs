//! `providers` of `buzz-launcher` (spec §Discovery; issue 24 item 5
//! "discovery names the path it searched"): the providers found, with the
//! shadowed and rejected candidates, or the directories searched when none
//! was; `providers approve ID` records a binary's digest for strict mode.
//! Printing only, over [`desktop_launcher::app::providers`].

use super::{ProvidersCmd, emit, out};
use anyhow::Result;
use desktop_launcher::app::{self, Store};

/// `providers` and `providers approve ID`.
pub(crate) fn run(store: &Store, cmd: ProvidersCmd) -> Result<()> {
    match cmd {
        ProvidersCmd::List => {
            let p = app::providers::list(store)?;
            if let Some(note) = &p.override_note {
                out!("{note}");
            }
            if p.providers.is_empty() {
                out!(
                    "no providers found: looked for buzz-backend-<id> in {} (BUZZ_PROVIDER_PATH, the launcher's directory, PATH, ~/.local/bin)",
                    p.searched
                );
            }
            for x in &p.providers {
                out!("{}\t{}", x.id, x.path.display());
            }
            for s in &p.shadowed {
                out!("  shadowed {} (by {})", s.path.display(), s.by.display());
            }
            for r in &p.rejected {
                out!("  rejected {}: {}", r.path.display(), r.reason);
            }
        }
        ProvidersCmd::Approve { id } => {
            let a = app::providers::approve(store, &id)?;
            out!("approved {} {} sha256 {}", a.id, a.path.display(), a.sha256);
        }
    }
    Ok(())
}

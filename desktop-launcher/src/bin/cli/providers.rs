//! `providers` of `buzz-launcher` (spec §Discovery; issue 24 item 5
//! "discovery names the path it searched"): the providers found, with the
//! shadowed and rejected candidates, or the directories searched when none
//! was; `providers approve ID` records a binary's digest for strict mode.

use super::{ProvidersCmd, emit, out};
use anyhow::{Context, Result};
use desktop_launcher::discovery;
use desktop_launcher::gate;
use desktop_launcher::store::Store;

/// `providers` and `providers approve ID`.
pub(crate) fn run(store: &Store, cmd: ProvidersCmd) -> Result<()> {
    let d = discovery::discover(&discovery::dirs_from_env());
    match cmd {
        ProvidersCmd::List => {
            if let Some(note) = discovery::override_note(&discovery::override_dirs_from_env()) {
                out!("{note}");
            }
            if d.selected.is_empty() {
                out!(
                    "no providers found: looked for buzz-backend-<id> in {} (BUZZ_PROVIDER_PATH, the launcher's directory, PATH, ~/.local/bin)",
                    d.searched_list()
                );
            }
            for (id, path) in &d.selected {
                out!("{id}\t{}", path.display());
            }
            for s in &d.shadowed {
                out!("  shadowed {} (by {})", s.path.display(), s.by.display());
            }
            for r in &d.rejected {
                out!("  rejected {}: {}", r.path.display(), r.reason);
            }
        }
        ProvidersCmd::Approve { id } => {
            let res = d.resolve(&id, None)?;
            let staged =
                gate::stage(&res.path).with_context(|| format!("cannot stage {}", res.path.display()))?;
            store.approve(&id, &staged.sha256)?;
            out!("approved {id} {} sha256 {}", res.path.display(), staged.sha256);
        }
    }
    Ok(())
}

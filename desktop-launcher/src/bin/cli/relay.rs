//! `relay` of `buzz-launcher` (the embedded relay in the foreground, its
//! `status` and `stop`) and the background start that `start`, `chat` and
//! `status` make when an agent's relay is the embedded default: thin
//! printing over [`desktop_launcher::app::embedded_relay`].

use super::{RelayArgs, RelayCmd, emit, out, runtime};
use anyhow::{Context, Result};
use desktop_launcher::app::embedded_relay::{self as embedded, Ensured, Stale, Stopped};
use desktop_launcher::app::{AgentRecord, Store};

pub(crate) fn ensure_embedded(store: &Store, agents: &[AgentRecord]) -> Result<()> {
    if let Some(Ensured::Started { pid, replaced }) = embedded::ensure_for(store, agents)? {
        let url = embedded::url(store)?;
        match replaced {
            Some(Stale {
                pid: old,
                ended: true,
            }) => eprintln!(
                "embedded relay: recorded pid {old} was stale (alive, not serving: ended); started pid {pid} on {url}"
            ),
            Some(Stale {
                pid: old,
                ended: false,
            }) => eprintln!(
                "embedded relay: recorded pid {old} was stale (not this state dir's relay: left alone); started pid {pid} on {url}"
            ),
            None => eprintln!("embedded relay: started pid {pid} on {url}"),
        }
    }
    Ok(())
}

pub(crate) fn relay_cmd(store: &Store, args: RelayArgs) -> Result<()> {
    match args.cmd {
        Some(RelayCmd::Stop) => match embedded::stop(store)? {
            Stopped::Stopped { pid } => out!("relay stopped (pid {pid})"),
            Stopped::NotRunning => out!("relay not running"),
        },
        Some(RelayCmd::Status) => match embedded::status(store)? {
            embedded::Status { url, pid: Some(pid) } => out!("relay {url} running (pid {pid})"),
            embedded::Status { url, pid: None } => out!("relay {url} not running"),
        },
        None => {
            let opts = embedded::Serve {
                listen: args.listen,
                data: args.data,
                allow_public: args.allow_public,
                public_urls: args.public_urls,
                max_sessions: args.max_sessions.map(|n| n as usize),
            };
            runtime()?.block_on(async {
                let serving = embedded::serve(store, opts).await?;
                out!("relay {}", serving.running.url());
                eprintln!(
                    "serving the owner {} and its agents; data {} ({} stored events loaded); stop with Ctrl-C or `buzz-launcher relay stop`",
                    serving.owner,
                    serving.data.display(),
                    serving.running.replay.loaded
                );
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .context("cannot install the SIGTERM handler")?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                serving.shutdown(store)?;
                eprintln!("relay stopped");
                anyhow::Ok(())
            })?;
        }
    }
    Ok(())
}

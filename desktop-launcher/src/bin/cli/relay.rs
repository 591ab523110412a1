//! `relay` of `buzz-launcher` (the embedded relay in the foreground, its
//! `status` and `stop`) and the background start that `start`, `chat` and
//! `status` make when an agent's relay is the embedded default: thin
//! printing over [`desktop_launcher::embedded`] and
//! [`buzz_relay`].

use super::{RelayArgs, RelayCmd, emit, out, runtime};
use anyhow::{Context, Result};
use desktop_launcher::embedded;
use desktop_launcher::record::AgentRecord;
use desktop_launcher::store::Store;

pub(crate) fn ensure_embedded(store: &Store, agents: &[AgentRecord]) -> Result<()> {
    if let Some(embedded::Ensured::Started { pid, replaced }) = embedded::ensure_for(store, agents)? {
        let url = embedded::url(store)?;
        match replaced {
            Some(embedded::Stale {
                pid: old,
                ended: true,
            }) => eprintln!(
                "embedded relay: recorded pid {old} was stale (alive, not serving: ended); started pid {pid} on {url}"
            ),
            Some(embedded::Stale {
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
            embedded::Stopped::Stopped { pid } => out!("relay stopped (pid {pid})"),
            embedded::Stopped::NotRunning => out!("relay not running"),
        },
        Some(RelayCmd::Status) => {
            let url = embedded::url(store)?;
            match embedded::running(store)? {
                Some(pid) => out!("relay {url} running (pid {pid})"),
                None => out!("relay {url} not running"),
            }
        }
        None => {
            let owner = store.owner()?.public_key().to_hex();
            let state_port = embedded::port(store)?;
            let host = embedded::host()?;
            let listen = args
                .listen
                .unwrap_or_else(|| std::net::SocketAddr::from((host, state_port)));
            let data = args.data.unwrap_or_else(|| embedded::data_dir(store));
            let cfg = buzz_relay::RelayConfig {
                listen,
                allow_public: args.allow_public,
                data: Some(data.clone()),
                owner_hex: owner.clone(),
                limits: Default::default(),
            };
            runtime()?.block_on(async {
                // Agents are admitted only while their record exists here (revocation).
                let admission = buzz_relay::Admission {
                    public_urls: args.public_urls,
                    agents: Some(std::sync::Arc::new(desktop_launcher::enrolled::Enrolled::new(
                        store.clone(),
                    ))),
                };
                let running = buzz_relay::serve_with(cfg, admission).await?;
                // This state dir's relay: its port on the embedded relay's host
                // (127.0.0.1, or `BUZZ_EMBEDDED_RELAY_HOST`).
                let is_default = running.addr().ip() == std::net::IpAddr::V4(host) && running.addr().port() == state_port;
                // Only the process that bound the port records itself.
                if is_default {
                    embedded::record_self(store, &data)?;
                }
                out!("relay {}", running.url());
                eprintln!(
                    "serving the owner {owner} and its agents; data {} ({} stored events loaded); stop with Ctrl-C or `buzz-launcher relay stop`",
                    data.display(),
                    running.replay.loaded
                );
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .context("cannot install the SIGTERM handler")?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                running.shutdown();
                if is_default {
                    embedded::clear_self(store)?;
                }
                eprintln!("relay stopped");
                anyhow::Ok(())
            })?;
        }
    }
    Ok(())
}

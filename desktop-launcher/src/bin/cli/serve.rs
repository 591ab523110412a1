//! `ui` and `serve` of `buzz-launcher`. `serve` runs the waker alone
//! (issue 33): one line per wake, refusal or failure on stdout.
//!
//! `ui`: serve the Start page (issue 7; issue 24 item 5
//! "`ui` accepts `localhost:PORT` and prints each error once": the address
//! is parsed by [`super::listen`], a failure is printed as one sentence by
//! [`ui_error`]).

use super::{emit, out};
use anyhow::Result;
use desktop_launcher::app::Store;

/// `serve`: the waker until interrupted; refused while another process of
/// this state dir is the waker.
pub(crate) fn serve(store: Store) -> Result<()> {
    let Some(_claimed) = desktop_launcher::app::waker::claim(&store)? else {
        anyhow::bail!(
            "{}; one waker per state dir is enough",
            desktop_launcher::app::waker_text(&store)
        );
    };
    out!(
        "waker running (pid {}): sleeping agents of this state dir wake on a mention their gate accepts",
        std::process::id()
    );
    let harness = desktop_launcher::app::harness_program();
    let opts = desktop_launcher::app::StartOptions::from_env(&store)?;
    super::runtime()?.block_on(desktop_launcher::app::waker::run(
        store,
        harness,
        opts,
        &mut |l| out!("{}: {}", l.agent, l.text),
    ))?;
    Ok(())
}

/// `ui`: serve the Start page until interrupted. The URL (with its token in
/// the fragment) goes to stdout only.
pub(crate) fn ui(store: Store, listen: std::net::SocketAddr, open: bool) -> Result<()> {
    let opener_store = store.clone();
    let served = super::runtime()?.block_on(desktop_launcher::ui::serve(store, listen, move |url| {
        out!("Start page: {url}");
        if open {
            // The opener gets a private redirect page's path, never the URL:
            // argv is readable by every local user, the state dir is not.
            let page = match desktop_launcher::ui::write_open_page(&opener_store, url) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("warning: cannot write the page to open ({e}); open the URL above yourself");
                    return;
                }
            };
            if let Err(e) = std::process::Command::new("xdg-open")
                .arg(&page)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                eprintln!("warning: cannot run xdg-open ({e}); open the URL above yourself");
            }
        }
    }));
    served.map_err(ui_error)
}

/// A `ui` failure as one sentence: the error's own text names the OS error
/// already, so its source is not printed again (issue 24 item 5); a port
/// in use gets its fix.
fn ui_error(e: desktop_launcher::ui::UiError) -> anyhow::Error {
    match &e {
        desktop_launcher::ui::UiError::Bind { addr, source }
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            anyhow::anyhow!(
                "{e}; another program uses port {}: pick another with --listen localhost:PORT, or --listen localhost:0 for a free one",
                addr.port()
            )
        }
        _ => anyhow::anyhow!("{e}"),
    }
}

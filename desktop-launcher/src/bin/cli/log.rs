//! `log` of `buzz-launcher` (issue 34 item 2): an agent's conversation as a
//! person reads it, from its relay: who said what and when, each mention
//! with its replies under it ([`desktop_launcher::app::conversation`]);
//! `--follow` then prints each new message as it comes, until Ctrl-C.

use super::{emit, out};
use anyhow::Result;
use desktop_launcher::app::{self, Store, conversation_view as view};
use std::time::Duration;

pub(crate) async fn log(store: &Store, name: &str, since: Option<&str>, follow: bool) -> Result<()> {
    let since = match since {
        Some(s) => app::usage_view::parse_since(s, app::unix_now()).map_err(anyhow::Error::msg)?,
        None => 0,
    };
    // Subscribed before the look, so nothing falls between the two.
    let mut feed = if follow {
        Some(app::conversation::follow(store, name, app::unix_now()).await?)
    } else {
        None
    };
    let said = app::conversation::conversation(store, name, since).await?;
    let mut shown: std::collections::HashSet<String> = said.iter().map(|s| s.id.clone()).collect();
    let entries = view::turns(said);
    if entries.is_empty() {
        eprintln!("no messages with `{name}` on its relay yet");
    }
    for l in view::lines(&entries, name) {
        out!("{l}");
    }
    let Some(feed) = feed.as_mut() else {
        return Ok(());
    };
    eprintln!("following `{name}` (Ctrl-C ends)");
    loop {
        let asked = std::time::Instant::now();
        match feed.next(Duration::from_secs(3600)).await {
            Some(s) if shown.insert(s.id.clone()) => {
                let indent = if s.who == view::Who::Agent { "  " } else { "" };
                out!("{}", view::line(&s, name, indent));
            }
            // At once and with nothing: the connection is gone.
            None if asked.elapsed() < Duration::from_secs(1) => {
                anyhow::bail!("the relay of `{name}` closed the connection; run `log --follow` again")
            }
            _ => {}
        }
    }
}

//! The Start page (issue 11): the desktop's Start button as a local web page,
//! `buzz-launcher ui`. An embedded single page and a small JSON API over the
//! very functions the CLI calls ([`crate::app`], the one module the page
//! uses), so the page and the CLI cannot drift.
//!
//! - [`guard`]: loopback only, the token, `Host`/`Origin` checks (DNS rebinding, CSRF).
//! - [`form`]: `config_schema` rendering rules and field-keyed I2 errors
//!   (spec §Provider Protocol `info`, I2, Known Defect 8).
//! - `dots`: the handlers' side of live presence (the last snapshot of each dot).
//! - `shared`: the handlers' shared state, the replies and the redactor cache.
//! - [`server`]: the server, the guard layer and the router.
//! - `routes`: records, agent presets and providers (create, edit, delete,
//!   presets, schema, approve).
//! - `ops`: Start (one live local harness per agent, spec I4), Stop as
//!   `!shutdown` (spec §Stop), chat; the embedded relay on demand.
//! - `teardown`: Delete and Undeploy (issue 21): the plan the confirmation
//!   names, then [`crate::app::teardown`] with the provider's progress as events.
//! - `doing`: live activity from the agents' observer frames (issue 34).
//! - `history`: an agent's conversation and usage (issue 34), as the CLI's
//!   `log` and `usage` read them, with the usage plots as inline SVG.
//! - `live`: the presence tracker feeding Server-Sent Events (spec I3), with
//!   relay retries and TTL expiry.
//!
//! No secret reaches the browser: records are sent with env *names* only (the
//! form's API key goes one way, into the agent's secret env), no
//! key material is ever read into a response, and every string of every
//! response and event is passed through a [`crate::app::Redactor`] built
//! from the state dir's secrets (`Store::secrets`, fail closed) as a last
//! line of defence.

mod doing;
mod dots;
pub mod form;
pub mod guard;
mod history;
mod live;
mod ops;
mod routes;
pub mod server;
mod shared;
mod teardown;

pub use server::{UiError, serve};

use crate::app::{Store, StoreError, write_private};
use std::path::PathBuf;

/// Escapes text for an HTML attribute or text node.
fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Writes the page `--open` hands to the desktop's browser: a local HTML
/// file (mode 0600, in the private state dir) that redirects to `url`.
/// The opener's argv then carries only this file's path, never the token,
/// so `ps` and `/proc/*/cmdline` show nothing another local user could
/// reuse; the file itself is as private as the owner's keys beside it. It
/// is rewritten at every `ui --open`, and its token dies with the server.
pub fn write_open_page(store: &Store, url: &str) -> Result<PathBuf, StoreError> {
    let path = store.root().join("start-page.html");
    let u = html_escape(url);
    let page = format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={u}\">\n<title>Buzz remote agents</title>\n\
         <p><a href=\"{u}\">Open the Start page</a></p>\n"
    );
    write_private(&path, page.as_bytes(), 0o600)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_open_page_is_private_and_its_path_carries_no_token() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("state")).unwrap();
        let token = "ab".repeat(32);
        let url = format!("http://127.0.0.1:4711/#token={token}&x=\"<'>");
        let path = write_open_page(&store, &url).unwrap();
        assert!(!path.to_string_lossy().contains(&token));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let page = std::fs::read_to_string(&path).unwrap();
        let escaped = format!("http://127.0.0.1:4711/#token={token}&amp;x=&quot;&lt;&#39;&gt;");
        assert!(page.contains(&format!("content=\"0;url={escaped}\"")), "{page}");
        assert!(page.contains(&format!("href=\"{escaped}\"")), "{page}");
        assert!(!page.contains("\"<'>"), "unescaped: {page}");
    }
}

//! The launcher's layer order (issue 31 item 2: no import circles and no
//! arrows that run back up), read from the source itself. Every module of the
//! crate is in [`ORDER`], bottom first, and may use only modules before it;
//! inside `app/` the same holds for [`APP_ORDER`]. A module added without a
//! place in the order, or a `use` that reaches up, fails here with the file
//! and the arrow. `lib.rs` says the same order in words. The front ends
//! (the page, `demo`, the CLI) use only the one API, `app` ([`FRONT_ENDS`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first. The pure rules (limits, what a secret is, presence, the
/// runtime table, the records), then the state dir (records and keys), then
/// resolution and the provider gate, then the relay client and the local
/// harness, then the operations (`app`), then the front ends.
const ORDER: &[&str] = &[
    // pure rules and data
    "limits",
    "procid",
    "runtime",
    "presence",
    "response",
    "harness_exit",
    "secrets",
    "redact",
    "record",
    "shared_record",
    "sync_plan",
    "restart",
    "shown",
    "envfile",
    "status_lines",
    "waits",
    "wake",
    "usage_view",
    "measured",
    "usage_plot",
    "conversation_view",
    "activity",
    // the state dir: records and keys
    "lock",
    "store",
    "record_heads",
    "secret_store",
    "enrolled",
    // resolution, presets and the provider gate
    "presets",
    "resolve",
    "payload",
    "discovery",
    "stage",
    "invoke",
    "gate",
    // the relay client, the local harness, the embedded relay's state
    "relay",
    "child_watch",
    "local",
    "embedded",
    // the one API
    "app",
    // front ends
    "ui",
    "demo",
];

/// `app/`'s submodules, bottom first (`mod.rs` only names them).
const APP_ORDER: &[&str] = &[
    "error",
    "agent",
    "local_state",
    "share",
    "conflict",
    "sync",
    "agents",
    "start",
    "delete",
    "providers",
    "embedded_relay",
    "relay_ops",
    "presence_feed",
    "status_watch",
    "teardown",
    "usage",
    "conversation",
    "activity_feed",
    "waker",
];

/// `ui/`'s submodules, bottom first: the guard and the form rules, the
/// presence handle, the handlers' shared state and replies, the presence
/// task, the handlers, and the server that routes to them.
const UI_ORDER: &[&str] = &[
    "guard", "form", "dots", "shared", "live", "doing", "ops", "routes", "teardown", "history", "server",
];

/// What each front end may use of the crate: the one API (`app`), and for
/// the binary the page's server and `demo` it starts (issue 31 item 1).
const FRONT_ENDS: &[(&str, &str, &[&str])] = &[
    ("ui", "crate::", &["app", "ui"]),
    ("demo.rs", "crate::", &["app"]),
    ("bin", "desktop_launcher::", &["app", "ui", "demo"]),
];

fn src() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("src")
}

/// The code of a file without its comments and without its unit tests.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifiers following each occurrence of `prefix`, and those of a
/// `prefix{a, b::c}` group.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let head: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !head.is_empty() {
                    out.insert(head);
                }
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() {
                out.insert(head);
            }
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The top-level module a file of `src/` belongs to (`None` for `lib.rs`
/// and the binary).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.as_str() {
        "lib.rs" | "bin" => None,
        f => Some(f.trim_end_matches(".rs").trim_end_matches("_tests").to_string()),
    }
}

#[test]
fn every_module_uses_only_modules_below_it() {
    let mut arrows_up = Vec::new();
    let mut unplaced = BTreeSet::new();
    for file in rust_files(&src()) {
        let Some(module) = module_of(&file) else { continue };
        let Some(at) = ORDER.iter().position(|m| *m == module) else {
            unplaced.insert(module);
            continue;
        };
        for used in names_after(&code(&file), "crate::") {
            if used == module {
                continue;
            }
            match ORDER.iter().position(|m| *m == used) {
                Some(u) if u < at => {}
                Some(_) => arrows_up.push(format!("{}: {module} -> {used}", file.display())),
                None => {}
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules with no place in the layer order (add them to ORDER and lib.rs): {unplaced:?}"
    );
    assert!(
        arrows_up.is_empty(),
        "arrows that run up or sideways:\n{}",
        arrows_up.join("\n")
    );
}

/// The arrows inside a directory module that run up or sideways: a file's
/// `super::x` must name a file before it in `order` (`mod.rs` and `tests.rs`
/// only name them), and none may go back through `crate::<dir>`.
fn arrows_up_within(dir_name: &str, order: &[&str]) -> Vec<String> {
    let dir = src().join(dir_name);
    let mut arrows_up = Vec::new();
    for file in rust_files(&dir) {
        let name = file.file_stem().unwrap().to_str().unwrap().to_string();
        if name == "mod" || name == "tests" {
            continue;
        }
        let at = order
            .iter()
            .position(|m| *m == name)
            .unwrap_or_else(|| panic!("{dir_name}/{name}.rs has no place in the order"));
        let code = code(&file);
        for used in names_after(&code, "super::") {
            match order.iter().position(|m| *m == used) {
                Some(u) if u < at => {}
                _ => arrows_up.push(format!("{}: {name} -> super::{used}", file.display())),
            }
        }
        if code.contains(&format!("crate::{dir_name}")) {
            arrows_up.push(format!("{}: {name} -> crate::{dir_name}", file.display()));
        }
    }
    arrows_up
}

#[test]
fn the_submodules_of_app_and_ui_use_only_those_below_them() {
    let mut arrows_up = arrows_up_within("app", APP_ORDER);
    arrows_up.extend(arrows_up_within("ui", UI_ORDER));
    assert!(
        arrows_up.is_empty(),
        "arrows that run up or sideways:\n{}",
        arrows_up.join("\n")
    );
}

#[test]
fn the_front_ends_use_only_the_one_api() {
    let mut reaching = Vec::new();
    for (place, prefix, allowed) in FRONT_ENDS {
        let path = src().join(place);
        let files = if path.is_dir() {
            rust_files(&path)
        } else {
            vec![path]
        };
        assert!(!files.is_empty(), "{place}: no source files");
        for file in files {
            for used in names_after(&code(&file), prefix) {
                if !allowed.contains(&used.as_str()) {
                    reaching.push(format!("{}: {prefix}{used}", file.display()));
                }
            }
        }
    }
    assert!(
        reaching.is_empty(),
        "front ends reaching past `app` (add the operation or the type to `app`):\n{}",
        reaching.join("\n")
    );
}

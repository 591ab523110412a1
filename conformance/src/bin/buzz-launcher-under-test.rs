//! The `buzz-launcher` command line, compiled from its very source file
//! inside the conformance crate, so the Start page suites
//! (`tests/ui.rs`, `tests/ui_browser.rs`) find it with
//! `env!("CARGO_BIN_EXE_buzz-launcher-under-test")` and always run the
//! current code, never a stale build.

#[path = "../../../desktop-launcher/src/bin/buzz-launcher.rs"]
mod launcher;

fn main() {
    launcher::main()
}

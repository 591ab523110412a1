//! The process entry point shared by the `buzz-backend-kubernetes` binary
//! (spec §Invocation; [L2] item 1).
//!
//! Exit code carries one bit: 0 whenever a response was written (`ok:false`
//! included), and the single code [`EXIT_CRASH`] on every crash path with
//! nothing on stdout ([L2]: non-zero values carry no structured meaning) —
//! the response is written in a single write at the very end, and a panic is
//! caught before it, so no half response can appear.
//!
//! The operation deadline is measured from process start: callers capture an
//! [`Instant`] first thing in `main` and pass it to [`run`].

use crate::protocol;
use buzz_contract::wire::MAX_REQUEST_BYTES;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// Setting this to `panic` makes the process panic after reading stdin (tests only).
pub const CRASH_TEST_ENV: &str = "BUZZ_K8S_CRASH_TEST";
/// The one exit code of every crash path (a caught panic, stdin or stdout failure).
pub const EXIT_CRASH: u8 = 1;

/// The whole process, timed from now; prefer [`run`] with an `Instant`
/// captured first thing in `main`.
pub fn main() -> ExitCode {
    run(Instant::now())
}

/// The whole process: read, handle, write once, exit. `started` is the
/// process start, the origin of the operation deadline.
pub fn run(started: Instant) -> ExitCode {
    // The default hook prints the panic payload, which could hold input data.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("buzz-backend-kubernetes: internal error{at}; no response was written");
    }));
    let mut input = Vec::new();
    let limit = (MAX_REQUEST_BYTES + 1) as u64;
    if let Err(e) = std::io::stdin().lock().take(limit).read_to_end(&mut input) {
        eprintln!("buzz-backend-kubernetes: could not read stdin: {e}");
        return ExitCode::from(EXIT_CRASH);
    }
    let response = match std::panic::catch_unwind(|| {
        // Test seam for the crash-path contract (a panic writes nothing to stdout).
        if std::env::var_os(CRASH_TEST_ENV).is_some_and(|v| v == "panic") {
            panic!("crash test requested");
        }
        protocol::handle(&input, started)
    }) {
        Ok(r) => r,
        Err(_) => return ExitCode::from(EXIT_CRASH),
    };
    let mut line = response.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    if out.write_all(line.as_bytes()).and_then(|_| out.flush()).is_err() {
        return ExitCode::from(EXIT_CRASH);
    }
    ExitCode::SUCCESS
}

//! The provider process (spec §Invocation; [L2] item 1), the same for
//! every binding: read one request, answer one response, exit.
//!
//! The exit code carries one bit: 0 whenever a response was written
//! (`ok:false` included), and the single code [`EXIT_CRASH`] on every crash
//! path with nothing on stdout ([L2]: non-zero values carry no structured
//! meaning). The response is written in a single write at the very end, and
//! a panic is caught before it, so no half response can appear. The panic
//! hook prints where, never the payload: a panic message could hold input.
//!
//! The operation deadline is measured from process start: a binding
//! captures an [`Instant`] first thing in `main` and passes it to [`run`].

use buzz_contract::wire::MAX_REQUEST_BYTES;
use serde_json::Value;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// The one exit code of every crash path (a caught panic, stdin or stdout failure).
pub const EXIT_CRASH: u8 = 1;
/// Exit code of a command line a provider does not take (nothing on stdout).
pub const EXIT_USAGE: u8 = 2;

/// One binding: its binary's name, its version, its help text, and the
/// handler from the request's bytes to the response object.
pub struct Provider {
    /// The binary's name (`buzz-backend-kubernetes`), the prefix of its
    /// stderr lines.
    pub name: &'static str,
    pub version: &'static str,
    /// What `--help` prints: the protocol, with examples a person can paste.
    pub help: fn() -> String,
    /// Handles one request; never panics on input. The `Instant` is the
    /// process start.
    pub handle: fn(&[u8], Instant) -> Value,
    /// A variable that, set to `panic`, makes the process panic after
    /// reading stdin (the crash-path tests).
    pub crash_test_env: &'static str,
}

/// `--help` and `--version` answer on stdout; any other argument is refused
/// on stderr with [`EXIT_USAGE`]; no argument (the protocol) returns `None`.
pub fn arguments(p: &Provider, mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<ExitCode> {
    let first = args.next()?;
    match first.to_str() {
        Some("--help" | "-h" | "help") => {
            print!("{}", (p.help)());
            Some(ExitCode::SUCCESS)
        }
        Some("--version" | "-V") => {
            println!("{} {}", p.name, p.version);
            Some(ExitCode::SUCCESS)
        }
        _ => {
            eprintln!(
                "{}: unexpected argument {:?}; this provider takes no arguments and reads one JSON request on stdin (try --help)",
                p.name,
                first.to_string_lossy()
            );
            Some(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// The whole process: read, handle, write once, exit. `started` is the
/// process start, the origin of the operation deadline.
pub fn run(p: &'static Provider, started: Instant) -> ExitCode {
    if let Some(code) = arguments(p, std::env::args_os().skip(1)) {
        return code;
    }
    crate::diag::set_name(p.name);
    let name = p.name;
    std::panic::set_hook(Box::new(move |info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("{name}: internal error{at}; no response was written");
    }));
    let mut input = Vec::new();
    let limit = (MAX_REQUEST_BYTES + 1) as u64;
    if let Err(e) = std::io::stdin().lock().take(limit).read_to_end(&mut input) {
        eprintln!("{name}: could not read stdin: {e}");
        return ExitCode::from(EXIT_CRASH);
    }
    let response = match std::panic::catch_unwind(|| {
        if std::env::var_os(p.crash_test_env).is_some_and(|v| v == "panic") {
            panic!("crash test requested");
        }
        (p.handle)(&input, started)
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

#[cfg(test)]
mod tests {
    use super::*;

    static P: Provider = Provider {
        name: "buzz-backend-test",
        version: "0.0.1",
        help: || "help text\n".into(),
        handle: |_, _| Value::Null,
        crash_test_env: "BUZZ_TEST_CRASH",
    };

    #[test]
    fn the_protocol_takes_no_argument_and_a_stray_one_is_a_usage_error() {
        assert!(
            arguments(&P, std::iter::empty()).is_none(),
            "no argument: the protocol"
        );
        for ok in ["--help", "-h", "help", "--version", "-V"] {
            assert_eq!(
                arguments(&P, [ok.into()].into_iter()),
                Some(ExitCode::SUCCESS),
                "{ok}"
            );
        }
        assert_eq!(
            arguments(&P, ["--deploy".into()].into_iter()),
            Some(ExitCode::from(EXIT_USAGE))
        );
    }
}

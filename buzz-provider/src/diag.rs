//! Diagnostics: progress lines to stderr, redacted, bounded and without
//! repeats (spec [L2] item 5; §Invocation caps stderr at 64 KiB on the
//! launcher side, and a provider stays at half of it, [`STDERR_BUDGET`]).
//! Each line is `<provider name>: <text>`; the name is set once by
//! [`crate::envelope::run`].

use crate::redact::Redactor;
use std::io::Write;
use std::sync::Mutex;

/// The most bytes of diagnostics one process writes.
pub const STDERR_BUDGET: usize = 32 * 1024;

struct Sink {
    name: &'static str,
    written: usize,
    last: String,
    truncated: bool,
    redactor: Redactor,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    name: "buzz-backend",
    written: 0,
    last: String::new(),
    truncated: false,
    redactor: Redactor::EMPTY,
});

fn sink() -> std::sync::MutexGuard<'static, Sink> {
    SINK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The provider's name, the prefix of every line.
pub fn set_name(name: &'static str) {
    sink().name = name;
}

/// Installs the redactor used for every later diagnostic line.
pub fn set_redactor(r: Redactor) {
    sink().redactor = r;
}

/// The redactor in force (the one [`set_redactor`] installed, else none).
pub fn redactor() -> Redactor {
    sink().redactor.clone()
}

/// Writes one diagnostic line to stderr unless it repeats the previous line
/// or the budget is spent.
pub fn line(msg: &str) {
    let mut s = sink();
    let text = s.redactor.scrub(msg);
    if text == s.last || s.truncated {
        return;
    }
    let line = format!("{}: {text}\n", s.name);
    let mut err = std::io::stderr().lock();
    if s.written + line.len() > STDERR_BUDGET {
        let _ = writeln!(err, "{}: (further diagnostics suppressed)", s.name);
        s.truncated = true;
        return;
    }
    let _ = err.write_all(line.as_bytes());
    s.written += line.len();
    s.last = text;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_payload_values_and_any_nsec_token() {
        let r = Redactor::new(["abcd".to_string(), "abcdefgh".to_string(), "xyz".to_string()]);
        assert_eq!(
            r.scrub("k=abcdefgh v=abcd s=xyz n=nsec1zzzz"),
            "k=[REDACTED] v=[REDACTED] s=xyz n=[REDACTED]"
        );
    }
}

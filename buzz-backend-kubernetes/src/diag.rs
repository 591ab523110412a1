//! Diagnostics: progress lines to stderr, bounded and redacted (spec L2 item 5;
//! §Invocation caps stderr at 64 KiB on the launcher side — we stay well under).

use crate::consts::STDERR_BUDGET;
use std::io::Write;
use std::sync::Mutex;

/// Scrubs known secret values (and any `nsec1…` token) from diagnostics and
/// errors; the shared implementation in `buzz_contract::redact`.
pub type Redactor = buzz_contract::redact::Literals;

struct Sink {
    written: usize,
    last: String,
    truncated: bool,
    redactor: Redactor,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Installs the redactor used for every later diagnostic line.
pub fn set_redactor(r: Redactor) {
    let mut g = SINK.lock().unwrap_or_else(|p| p.into_inner());
    match g.as_mut() {
        Some(s) => s.redactor = r,
        None => {
            *g = Some(Sink {
                written: 0,
                last: String::new(),
                truncated: false,
                redactor: r,
            })
        }
    }
}

/// The redactor in force (the one [`set_redactor`] installed, else none).
pub fn redactor() -> Redactor {
    let g = SINK.lock().unwrap_or_else(|p| p.into_inner());
    g.as_ref().map(|s| s.redactor.clone()).unwrap_or_default()
}

/// Writes one diagnostic line to stderr unless it repeats the previous line
/// or the budget is spent.
pub fn line(msg: &str) {
    let mut g = SINK.lock().unwrap_or_else(|p| p.into_inner());
    let sink = g.get_or_insert_with(|| Sink {
        written: 0,
        last: String::new(),
        truncated: false,
        redactor: Redactor::default(),
    });
    let text = sink.redactor.scrub(msg);
    if text == sink.last || sink.truncated {
        return;
    }
    let line = format!("buzz-backend-kubernetes: {text}\n");
    let mut err = std::io::stderr().lock();
    if sink.written + line.len() > STDERR_BUDGET {
        let _ = err.write_all(b"buzz-backend-kubernetes: (further diagnostics suppressed)\n");
        sink.truncated = true;
        return;
    }
    let _ = err.write_all(line.as_bytes());
    sink.written += line.len();
    sink.last = text;
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

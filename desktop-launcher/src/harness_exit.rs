//! What a local harness's end means (issue 24 item 2 "`start` watches its
//! child"). Pure: exit codes, statuses and log text in, sentences out.
//!
//! - [`meaning`]: the harness's pinned exit codes (spec I5, §Conformance
//!   \[L1\] item 4): the one table in `buzz_contract::exit`, which the
//!   harness exits by.
//! - The harness log of an agent (`logs/<name>.log`) holds one run: each
//!   spawn moves the previous run's log aside and starts the file with
//!   [`run_header`]. [`this_run`] still cuts at the header of the run asked
//!   for, so a log appended to by an older launcher never shows another
//!   run's lines.
//! - [`last_errors`]: the lines worth showing from a run: the harness's
//!   `ERROR`/`WARN` records (timestamp and module cut), clap and panic
//!   messages, else its last lines.
//! - [`logged_exit`]: the code the harness logged on its way out
//!   (`harness exiting code=N`): the only record of how a harness ended
//!   when the launcher that spawned it is gone.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How many error lines a report quotes.
pub const ERROR_LINES: usize = 3;
/// The longest quoted line, in characters.
pub const LINE_MAX_CHARS: usize = 240;

/// What the harness's exit code `code` means: its pinned table,
/// [`buzz_contract::exit`].
pub use buzz_contract::exit::meaning;

/// `exited with code 5 (all agents dead: …)`, `was killed by signal 9`.
pub fn describe(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("exited with code {c} ({})", meaning(c)),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended with an unknown status".to_string(),
    }
}

/// [`describe`] of a process status.
pub fn describe_status(status: &ExitStatus) -> String {
    describe(status.code(), status.signal())
}

/// The line a spawn writes first into the run's log.
pub fn run_header(run: &str, unix_secs: u64) -> String {
    format!("==== buzz-launcher: run {run} started at unix {unix_secs} ====")
}

fn header_run(line: &str) -> Option<&str> {
    line.strip_prefix("==== buzz-launcher: run ")?.split(' ').next()
}

/// The lines of run `run` in `log`: after its header, up to the next
/// header. `None` when the log has no header of that run.
pub fn this_run<'a>(log: &'a str, run: &str) -> Option<Vec<&'a str>> {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.iter().rposition(|l| header_run(l) == Some(run))?;
    let rest = &lines[start + 1..];
    let end = rest
        .iter()
        .position(|l| header_run(l).is_some())
        .unwrap_or(rest.len());
    Some(rest[..end].to_vec())
}

/// A harness tracing line (`<time> LEVEL target: message fields`) as
/// `LEVEL message fields`; `None` for any other line.
fn tracing_line(line: &str) -> Option<(String, bool)> {
    let (time, rest) = line.split_once(' ')?;
    let (level, rest) = rest.trim_start().split_once(' ')?;
    let rest = rest.trim_start();
    let is_time = time.len() >= 20 && time.as_bytes().get(4) == Some(&b'-') && time.ends_with('Z');
    if !is_time || !matches!(level, "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE") {
        return None;
    }
    let message = match rest.split_once(": ") {
        Some((target, m)) if !target.contains(' ') => m,
        _ => rest,
    };
    Some((format!("{level} {message}"), matches!(level, "ERROR" | "WARN")))
}

fn cut(line: &str) -> String {
    let line = line.trim();
    if line.chars().count() <= LINE_MAX_CHARS {
        return line.to_string();
    }
    let mut s: String = line.chars().take(LINE_MAX_CHARS).collect();
    s.push('…');
    s
}

/// The last (at most [`ERROR_LINES`]) lines of a run worth showing: its
/// `ERROR`/`WARN` records and untimed error text (clap's `error:`, a
/// panic), else its last non-blank lines.
pub fn last_errors(run_lines: &[&str]) -> Vec<String> {
    let mut errors = Vec::new();
    for l in run_lines {
        match tracing_line(l) {
            Some((text, true)) => errors.push(cut(&text)),
            Some(_) => {}
            None => {
                let t = l.trim();
                if t.starts_with("error") || t.contains("panicked") {
                    errors.push(cut(t));
                }
            }
        }
    }
    if errors.is_empty() {
        errors = run_lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| cut(&tracing_line(l).map_or_else(|| l.to_string(), |(t, _)| t)))
            .collect();
    }
    let skip = errors.len().saturating_sub(ERROR_LINES);
    errors.split_off(skip)
}

/// The exit code the harness logged on its way out, if it did.
pub fn logged_exit(run_lines: &[&str]) -> Option<i32> {
    run_lines.iter().rev().find_map(|l| {
        let (_, rest) = l.split_once("harness exiting")?;
        rest.split_whitespace()
            .find_map(|f| f.strip_prefix("code="))?
            .parse()
            .ok()
    })
}

/// Why the harness stopped on purpose, as its exit line says
/// (`harness exiting code=0 stop="idle"`, issue 33).
pub fn logged_stop(run_lines: &[&str]) -> Option<buzz_contract::wake::StopReason> {
    run_lines.iter().rev().find_map(|l| {
        let (_, rest) = l.split_once("harness exiting")?;
        let word = rest
            .split_whitespace()
            .find_map(|f| f.strip_prefix("stop="))?
            .trim_matches('"');
        buzz_contract::wake::StopReason::parse(word)
    })
}

/// One sentence of quoted lines: `; last log lines: a | b`, or nothing.
pub fn quote(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; last log lines: {}", lines.join(" | "))
    }
}

/// Why a local harness that no longer runs ended, from its run's log
/// lines: the logged exit code and meaning, and the last error lines (none
/// for an intentional stop).
pub fn ended(run_lines: &[&str]) -> String {
    match logged_exit(run_lines) {
        Some(0) => describe(Some(0), None),
        Some(c) => format!("{}{}", describe(Some(c), None), quote(&last_errors(run_lines))),
        None => format!(
            "ended without logging an exit code (killed, or its machine restarted){}",
            quote(&last_errors(run_lines))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "0123456789abcdef0123456789abcdef";

    fn log() -> String {
        [
            run_header("ffffffffffffffffffffffffffffffff", 1),
            "2026-12-01T14:41:26.367869Z ERROR buzz_acp::acp: an old run's error slot=0".into(),
            run_header(RUN, 2),
            "2026-12-01T14:41:26.234679Z  INFO buzz_acp::entry: buzz-acp starting agent=ab".into(),
            "2026-12-01T14:41:26.367869Z ERROR buzz_acp::acp: the agent command `x` is not installed here (not on PATH) slot=0".into(),
            "2026-12-01T14:41:26.367987Z ERROR buzz_acp::run: all agents dead".into(),
            "2026-12-01T14:41:26.376433Z  INFO buzz_acp::run: harness exiting code=5".into(),
        ]
        .join("\n")
    }

    #[test]
    fn every_pinned_code_has_its_own_meaning() {
        let codes = [0, 1, 2, 3, 4, 5, 6, 101];
        let meanings: std::collections::BTreeSet<&str> = codes.iter().map(|c| meaning(*c)).collect();
        assert_eq!(meanings.len(), codes.len());
        assert_eq!(meaning(7), "not one of the harness's exit codes");
        assert_eq!(
            describe(Some(4), None),
            "exited with code 4 (the relay refused the agent's login: NIP-42 auth denied)"
        );
        assert_eq!(describe(None, Some(9)), "was killed by signal 9");
    }

    #[test]
    fn only_the_asked_run_is_read() {
        let text = log();
        let lines = this_run(&text, RUN).unwrap();
        assert_eq!(lines.len(), 4);
        assert!(!lines.iter().any(|l| l.contains("old run")));
        assert_eq!(this_run(&text, "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"), None);
        let old = this_run(&text, "ffffffffffffffffffffffffffffffff").unwrap();
        assert_eq!(old.len(), 1, "cut at the next header");
    }

    #[test]
    fn errors_are_the_runs_error_records_without_time_or_module() {
        let text = log();
        let lines = this_run(&text, RUN).unwrap();
        assert_eq!(
            last_errors(&lines),
            [
                "ERROR the agent command `x` is not installed here (not on PATH) slot=0",
                "ERROR all agents dead"
            ]
        );
        assert_eq!(logged_exit(&lines), Some(5));
        assert_eq!(
            ended(&lines),
            "exited with code 5 (all agents dead: the agent command could not start or kept dying); \
             last log lines: ERROR the agent command `x` is not installed here (not on PATH) slot=0 | ERROR all agents dead"
        );
        // No error record: clap's own text, else the last lines.
        assert_eq!(
            last_errors(&[
                "error: invalid value 'x' for '--agents <AGENTS>'",
                "",
                "For more information, try '--help'."
            ]),
            ["error: invalid value 'x' for '--agents <AGENTS>'"]
        );
        assert_eq!(last_errors(&["a", "b", "c", "d"]), ["b", "c", "d"]);
        assert_eq!(
            last_errors(&["2026-12-01T14:54:37.379037Z  INFO buzz_acp::run: shutdown complete elapsed_ms=7"]),
            ["INFO shutdown complete elapsed_ms=7"],
            "the time and module are cut from any record"
        );
        assert_eq!(
            ended(&["2026-12-01T14:54:37.379119Z  INFO buzz_acp::run: harness exiting code=0"]),
            "exited with code 0 (an intentional stop: owner !shutdown, SIGTERM/SIGINT or the inactivity reaper)",
            "an intentional stop quotes no lines"
        );
        assert!(ended(&[]).starts_with("ended without logging an exit code"));
        let long = "x".repeat(1000);
        assert_eq!(
            last_errors(&[long.as_str()])[0].chars().count(),
            LINE_MAX_CHARS + 1
        );
    }

    #[test]
    fn the_stop_reason_is_read_off_the_exit_line() {
        use buzz_contract::wake::StopReason;
        let idle = [
            "x",
            "2026-12-03T07:00:00Z  INFO buzz_acp::run: harness exiting code=0 stop=\"idle\"",
        ];
        assert_eq!(logged_stop(&idle), Some(StopReason::Idle));
        assert_eq!(logged_exit(&idle), Some(0));
        let old = ["INFO buzz_acp::run: harness exiting code=0"];
        assert_eq!(
            logged_stop(&old),
            None,
            "a harness that predates the tag says nothing"
        );
        let odd = ["INFO buzz_acp::run: harness exiting code=0 stop=\"nap\""];
        assert_eq!(logged_stop(&odd), None);
    }
}

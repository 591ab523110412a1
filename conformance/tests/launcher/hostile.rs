//! Launcher conformance, case 4: hostile provider outputs (spec §Invocation, wire-facts §8 item 5).

use super::*;

// ---- 4. hostile outputs ----------------------------------------------------------

fn hostile(behaviour: &str, want: &str) {
    let w = World::new(behaviour);
    w.install(fake(), behaviour, None);
    let e = err_text(start(&w).0);
    assert!(e.contains(want), "{behaviour}: {e}");
    let stored = w.store.deploy_state("agent").unwrap();
    assert!(stored.agent_id.is_none(), "{behaviour}");
    let last = stored.last_error.unwrap();
    assert!(last.contains(want), "{behaviour}: {last}");
    assert!(
        last.len() < 8 * 1024,
        "{behaviour}: stored error is {} bytes",
        last.len()
    );
    let survivors = wait_gone(&w.logged_pids(), Duration::from_secs(10));
    assert!(
        survivors.is_empty(),
        "{behaviour}: leftover processes {survivors:?}"
    );
}

#[test]
fn hostile_stdout_over_one_mebibyte() {
    hostile("bigout", "more than 1048576 bytes to stdout");
}

#[test]
fn hostile_daemonised_grandchild_holding_the_pipes() {
    hostile("daemon", "kept its output pipes open");
}

#[test]
fn hostile_non_utf8_stdout() {
    hostile("nonutf8", "not valid UTF-8");
}

#[test]
fn hostile_two_objects() {
    hostile("twoobjects", "several JSON values");
}

#[test]
fn hostile_no_ok_field() {
    hostile("nook", "no `ok` field");
}

#[test]
fn hostile_ok_true_with_non_zero_exit() {
    hostile("exit1ok", "exited with status 1");
}

#[test]
fn hostile_stderr_flood() {
    hostile("stderrflood", "exited with status 1");
}

#[test]
fn hostile_hang_past_the_deadline() {
    hostile("hang", "did not finish within");
}

fn has_control(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

/// Terminal escapes in a provider's progress line and `agent_id` never reach
/// the terminal or the bookkeeping, and an oversized `agent_id` is capped.
#[test]
fn hostile_terminal_escapes_in_progress_and_agent_id_are_stripped() {
    let w = World::new("ctl");
    w.install(fake(), "ctl", None);
    let (r, lines) = start(&w);
    let d = r.unwrap();
    assert!(!has_control(&d.agent_id), "{:?}", d.agent_id);
    assert!(d.agent_id.starts_with("pod"), "{:?}", d.agent_id);
    assert_eq!(
        d.agent_id.chars().count(),
        desktop_launcher::response::AGENT_ID_MAX_CHARS
    );
    let stored = w.store.deploy_state("agent").unwrap().agent_id.unwrap();
    assert_eq!(stored, d.agent_id);
    assert!(lines.iter().any(|l| l.contains("pulling")), "{lines:?}");
    for l in &lines {
        assert!(!has_control(l) && !l.contains('\n'), "{l:?}");
    }
}

/// Escapes and forged lines in a provider's in-band error are neutralised.
#[test]
fn hostile_terminal_escapes_in_the_error_are_stripped() {
    let w = World::new("ctlerr");
    w.install(fake(), "ctlerr", None);
    let e = err_text(start(&w).0);
    assert!(e.contains("forged line"), "{e}");
    assert!(!has_control(&e) && !e.contains('\n'), "{e:?}");
    let stored = w.store.deploy_state("agent").unwrap().last_error.unwrap();
    assert!(!has_control(&stored) && !stored.contains('\n'), "{stored:?}");
}

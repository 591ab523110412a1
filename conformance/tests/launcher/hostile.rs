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

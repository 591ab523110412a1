//! The orphan sweep never reaps an agent in place of its own `wait`
//! (review b30b1a0 #15, `procs.rs`): an agent that exits at once, while a
//! sweep runs continuously, is still reaped by its tokio `Child` with its
//! real exit status. Its own test binary: the sweep reaps every untracked
//! zombie child of the process, which would race other tests' children.

use buzz_acp::procs::{ProcessTable, reap_orphans};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The `/proc/<pid>/stat` state letter, `None` once the pid is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().next()?.chars().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_at_once_is_reaped_by_its_own_wait_not_the_sweep() {
    let table = ProcessTable::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (table, stop) = (table.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reaped = 0;
            while !stop.load(Ordering::SeqCst) {
                reaped += reap_orphans(&table);
                // A std mutex is not fair: let the spawner take the lock too.
                std::thread::yield_now();
            }
            reaped
        })
    };
    for _ in 0..10 {
        let (mut child, pid, _exited) = table
            .spawn_registered(|| {
                let child = tokio::process::Command::new("sh")
                    .args(["-c", "exit 7"])
                    .spawn()?;
                // Hold the spawn until the child is a zombie (or gone, if
                // something reaped it): the window in which an untracked
                // child could be taken by the sweep.
                let pid = child.id().map_or(0, |p| p as i32);
                let until = Instant::now() + Duration::from_secs(10);
                while Instant::now() < until && matches!(state(pid), Some(s) if s != 'Z') {
                    std::thread::yield_now();
                }
                Ok(child)
            })
            .expect("sh spawns");
        let status = child.wait().await.expect("the agent's own wait reaps it");
        assert_eq!(status.code(), Some(7), "the real exit status of {pid}");
        table.remove(pid);
    }
    stop.store(true, Ordering::SeqCst);
    assert_eq!(sweeper.join().unwrap(), 0, "the sweep reaped a tracked agent");
}

//! The `runtime-agent` binary (collector-design.md §1 placement and scope, §3 poll
//! loop, §5 spool, §9 shutdown).
//!
//! Reads its settings from the allowlisted environment ([`runtime_agent::config`]),
//! opens and recovers the spool, then polls its own cgroup and `/proc` every
//! `RUNTIME_AGENT_INTERVAL_SECS` and spools what the collector core asks for, sweeping
//! the spool bounds every minute. One thread, `nice` +10.
//!
//! SIGTERM and SIGINT are blocked and taken with `sigtimedwait`, so the wait between
//! polls ends the moment one arrives. Then one final poll writes the last snapshot (or
//! window), coverage and changed peaks, fsyncs them and writes `state/clean`, all on a
//! helper thread given [`FINAL_FLUSH_BUDGET`]; the process exits 0 when it is done or
//! the budget is spent, whichever comes first (an interrupted write leaves only a
//! `.tmp` behind, removed at the next start).
//!
//! Shipping is not built: `RUNTIME_AGENT_INGEST_URL` only sets
//! `agent.config.backend_configured` (see [`runtime_agent::ship`]).
//!
//! Exit codes: 0 after a signal; 1 when the spool cannot be opened; 2 for a missing or
//! invalid setting.

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use runtime_agent::cgroup::{self, Layout, Roots};
use runtime_agent::collector::{Collector, PollInput, RunFacts, SpoolOp};
use runtime_agent::config::Settings;
use runtime_agent::gate::DigestGate;
use runtime_agent::procfs;
use runtime_agent::spool::{Bounds, Spool};
use runtime_agent::time::{ClockReading, NANOS_PER_SEC};

/// Bound on the final poll and spool flush after a stop signal (design §9: ≤ 1 s).
const FINAL_FLUSH_BUDGET: Duration = Duration::from_secs(1);
/// Spool bound sweep cadence (design §5: a 60 s ticker).
const SWEEP_EVERY_SECS: u64 = 60;

fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Wait until the monotonic `deadline_ns` or a stop signal; true on a signal.
fn wait_for_stop(set: &libc::sigset_t, deadline_ns: u64) -> bool {
    loop {
        let now = ClockReading::now().monotonic_ns;
        let Some(remaining) = deadline_ns.checked_sub(now).filter(|r| *r > 0) else {
            return false;
        };
        let ts = libc::timespec {
            tv_sec: (remaining / NANOS_PER_SEC) as libc::time_t,
            tv_nsec: (remaining % NANOS_PER_SEC) as libc::c_long,
        };
        // SAFETY: `set` and `ts` are valid for the call; the siginfo pointer may be null.
        let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
        if rc == libc::SIGTERM || rc == libc::SIGINT {
            return true;
        }
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            return false;
        }
        // EINTR or an unexpected signal number: wait for the rest of the interval.
    }
}

struct Agent {
    collector: Collector,
    spool: Spool,
    layout: Layout,
    roots: Roots,
    clock_ticks: u64,
}

impl Agent {
    fn step(&mut self, now: ClockReading, last: bool) {
        let sample = cgroup::read(&self.layout);
        let scan = procfs::scan(&self.roots.proc);
        let self_usage = procfs::self_usage(&self.roots.proc, self.clock_ticks);
        let spool_cov = self.spool.coverage();
        let input = PollInput {
            clock: now,
            cgroup: &sample,
            procs: Some(&scan),
            self_usage: Some(&self_usage),
            spool: &spool_cov,
        };
        let ops = if last {
            self.collector.final_flush(input)
        } else {
            self.collector.poll(input)
        };
        for op in ops {
            let result = match &op {
                SpoolOp::Write { name, bytes } => self.spool.write(name, bytes),
                SpoolOp::Remove { name } => self.spool.remove(name),
            };
            if let Err(e) = result {
                eprintln!("runtime-agent: spool: {e}");
            }
        }
    }
}

fn main() -> ExitCode {
    let set = stop_signals();
    // SAFETY: blocking signals for this (still single) thread; threads spawned later inherit it.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };

    let settings = match Settings::from_lookup(|name| std::env::var(name).ok()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runtime-agent: {e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: nice() has no memory-safety preconditions; failure leaves the priority as is.
    unsafe { libc::nice(10) };
    // SAFETY: sysconf has no preconditions.
    let clock_ticks = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|t| *t > 0)
        .unwrap_or(100);

    let start = ClockReading::now();
    let (spool, recovery) = match Spool::open(
        &settings.spool_dir,
        &settings.identity.pod_uid,
        Bounds::default(),
        start.unix_seconds(),
    ) {
        Ok(opened) => opened,
        Err(e) => {
            eprintln!("runtime-agent: cannot open the spool: {e}");
            return ExitCode::from(1);
        }
    };
    if settings.ingest_url.is_some() {
        eprintln!("runtime-agent: shipping is not built in this version; collecting into the spool only");
    }
    let roots = Roots::default();
    let facts = RunFacts {
        identity: settings.identity.clone(),
        node: settings.node_name.clone(),
        poll_interval_seconds: settings.interval_secs,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        backend_configured: settings.ingest_url.is_some(),
        started_at: start.unix_seconds(),
        container_started_at: procfs::container_started_at(&roots.proc, clock_ticks),
        previous_run: recovery.previous_run,
    };
    let mut collector = Collector::new(facts, DigestGate::new(settings.image_digest.as_deref()));
    collector.resume(&recovery.resumed);
    let layout = cgroup::discover(&roots);
    let mut agent = Agent {
        collector,
        spool,
        layout,
        roots,
        clock_ticks,
    };

    let interval_ns = settings.interval_secs * NANOS_PER_SEC;
    let mut last_sweep = start.unix_seconds();
    loop {
        let now = ClockReading::now();
        agent.step(now, false);
        if now.unix_seconds().saturating_sub(last_sweep) >= SWEEP_EVERY_SECS {
            last_sweep = now.unix_seconds();
            if let Err(e) = agent.spool.sweep(last_sweep) {
                eprintln!("runtime-agent: spool sweep: {e}");
            }
        }
        if wait_for_stop(&set, now.monotonic_ns.saturating_add(interval_ns)) {
            break;
        }
    }

    let (done, finished) = mpsc::channel();
    let flush = std::thread::Builder::new()
        .name("final-flush".into())
        .spawn(move || {
            agent.step(ClockReading::now(), true);
            if let Err(e) = agent.spool.mark_clean() {
                eprintln!("runtime-agent: spool: {e}");
            }
            let _ = done.send(());
        });
    if flush.is_ok() && finished.recv_timeout(FINAL_FLUSH_BUDGET).is_err() {
        eprintln!("runtime-agent: final flush did not finish within its budget");
    }
    ExitCode::SUCCESS
}

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
//! helper thread given [`FINAL_FLUSH_BUDGET`] (an interrupted write leaves only a
//! `.tmp` behind, removed at the next start). A shipping round in progress at the
//! signal ends at its next request boundary; the flush waits for that, within the
//! same budget, so the coverage it writes holds the last answer the ingest gave
//! (a 401 that halted shipping, a 413), not the state before it.
//!
//! With `RUNTIME_AGENT_INGEST_URL` set, a second thread ships the spool
//! ([`runtime_agent::ship`] over [`runtime_agent::http`], through the egress proxy
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` name, [`runtime_agent::proxy`]): a round at start, then
//! every `RUNTIME_AGENT_SHIP_INTERVAL_SECS` or after the backoff. The spool is shared
//! behind one mutex, held only for file operations, never across a request, so a
//! hanging ingest never delays a poll. After the final flush the shipper makes one
//! final round on a fresh [`FINAL_ROUND_BUDGET`] (skipped when halted; a request in
//! flight counts against it) and the process exits 0 when it is done or the budget is
//! spent: at most 1 s + 4 s after the signal (design §9).
//!
//! Exit codes: 0 after a signal; 1 when the spool directories cannot be created or
//! listed; 2 for a missing or invalid setting (a proxy variable included). Any other spool failure at start (a
//! full disk: `state/alive` unwritable, a promotion or quarantine that fails) is
//! logged and the collector runs on (`spool::recover`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use runtime_agent::cgroup::{self, Layout, Roots};
use runtime_agent::collector::{Collector, PollInput, RunFacts, SpoolOp};
use runtime_agent::config::Settings;
use runtime_agent::gate::DigestGate;
use runtime_agent::http::{HttpTransport, TlsRoots};
use runtime_agent::payload::ShippingCoverage;
use runtime_agent::procfs;
use runtime_agent::proxy::ProxySettings;
use runtime_agent::ship::{
    BACKOFF_CAP, BACKOFF_FIRST, Backoff, FINAL_ROUND_BUDGET, RoundEnd, Shipper, user_agent,
};
use runtime_agent::spool::{Bounds, Spool};
use runtime_agent::time::{ClockReading, NANOS_PER_SEC};

/// Bound on the final poll and spool flush after a stop signal (design §9: ≤ 1 s).
const FINAL_FLUSH_BUDGET: Duration = Duration::from_secs(1);
/// The part of [`FINAL_FLUSH_BUDGET`] the flush waits for a shipping round in
/// progress to end; a request that hangs past it is left to the final round.
const ROUND_END_WAIT: Duration = Duration::from_millis(500);
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the main thread tells the shipper.
enum Control {
    /// Make the final round within this deadline, then stop.
    Final(Instant),
}

/// The shipping thread's handle.
struct ShipperHandle {
    control: mpsc::Sender<Control>,
    done: mpsc::Receiver<()>,
    stopping: Arc<AtomicBool>,
    /// True while a normal round runs (its coverage not yet published).
    in_round: Arc<AtomicBool>,
}

/// Start the shipping thread (design §6).
fn start_shipper(
    base: &str,
    proxy: &ProxySettings,
    ship_interval: Duration,
    spool: Arc<Mutex<Spool>>,
    coverage: Arc<Mutex<ShippingCoverage>>,
) -> Option<ShipperHandle> {
    let ua = user_agent(env!("CARGO_PKG_VERSION"));
    let mut transport = match HttpTransport::with(base, &ua, proxy, TlsRoots::WebPki) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("runtime-agent: shipping disabled: {e}");
            return None;
        }
    };
    let (control, control_rx) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let stopping = Arc::new(AtomicBool::new(false));
    let stop_flag = Arc::clone(&stopping);
    let in_round = Arc::new(AtomicBool::new(false));
    let round_flag = Arc::clone(&in_round);
    let seed = ClockReading::now().monotonic_ns ^ u64::from(std::process::id()).rotate_left(32);
    let backoff = Backoff::new(
        BACKOFF_FIRST.min(ship_interval),
        BACKOFF_CAP.min(ship_interval.saturating_mul(10)),
        seed,
    );
    let spawned = std::thread::Builder::new().name("shipper".into()).spawn(move || {
        let mut shipper = Shipper::new(backoff);
        let stop = || stop_flag.load(Ordering::Relaxed);
        let mut wait = Duration::ZERO;
        loop {
            match control_rx.recv_timeout(wait) {
                Ok(Control::Final(deadline)) => {
                    if !shipper.halted() {
                        shipper.round(&spool, &mut transport, deadline, &|| false);
                    }
                    *lock(&coverage) = shipper.coverage().clone();
                    let _ = done_tx.send(());
                    return;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            // A normal round has no deadline of its own: each request is bounded
            // by the request timeout and a stop ends it between requests.
            let far = Instant::now() + Duration::from_secs(24 * 3600);
            round_flag.store(true, Ordering::SeqCst);
            let end = shipper.round(&spool, &mut transport, far, &stop);
            *lock(&coverage) = shipper.coverage().clone();
            round_flag.store(false, Ordering::SeqCst);
            wait = match end {
                RoundEnd::Deferred(d) => d,
                RoundEnd::Halted => Duration::from_secs(24 * 3600),
                _ => ship_interval,
            };
        }
    });
    match spawned {
        Ok(_) => Some(ShipperHandle {
            control,
            done,
            stopping,
            in_round,
        }),
        Err(e) => {
            eprintln!("runtime-agent: shipping disabled: cannot start its thread: {e}");
            None
        }
    }
}

struct Agent {
    collector: Collector,
    spool: Arc<Mutex<Spool>>,
    shipping: Arc<Mutex<ShippingCoverage>>,
    layout: Layout,
    roots: Roots,
    clock_ticks: u64,
}

impl Agent {
    fn step(&mut self, now: ClockReading, last: bool) {
        let sample = cgroup::read(&self.layout);
        let scan = procfs::scan(&self.roots.proc);
        let self_usage = procfs::self_usage(&self.roots.proc, self.clock_ticks);
        let spool_cov = lock(&self.spool).coverage();
        self.collector.set_shipping(lock(&self.shipping).clone());
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
                SpoolOp::Write { name, bytes } => lock(&self.spool).write(name, bytes),
                SpoolOp::Remove { name } => lock(&self.spool).remove(name),
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
    let proxy = match ProxySettings::from_lookup(|name| std::env::var(name).ok()) {
        Ok(p) => p,
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
    for degraded in &recovery.degraded {
        eprintln!("runtime-agent: spool: {degraded}");
    }
    let spool = Arc::new(Mutex::new(spool));
    let shipping = Arc::new(Mutex::new(ShippingCoverage::default()));
    let shipper = settings.ingest_url.as_deref().and_then(|base| {
        start_shipper(
            base,
            &proxy,
            Duration::from_secs(settings.ship_interval_secs),
            Arc::clone(&spool),
            Arc::clone(&shipping),
        )
    });
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
        shipping,
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
            if let Err(e) = lock(&agent.spool).sweep(last_sweep) {
                eprintln!("runtime-agent: spool sweep: {e}");
            }
        }
        if wait_for_stop(&set, now.monotonic_ns.saturating_add(interval_ns)) {
            break;
        }
    }

    let flush_began = Instant::now();
    if let Some(s) = &shipper {
        s.stopping.store(true, Ordering::SeqCst);
        // The round in progress ends at its next request boundary (a request in
        // flight runs on); its coverage then goes into the flush.
        while s.in_round.load(Ordering::SeqCst) && flush_began.elapsed() < ROUND_END_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let (done, finished) = mpsc::channel();
    let flush = std::thread::Builder::new()
        .name("final-flush".into())
        .spawn(move || {
            agent.step(ClockReading::now(), true);
            if let Err(e) = lock(&agent.spool).mark_clean() {
                eprintln!("runtime-agent: spool: {e}");
            }
            let _ = done.send(());
        });
    let left = FINAL_FLUSH_BUDGET.saturating_sub(flush_began.elapsed());
    if flush.is_ok() && finished.recv_timeout(left).is_err() {
        eprintln!("runtime-agent: final flush did not finish within its budget");
    }
    if let Some(s) = shipper {
        let deadline = Instant::now() + FINAL_ROUND_BUDGET;
        if s.control.send(Control::Final(deadline)).is_ok()
            && s.done
                .recv_timeout(FINAL_ROUND_BUDGET + Duration::from_millis(100))
                .is_err()
        {
            eprintln!("runtime-agent: the final shipping round did not finish within its budget");
        }
    }
    ExitCode::SUCCESS
}

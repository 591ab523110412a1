//! Shipping the spool (collector-design.md §6 "Shipper", §9 final round;
//! runtime-agent-backend-contract.md §3 "Transport", §4 "Delivery semantics", §5 "Error
//! semantics").
//!
//! The decision core is here and does no network I/O: a [`Shipper`] walks the spool
//! oldest first, offers one payload at a time through a [`Transport`] and acts on the
//! [`Outcome`]; [`crate::http::HttpTransport`] is the transport the binary uses.
//!
//! - One request in flight overall (contract §4 asks ≤ 1 per natural key; design §6 is
//!   stricter), oldest mtime first. A deferral is followed by one **probe**: the next
//!   file is offered. If the probe is deferred too (or the deferral carried a
//!   `Retry-After`), the backend is down or asked for a pause, and the round ends with
//!   a backoff, as the design says. If the probe gets an answer (2xx, 400, 413), the
//!   backend is up and refused only that payload: the round goes on, and that version
//!   counts one deferral against it.
//! - **Hold after N deferrals** ([`HOLD_AFTER_DEFERRALS`]; review b30b1a0 finding 15):
//!   a version deferred in that many rounds whose probe was answered is held like a
//!   400 — not offered again by this process while that version stays on disk, a
//!   newer version of its key is offered, the age bound sweeps it — and counted
//!   `shipping.held_after_deferrals` (contract §5 "hold-and-alert"). Without the probe,
//!   a payload the backend always 5xx's would block every file behind it until the
//!   24 h eviction; counting plain deferrals instead would hold every file during an
//!   outage, losing final windows that are written once. The probe tells the two
//!   apart at the cost of one request per deferred round.
//! - [`classify`]: 2xx delivered (the file is deleted only if it is still the version
//!   sent: [`crate::spool::Spool::acknowledge`]); 400 and 413 held — never re-offered
//!   by this process while that version stays on disk, a newer version of the key is
//!   offered; 401 and 403 halt shipping for the process lifetime (collecting and
//!   spooling go on); 429, 5xx, redirects, any other code, network errors and timeouts
//!   defer: the file stays and the shipper backs off.
//! - [`Backoff`]: from `first` doubling to `cap` (5 s → 5 min by default), each wait
//!   d/2 + uniform(0, d/2); reset on a 2xx. A `Retry-After` (seconds) lengthens a wait
//!   but never past the cap, so a backend cannot park the agent.
//! - [`MAX_PAYLOAD_BYTES`]: a payload over 4 MiB decoded is never offered — it is held
//!   and counted `too_large` without being read.
//! - The spool is shared with the collector behind one mutex; the shipper holds it only
//!   to list, read and acknowledge, never across a request, so the collector's writes
//!   go on while a request hangs and an acknowledge never deletes a newer version.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::payload::{Kind, ShippingCoverage};
use crate::spool::{FileIdentity, Spool};

/// Agent-side ceiling on a decoded payload (design §6).
pub const MAX_PAYLOAD_BYTES: u64 = 4 * 1024 * 1024;
/// Per-request timeout (design §6).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between rounds when nothing backs off (design §6).
pub const ROUND_INTERVAL: Duration = Duration::from_secs(30);
/// The final round's budget after the final flush (design §9).
pub const FINAL_ROUND_BUDGET: Duration = Duration::from_secs(4);
/// Default first backoff step (design §6).
pub const BACKOFF_FIRST: Duration = Duration::from_secs(5);
/// Default backoff ceiling (design §6).
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Rounds in which one version may be deferred while its probe is answered before it
/// is held.
pub const HOLD_AFTER_DEFERRALS: u8 = 5;

/// What one request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: delete if unchanged.
    Delivered,
    /// 400: held, never re-offered by this process.
    Malformed,
    /// 413: held likewise.
    TooLarge,
    /// 401/403: halt shipping, keep collecting and spooling.
    Unauthorized,
    /// 429, 5xx, other codes, network errors, timeouts: keep the file, back off.
    Deferred,
}

/// Map an HTTP status to its class (contract §5).
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        400 => Outcome::Malformed,
        413 => Outcome::TooLarge,
        401 | 403 => Outcome::Unauthorized,
        _ => Outcome::Deferred,
    }
}

/// `runtime-agent/<version>`, or bare `runtime-agent` when the version is not at most
/// 64 characters of `[A-Za-z0-9.+_-]` (contract §3).
pub fn user_agent(version: &str) -> String {
    let ok = !version.is_empty()
        && version.len() <= 64
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'_' | b'-'));
    if ok {
        format!("runtime-agent/{version}")
    } else {
        "runtime-agent".to_owned()
    }
}

/// What a transport reports for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    pub outcome: Outcome,
    /// A `Retry-After` in seconds, when the response carried one.
    pub retry_after: Option<Duration>,
    /// Bytes of the encoded body put on the wire (0 when nothing was sent).
    pub transmitted_bytes: u64,
}

impl Response {
    /// A response with only an outcome.
    pub fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            retry_after: None,
            transmitted_bytes: 0,
        }
    }
}

/// The seam a transport implements: send one payload of `kind` (its decoded bytes)
/// within `timeout`, the whole exchange included.
pub trait Transport {
    fn post(&mut self, kind: Kind, payload: &[u8], timeout: Duration) -> Response;
}

/// Exponential backoff with jitter (design §6).
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Option<Duration>,
    rng: u64,
}

impl Backoff {
    /// Steps from `first` doubling to `cap`; `seed` feeds the jitter.
    pub fn new(first: Duration, cap: Duration, seed: u64) -> Self {
        Self {
            first: first.min(cap),
            cap,
            next: None,
            rng: seed | 1,
        }
    }

    fn random(&mut self) -> u64 {
        // xorshift64*: jitter only needs to spread agents apart, not be unpredictable.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The wait after a deferral: d/2 + uniform(0, d/2) for the current step d, or
    /// `retry_after` if longer, never past the cap. Advances the step.
    pub fn defer(&mut self, retry_after: Option<Duration>) -> Duration {
        let d = self.next.unwrap_or(self.first);
        self.next = Some(d.saturating_mul(2).min(self.cap));
        let half = d / 2;
        let half_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
        let jitter = Duration::from_millis(self.random() % half_ms.saturating_add(1));
        let wait = half + jitter;
        match retry_after {
            Some(r) => wait.max(r.min(self.cap)),
            None => wait,
        }
    }

    /// After a 2xx.
    pub fn reset(&mut self) {
        self.next = None;
    }

    /// The step the next deferral starts from.
    pub fn current_step(&self) -> Duration {
        self.next.unwrap_or(self.first)
    }
}

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundEnd {
    /// Every offerable file was offered.
    Drained,
    /// A deferral ended the round; wait this long before the next.
    Deferred(Duration),
    /// 401/403 now or earlier: nothing more is sent by this process.
    Halted,
    /// The round's deadline passed, or a stop was asked for.
    Interrupted,
    /// The spool could not be listed.
    SpoolUnavailable,
}

/// The shipper's state: held files, deferral counts, the halt, the backoff and the
/// coverage counters.
#[derive(Debug)]
pub struct Shipper {
    held: HashMap<String, FileIdentity>,
    /// Versions deferred while a probe was answered, and how many rounds so.
    suspects: HashMap<String, (FileIdentity, u8)>,
    halted: bool,
    backoff: Backoff,
    coverage: ShippingCoverage,
}

fn lock(spool: &Mutex<Spool>) -> std::sync::MutexGuard<'_, Spool> {
    // A panic while holding the lock leaves the spool's state consistent on disk.
    spool.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shipper {
    /// A shipper with this backoff.
    pub fn new(backoff: Backoff) -> Self {
        Self {
            held: HashMap::new(),
            suspects: HashMap::new(),
            halted: false,
            backoff,
            coverage: ShippingCoverage::default(),
        }
    }

    /// `collection_coverage.shipping`.
    pub fn coverage(&self) -> &ShippingCoverage {
        &self.coverage
    }

    /// Whether a 401/403 halted shipping.
    pub fn halted(&self) -> bool {
        self.halted
    }

    /// A deferred version's probe was answered: one more round against it; held once
    /// it reaches [`HOLD_AFTER_DEFERRALS`].
    fn deferred_while_up(&mut self, name: String, identity: FileIdentity) {
        let slot = self.suspects.entry(name.clone()).or_insert((identity, 0));
        if slot.0 != identity {
            *slot = (identity, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        if slot.1 >= HOLD_AFTER_DEFERRALS {
            self.suspects.remove(&name);
            self.held.insert(name, identity);
            self.coverage.held_after_deferrals += 1;
        }
    }

    /// One round: offer the spool oldest first until it is drained, a deferral whose
    /// probe is deferred too (see the module doc), a halt, `deadline`, or `stop()`
    /// (checked between requests). Each request gets [`REQUEST_TIMEOUT`] or what is
    /// left before `deadline`, whichever is shorter.
    pub fn round(
        &mut self,
        spool: &Mutex<Spool>,
        transport: &mut dyn Transport,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
    ) -> RoundEnd {
        if self.halted {
            return RoundEnd::Halted;
        }
        let entries = match lock(spool).entries() {
            Ok(e) => e,
            Err(_) => return RoundEnd::SpoolUnavailable,
        };
        // Forget holds on names that are gone (swept or replaced and delivered).
        self.held
            .retain(|name, _| entries.iter().any(|e| &e.name == name));
        self.suspects
            .retain(|name, _| entries.iter().any(|e| &e.name == name));
        // A deferred version waiting for its probe's answer.
        let mut awaiting_probe: Option<(String, FileIdentity)> = None;
        for entry in entries {
            if stop() {
                return RoundEnd::Interrupted;
            }
            let Some(remaining) = deadline
                .checked_duration_since(Instant::now())
                .filter(|r| !r.is_zero())
            else {
                return RoundEnd::Interrupted;
            };
            let loaded = {
                let mut guard = lock(spool);
                let identity = match guard.identity(&entry.name) {
                    Ok(Some(id)) => id,
                    Ok(None) => continue,
                    Err(_) => {
                        self.coverage.unreadable += 1;
                        continue;
                    }
                };
                if self.held.get(&entry.name) == Some(&identity) {
                    continue;
                }
                if entry.bytes > MAX_PAYLOAD_BYTES {
                    self.held.insert(entry.name.clone(), identity);
                    self.coverage.rejected.too_large += 1;
                    continue;
                }
                match guard.load(&entry.name) {
                    Ok(Some(loaded)) => loaded,
                    // Gone meanwhile, or damaged and quarantined (counted by the spool).
                    Ok(None) => continue,
                    Err(_) => {
                        self.coverage.unreadable += 1;
                        continue;
                    }
                }
            };
            if loaded.bytes.len() as u64 > MAX_PAYLOAD_BYTES {
                self.held.insert(entry.name.clone(), loaded.identity);
                self.coverage.rejected.too_large += 1;
                continue;
            }
            let response = transport.post(loaded.kind, &loaded.bytes, remaining.min(REQUEST_TIMEOUT));
            self.coverage.payload_bytes += loaded.bytes.len() as u64;
            self.coverage.transmitted_bytes += response.transmitted_bytes;
            let answered = matches!(
                response.outcome,
                Outcome::Delivered | Outcome::Malformed | Outcome::TooLarge
            );
            if answered && let Some((name, identity)) = awaiting_probe.take() {
                self.deferred_while_up(name, identity);
            }
            match response.outcome {
                Outcome::Delivered => {
                    self.coverage.delivered += 1;
                    self.backoff.reset();
                    // A failed delete leaves the file to be offered again: harmless, the
                    // ingest upserts by natural key.
                    let _ = lock(spool).acknowledge(&entry.name, loaded.identity);
                }
                Outcome::Malformed => {
                    self.coverage.rejected.malformed += 1;
                    self.held.insert(entry.name, loaded.identity);
                }
                Outcome::TooLarge => {
                    self.coverage.rejected.too_large += 1;
                    self.held.insert(entry.name, loaded.identity);
                }
                Outcome::Unauthorized => {
                    self.coverage.rejected.unauthorized += 1;
                    self.halted = true;
                    self.coverage.halted = true;
                    return RoundEnd::Halted;
                }
                Outcome::Deferred => {
                    self.coverage.deferred += 1;
                    // The probe was deferred too, or the backend said when to return:
                    // an outage or a pause, not this payload.
                    if awaiting_probe.is_some() || response.retry_after.is_some() {
                        return RoundEnd::Deferred(self.backoff.defer(response.retry_after));
                    }
                    awaiting_probe = Some((entry.name, loaded.identity));
                }
            }
        }
        if awaiting_probe.is_some() {
            // Nothing was left to probe with.
            return RoundEnd::Deferred(self.backoff.defer(None));
        }
        RoundEnd::Drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        for (status, outcome) in [
            (200, Outcome::Delivered),
            (204, Outcome::Delivered),
            (400, Outcome::Malformed),
            (413, Outcome::TooLarge),
            (401, Outcome::Unauthorized),
            (403, Outcome::Unauthorized),
            (429, Outcome::Deferred),
            (500, Outcome::Deferred),
            (503, Outcome::Deferred),
            (301, Outcome::Deferred),
            (404, Outcome::Deferred),
            (418, Outcome::Deferred),
        ] {
            assert_eq!(classify(status), outcome, "{status}");
        }
    }

    #[test]
    fn user_agent_versions() {
        assert_eq!(user_agent("0.3.1"), "runtime-agent/0.3.1");
        assert_eq!(user_agent("1.0.0+build_7-rc"), "runtime-agent/1.0.0+build_7-rc");
        assert_eq!(
            user_agent(&"9".repeat(64)),
            format!("runtime-agent/{}", "9".repeat(64))
        );
        assert_eq!(user_agent(&"9".repeat(65)), "runtime-agent");
        assert_eq!(user_agent("1.0 beta"), "runtime-agent");
        assert_eq!(user_agent(""), "runtime-agent");
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter_in_the_upper_half_and_resets() {
        let first = Duration::from_secs(5);
        let cap = Duration::from_secs(300);
        let mut b = Backoff::new(first, cap, 42);
        let mut step = first;
        for _ in 0..12 {
            assert_eq!(b.current_step(), step);
            let wait = b.defer(None);
            assert!(wait >= step / 2 && wait <= step, "{wait:?} for step {step:?}");
            step = (step * 2).min(cap);
        }
        assert_eq!(b.current_step(), cap);
        b.reset();
        assert_eq!(b.current_step(), first);
    }

    #[test]
    fn retry_after_lengthens_a_wait_but_never_past_the_cap() {
        let mut b = Backoff::new(Duration::from_secs(5), Duration::from_secs(300), 7);
        assert_eq!(b.defer(Some(Duration::from_secs(60))), Duration::from_secs(60));
        assert_eq!(
            b.defer(Some(Duration::from_secs(86_400))),
            Duration::from_secs(300)
        );
        let short = b.defer(Some(Duration::from_secs(1)));
        assert!(short >= Duration::from_secs(10), "{short:?}");
    }
}

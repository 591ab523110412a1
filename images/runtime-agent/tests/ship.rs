//! The shipper's decision core over a real spool and a scripted transport
//! (collector-design.md §6; runtime-agent-backend-contract.md §4 "Delivery semantics",
//! §5 "Error semantics").

mod common;

use common::{POD, T10, files, set_mtime, snapshot_name};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs;
use std::path::Path;
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use runtime_agent::payload::Kind;
use runtime_agent::ship::{Backoff, Outcome, Response, RoundEnd, Shipper, Transport};
use runtime_agent::spool::{Bounds, Spool};

/// A usage payload of [`POD`].
fn usage(kind: &str, start: u64, core_ns: u64) -> Vec<u8> {
    common::usage(kind, start, POD, core_ns)
}

/// Writes the snapshot of the hour from `start` with `core_ns` of CPU.
fn write_snapshot(spool: &mut Spool, start: u64, core_ns: u64) {
    spool
        .write(&snapshot_name(start), &usage("usage_snapshot", start, core_ns))
        .unwrap();
}

/// Three snapshots, oldest first by mtime: T10, T10+1h, T10+2h.
fn spool_with_three(dir: &Path) -> Mutex<Spool> {
    let (mut spool, _) = Spool::open(dir, POD, Bounds::default(), T10 + 3 * 3600 - 10).unwrap();
    for (i, start) in [T10 + 7200, T10, T10 + 3600].into_iter().enumerate() {
        write_snapshot(&mut spool, start, i as u64 + 1);
        // mtime order: T10 oldest, regardless of write order.
        set_mtime(&dir.join(snapshot_name(start)), start + 10);
    }
    Mutex::new(spool)
}

type Hook = Box<dyn FnMut(&[u8])>;
type Sent = Rc<RefCell<Vec<(Kind, Vec<u8>)>>>;

/// Replies from a script; records each request (kind, bytes) in order.
struct Scripted {
    replies: VecDeque<Response>,
    sent: Sent,
    during: Option<Hook>,
}

impl Scripted {
    fn new(replies: &[Outcome]) -> (Self, Sent) {
        let sent = Rc::new(RefCell::new(Vec::new()));
        (
            Self {
                replies: replies.iter().map(|o| Response::of(*o)).collect(),
                sent: Rc::clone(&sent),
                during: None,
            },
            sent,
        )
    }
}

impl Transport for Scripted {
    fn post(&mut self, kind: Kind, payload: &[u8], timeout: Duration) -> Response {
        assert!(timeout <= runtime_agent::ship::REQUEST_TIMEOUT);
        self.sent.borrow_mut().push((kind, payload.to_vec()));
        if let Some(hook) = self.during.as_mut() {
            hook(payload);
        }
        self.replies
            .pop_front()
            .unwrap_or(Response::of(Outcome::Delivered))
    }
}

fn shipper() -> Shipper {
    Shipper::new(Backoff::new(Duration::from_secs(5), Duration::from_secs(300), 1))
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// One round with an hour to go and no stop.
fn one_round(s: &mut Shipper, spool: &Mutex<Spool>, t: &mut dyn Transport) -> RoundEnd {
    s.round(spool, t, far(), &|| false)
}

#[test]
fn a_round_offers_oldest_first_one_at_a_time_and_deletes_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let (mut t, sent) = Scripted::new(&[]);
    let mut s = shipper();
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    let sent = sent.borrow();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[0].1, usage("usage_snapshot", T10, 2));
    assert_eq!(sent[1].1, usage("usage_snapshot", T10 + 3600, 3));
    assert_eq!(sent[2].1, usage("usage_snapshot", T10 + 7200, 1));
    assert!(sent.iter().all(|(k, _)| *k == Kind::UsageSnapshot));
    assert!(files(dir.path()).is_empty());
    assert_eq!(s.coverage().delivered, 3);
    assert_eq!(
        s.coverage().payload_bytes,
        sent.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    );
}

#[test]
fn a_deferral_and_a_deferred_probe_keep_the_files_end_the_round_and_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let (mut t, sent) = Scripted::new(&[Outcome::Deferred; 4]);
    let mut s = shipper();
    let RoundEnd::Deferred(first) = one_round(&mut s, &spool, &mut t) else {
        panic!("not deferred")
    };
    assert!(first >= Duration::from_millis(2500) && first <= Duration::from_secs(5));
    // The oldest, then one probe of the next: both deferred, so the round ends.
    assert_eq!(sent.borrow().len(), 2);
    assert_eq!(files(dir.path()).len(), 3);
    let RoundEnd::Deferred(second) = one_round(&mut s, &spool, &mut t) else {
        panic!("not deferred")
    };
    assert!(second >= Duration::from_secs(5) && second <= Duration::from_secs(10));
    // The oldest again, then everything once the ingest answers 2xx.
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    let sent = sent.borrow();
    assert_eq!(sent.len(), 7);
    assert_eq!(sent[0].1, usage("usage_snapshot", T10, 2));
    assert_eq!(sent[1].1, usage("usage_snapshot", T10 + 3600, 3));
    assert_eq!((&sent[2].1, &sent[3].1), (&sent[0].1, &sent[1].1));
    assert_eq!(sent[4].1, sent[0].1);
    assert!(files(dir.path()).is_empty());
    assert_eq!(s.coverage().deferred, 4);
    assert_eq!(s.coverage().delivered, 3);
    assert_eq!(s.coverage().held_after_deferrals, 0, "an outage holds nothing");
}

/// Answers by payload: `poison` is always deferred, everything else delivered.
struct Poisoned {
    poison: Vec<u8>,
    sent: Sent,
}

impl Transport for Poisoned {
    fn post(&mut self, kind: Kind, payload: &[u8], _timeout: Duration) -> Response {
        self.sent.borrow_mut().push((kind, payload.to_vec()));
        Response::of(if payload == self.poison {
            Outcome::Deferred
        } else {
            Outcome::Delivered
        })
    }
}

#[test]
fn a_payload_deferred_while_others_are_delivered_is_held_after_n_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let poison = usage("usage_snapshot", T10, 2);
    let sent: Sent = Rc::new(RefCell::new(Vec::new()));
    let mut t = Poisoned {
        poison: poison.clone(),
        sent: Rc::clone(&sent),
    };
    let mut s = shipper();
    let n = runtime_agent::ship::HOLD_AFTER_DEFERRALS;
    for round in 0..n {
        // A fresh file each round, as the collector writes them.
        let start = T10 + (10 + u64::from(round)) * 3600;
        write_snapshot(&mut spool.lock().unwrap(), start, 50);
        set_mtime(&dir.path().join(snapshot_name(start)), start);
        // The poison never blocks the files behind it.
        assert_eq!(
            one_round(&mut s, &spool, &mut t),
            RoundEnd::Drained,
            "round {round}"
        );
        assert_eq!(files(dir.path()), vec![snapshot_name(T10)], "round {round}");
    }
    assert_eq!(s.coverage().held_after_deferrals, 1);
    let offered = |sent: &Sent| sent.borrow().iter().filter(|(_, b)| *b == poison).count();
    assert_eq!(offered(&sent), usize::from(n));
    // Held: not offered again while that version stays on disk.
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert_eq!(offered(&sent), usize::from(n));
    assert_eq!(files(dir.path()), vec![snapshot_name(T10)], "held, not deleted");
    // A rewrite of the key is a new version: offered (and delivered) again.
    write_snapshot(&mut spool.lock().unwrap(), T10, 99);
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert!(files(dir.path()).is_empty());
}

#[test]
fn in_an_outage_nothing_is_held_however_long_it_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let rounds = usize::from(runtime_agent::ship::HOLD_AFTER_DEFERRALS) * 3;
    let (mut t, sent) = Scripted::new(&vec![Outcome::Deferred; rounds * 2]);
    let mut s = shipper();
    for _ in 0..rounds {
        assert!(matches!(one_round(&mut s, &spool, &mut t), RoundEnd::Deferred(_)));
    }
    assert_eq!(
        sent.borrow().len(),
        rounds * 2,
        "the oldest and one probe per round"
    );
    assert_eq!(s.coverage().held_after_deferrals, 0);
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_retry_after_ends_the_round_without_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let (mut t, sent) = Scripted::new(&[]);
    t.replies.push_back(Response {
        outcome: Outcome::Deferred,
        retry_after: Some(Duration::from_secs(7)),
        transmitted_bytes: 1,
    });
    let mut s = shipper();
    assert_eq!(
        one_round(&mut s, &spool, &mut t),
        RoundEnd::Deferred(Duration::from_secs(7))
    );
    assert_eq!(sent.borrow().len(), 1);
}

#[test]
fn rejected_versions_are_held_and_a_newer_version_is_offered() {
    for (outcome, malformed, too_large) in [(Outcome::Malformed, 1, 0), (Outcome::TooLarge, 0, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let spool = spool_with_three(dir.path());
        let (mut t, sent) = Scripted::new(&[outcome]);
        let mut s = shipper();
        assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
        assert_eq!(sent.borrow().len(), 3);
        // The rejected oldest stays on disk and is not offered again.
        assert_eq!(files(dir.path()), vec![snapshot_name(T10)]);
        assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
        assert_eq!(sent.borrow().len(), 3);
        // A rewrite of the key is a new version: offered and delivered.
        write_snapshot(&mut spool.lock().unwrap(), T10, 99);
        assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
        assert_eq!(sent.borrow().len(), 4);
        assert_eq!(sent.borrow()[3].1, usage("usage_snapshot", T10, 99));
        assert!(files(dir.path()).is_empty());
        assert_eq!(s.coverage().rejected.malformed, malformed);
        assert_eq!(s.coverage().rejected.too_large, too_large);
        assert_eq!(s.coverage().delivered, 3);
    }
}

#[test]
fn unauthorized_halts_shipping_for_good_while_spooling_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let (mut t, sent) = Scripted::new(&[Outcome::Delivered, Outcome::Unauthorized]);
    let mut s = shipper();
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Halted);
    assert!(s.halted());
    assert_eq!(sent.borrow().len(), 2);
    write_snapshot(&mut spool.lock().unwrap(), T10 + 10_800, 5);
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Halted);
    assert_eq!(sent.borrow().len(), 2);
    assert_eq!(files(dir.path()).len(), 3);
    assert!(s.coverage().halted);
    assert_eq!(s.coverage().rejected.unauthorized, 1);
}

#[test]
fn a_version_written_while_its_predecessor_is_in_flight_survives_the_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let spool = Rc::new(spool_with_three(dir.path()));
    let (mut t, sent) = Scripted::new(&[]);
    let writer = Rc::clone(&spool);
    let mut once = true;
    t.during = Some(Box::new(move |_| {
        if std::mem::take(&mut once) {
            write_snapshot(&mut writer.lock().unwrap(), T10, 77);
        }
    }));
    let mut s = shipper();
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert_eq!(sent.borrow()[0].1, usage("usage_snapshot", T10, 2));
    assert_eq!(files(dir.path()), vec![snapshot_name(T10)]);
    assert_eq!(
        fs::read(dir.path().join(snapshot_name(T10))).unwrap(),
        usage("usage_snapshot", T10, 77)
    );
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert_eq!(sent.borrow().last().unwrap().1, usage("usage_snapshot", T10, 77));
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_payload_over_the_ceiling_is_never_read_or_offered() {
    let dir = tempfile::tempdir().unwrap();
    let (spool, _) = Spool::open(dir.path(), POD, Bounds::default(), T10).unwrap();
    let spool = Mutex::new(spool);
    let big = vec![b' '; (runtime_agent::ship::MAX_PAYLOAD_BYTES + 1) as usize];
    fs::write(dir.path().join("coverage.json"), &big).unwrap();
    let (mut t, sent) = Scripted::new(&[]);
    let mut s = shipper();
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert_eq!(one_round(&mut s, &spool, &mut t), RoundEnd::Drained);
    assert!(sent.borrow().is_empty());
    assert_eq!(s.coverage().rejected.too_large, 1);
    // Held, not quarantined: it stays until the age bound sweeps it.
    assert_eq!(files(dir.path()), vec!["coverage.json".to_owned()]);
}

#[test]
fn a_passed_deadline_or_a_stop_ends_the_round_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let spool = spool_with_three(dir.path());
    let (mut t, sent) = Scripted::new(&[]);
    let mut s = shipper();
    assert_eq!(
        s.round(&spool, &mut t, Instant::now(), &|| false),
        RoundEnd::Interrupted
    );
    assert_eq!(s.round(&spool, &mut t, far(), &|| true), RoundEnd::Interrupted);
    assert!(sent.borrow().is_empty());
    assert_eq!(files(dir.path()).len(), 3);
}

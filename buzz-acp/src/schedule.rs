//! Turn scheduling (wire-facts §6; issue "one session per channel, one turn
//! in flight per channel; further mentions queue") and the inactivity rule
//! (spec §Auto-Stop, I5), with bounded queues. Pure: no I/O, no clock.
//!
//! **A conversation stays in its slot** (review afa2bf1 finding 4). Each
//! slot is its own agent process, and a conversation's ACP session lives in
//! the process that opened or brought it back. Its next turn goes to that
//! slot and waits while the slot is busy with another channel's turn: were
//! it given to a free slot, that slot would resume the same session from
//! its receipt in a second process, and the two would fork the
//! conversation. A slot that dies is forgotten ([`Scheduler::forget_slot`]),
//! and its conversations go to any slot, which brings them back.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Most mentions queued (not yet running) in one channel.
pub const MAX_QUEUED_PER_CHANNEL: usize = 32;
/// Most mentions queued over all channels.
pub const MAX_QUEUED_TOTAL: usize = 256;

/// Whether a new mention may queue, given what is queued now (overall and
/// in its channel). Over the bound it is shed: a flood of mentions must not
/// grow memory without limit.
pub fn admit(queued_total: usize, queued_in_channel: usize) -> bool {
    queued_total < MAX_QUEUED_TOTAL && queued_in_channel < MAX_QUEUED_PER_CHANNEL
}

/// Per-channel FIFO queues with at most one turn in flight per channel.
#[derive(Debug)]
pub struct Scheduler<J> {
    /// channel → its queued jobs, each with its conversation.
    queues: HashMap<String, VecDeque<(String, J)>>,
    /// Channels with queued work, oldest first.
    order: VecDeque<String>,
    /// channel → slot running its turn.
    in_flight: HashMap<String, usize>,
    /// conversation → the slot that last ran it (holds its session).
    affinity: HashMap<String, usize>,
}

impl<J> Default for Scheduler<J> {
    fn default() -> Self {
        Scheduler {
            queues: HashMap::new(),
            order: VecDeque::new(),
            in_flight: HashMap::new(),
            affinity: HashMap::new(),
        }
    }
}

impl<J> Scheduler<J> {
    /// Queues a job for `channel`, whose conversation is the channel itself.
    pub fn push(&mut self, channel: &str, job: J) {
        self.push_in(channel, channel, job);
    }

    /// Queues a job for `channel` in `conversation` (a channel and an asker
    /// class: the unit that holds one session).
    pub fn push_in(&mut self, channel: &str, conversation: &str, job: J) {
        let q = self.queues.entry(channel.to_string()).or_default();
        if q.is_empty() {
            self.order.push_back(channel.to_string());
        }
        q.push_back((conversation.to_string(), job));
    }

    /// Where `channel`'s next job may run now: `None` while its channel is
    /// in flight or its conversation's slot runs another channel's turn;
    /// else its slot (when idle) or any.
    fn placement(&self, channel: &str, free: &[usize]) -> Option<Option<usize>> {
        if self.in_flight.contains_key(channel) {
            return None;
        }
        let conversation = &self.queues.get(channel)?.front()?.0;
        match self.affinity.get(conversation) {
            Some(slot) if free.contains(slot) => Some(Some(*slot)),
            Some(slot) if self.in_flight.values().any(|s| s == slot) => None,
            _ => Some(None),
        }
    }

    /// True while any job is queued or in flight.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty() || !self.order.is_empty()
    }

    /// Number of queued (not yet running) jobs.
    pub fn queued(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    /// Number of queued (not yet running) jobs of `channel`.
    pub fn queued_in(&self, channel: &str) -> usize {
        self.queues.get(channel).map_or(0, VecDeque::len)
    }

    /// True if some queued job could run on an idle slot now (its channel
    /// is not in flight, and its conversation's slot is not busy).
    pub fn has_runnable(&self) -> bool {
        self.order.iter().any(|c| self.placement(c, &[]).is_some())
    }

    /// The slot running `channel`'s turn, if any.
    pub fn running_slot(&self, channel: &str) -> Option<usize> {
        self.in_flight.get(channel).copied()
    }

    /// Channels with a turn in flight and their slots.
    pub fn running(&self) -> impl Iterator<Item = (&str, usize)> {
        self.in_flight.iter().map(|(c, s)| (c.as_str(), *s))
    }

    /// Assigns runnable jobs to `idle` slots: oldest channel first, each on
    /// the slot that holds its conversation's session when it has one (see
    /// the module doc). Returns (slot, channel, job).
    pub fn assign(&mut self, idle: &[usize]) -> Vec<(usize, String, J)> {
        let mut free: Vec<usize> = idle.to_vec();
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.order.len() && !free.is_empty() {
            let channel = self.order[i].clone();
            let Some(place) = self.placement(&channel, &free) else {
                i += 1;
                continue;
            };
            let pos = place.and_then(|s| free.iter().position(|f| *f == s)).unwrap_or(0);
            let slot = free.remove(pos);
            let q = self
                .queues
                .get_mut(&channel)
                .expect("ordered channels have queues");
            let (conversation, job) = q.pop_front().expect("ordered channels have work");
            if q.is_empty() {
                self.queues.remove(&channel);
                self.order.remove(i);
            } else {
                // Keep FIFO fairness: this channel's next job waits behind others.
                let c = self.order.remove(i).expect("index in range");
                self.order.push_back(c);
            }
            self.in_flight.insert(channel.clone(), slot);
            self.affinity.insert(conversation, slot);
            out.push((slot, channel, job));
        }
        out
    }

    /// Marks `channel`'s turn as finished.
    pub fn finished(&mut self, channel: &str) {
        self.in_flight.remove(channel);
    }

    /// Forgets the session affinity to `slot` (its agent died).
    pub fn forget_slot(&mut self, slot: usize) {
        self.affinity.retain(|_, s| *s != slot);
    }

    /// Takes every queued job out, oldest channel first (shutdown: no new
    /// turns; their askers are told).
    pub fn clear_queued(&mut self) -> Vec<J> {
        let mut out = Vec::new();
        for channel in std::mem::take(&mut self.order) {
            out.extend(
                self.queues
                    .remove(&channel)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(_, j)| j),
            );
        }
        self.queues.clear();
        out
    }
}

/// The inactivity rule: expired once `bound` has passed since the last
/// dispatched turn ended or started, and no turn is in flight (spec
/// §Auto-Stop). A turn queued behind an agent that is still starting does
/// not hold it off: the expiry must not depend on pool readiness, so an
/// agent hung in `initialize` cannot defeat I5; that turn's asker is told
/// at the stop.
pub fn inactivity_expired(bound: Duration, last_activity: Instant, busy: bool, now: Instant) -> bool {
    !busy && now.saturating_duration_since(last_activity) >= bound
}

/// Whether an awake harness dozes now (issue 50): `bound` has passed since
/// the last turn started or ended, and nothing runs or waits (`busy`: a turn
/// in flight, queued, or an agent starting for one). The same clock as
/// [`inactivity_expired`], which still ends the harness after the doze.
pub fn doze_due(bound: Duration, last_activity: Instant, busy: bool, now: Instant) -> bool {
    inactivity_expired(bound, last_activity, busy, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_per_channel_and_queueing() {
        let mut s = Scheduler::default();
        s.push("a", 1);
        s.push("a", 2);
        s.push("b", 3);
        let got = s.assign(&[0, 1, 2]);
        assert_eq!(got.len(), 2, "a's second job waits for its first");
        assert!(got.iter().any(|(_, c, j)| c == "a" && *j == 1));
        assert!(got.iter().any(|(_, c, j)| c == "b" && *j == 3));
        assert!(s.assign(&[2]).is_empty());
        assert!(s.busy());
        s.finished("a");
        let got = s.assign(&[2]);
        assert_eq!(got[0].1, "a");
        assert_eq!(got[0].2, 2);
        s.finished("a");
        s.finished("b");
        assert!(!s.busy());
    }

    #[test]
    fn affinity_prefers_the_session_slot() {
        let mut s = Scheduler::default();
        s.push("a", 1);
        assert_eq!(s.assign(&[3])[0].0, 3);
        s.finished("a");
        s.push("a", 2);
        assert_eq!(s.assign(&[1, 3])[0].0, 3);
        s.finished("a");
        s.forget_slot(3);
        s.push("a", 4);
        assert_eq!(s.assign(&[1, 3])[0].0, 1);
    }

    #[test]
    fn a_conversation_waits_for_the_slot_that_holds_its_session() {
        let mut s = Scheduler::default();
        s.push_in("a", "a/owner", 1);
        assert_eq!(s.assign(&[0, 1])[0].0, 0);
        s.finished("a");
        // Channel b's long turn takes slot 0, which holds a's session.
        s.push_in("b", "b/owner", 2);
        assert_eq!(s.assign(&[0, 1])[0].0, 0);
        s.push_in("a", "a/owner", 3);
        assert!(
            s.assign(&[1]).is_empty(),
            "a waits for slot 0, never resumed on slot 1"
        );
        assert!(!s.has_runnable(), "no lazy slot is woken for it");
        // Another class of the same channel is another conversation.
        s.push_in("c", "c/other", 4);
        assert_eq!(s.assign(&[1]), vec![(1, "c".to_string(), 4)]);
        s.finished("b");
        assert_eq!(s.assign(&[0]), vec![(0, "a".to_string(), 3)]);
        // Its slot died: the conversation goes to any slot, which brings it back.
        s.finished("a");
        s.forget_slot(0);
        s.push_in("a", "a/owner", 5);
        assert_eq!(s.assign(&[1]), vec![(1, "a".to_string(), 5)]);
    }

    #[test]
    fn no_slot_no_assignment_and_clear() {
        let mut s = Scheduler::default();
        s.push("a", 1);
        assert!(s.assign(&[]).is_empty());
        assert!(s.has_runnable());
        assert_eq!(s.clear_queued(), vec![1]);
        assert!(!s.busy());
        for (c, j) in [("a", 1), ("b", 2), ("a", 3)] {
            s.push(c, j);
        }
        assert_eq!(
            s.clear_queued(),
            vec![1, 3, 2],
            "oldest channel first, each in order"
        );
        assert!(!s.busy());
    }

    #[test]
    fn admission_bounds() {
        assert!(admit(0, 0));
        assert!(admit(MAX_QUEUED_TOTAL - 1, MAX_QUEUED_PER_CHANNEL - 1));
        assert!(!admit(MAX_QUEUED_TOTAL, 0));
        assert!(!admit(0, MAX_QUEUED_PER_CHANNEL));
        let mut s = Scheduler::default();
        s.push("a", 1);
        s.push("a", 2);
        s.push("b", 3);
        assert_eq!((s.queued_in("a"), s.queued_in("b"), s.queued_in("c")), (2, 1, 0));
    }

    #[test]
    fn inactivity_rule() {
        let t = Instant::now();
        let b = Duration::from_secs(2);
        assert!(!inactivity_expired(b, t, false, t + Duration::from_millis(1999)));
        assert!(inactivity_expired(b, t, false, t + b));
        assert!(
            !inactivity_expired(b, t, true, t + b * 10),
            "a turn in flight defers"
        );
    }
}

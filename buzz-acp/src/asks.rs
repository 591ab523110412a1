//! The owner's open permission questions (`ask-owner`; issue "real coding
//! agents"). Pure bookkeeping: one FIFO per channel, oldest first; the
//! owner's `!allow` / `!deny` in a channel answers its oldest open question.
//! A question whose turn ended, or whose waiter gave up, is skipped.

use std::collections::{HashMap, VecDeque};
use tokio::sync::oneshot;

/// Open questions by channel.
#[derive(Debug, Default)]
pub struct Asks {
    by_channel: HashMap<String, VecDeque<(u64, oneshot::Sender<bool>)>>,
}

impl Asks {
    /// Records a question of turn `turn_id` in `channel`.
    pub fn open(&mut self, channel: &str, turn_id: u64, answer: oneshot::Sender<bool>) {
        self.by_channel
            .entry(channel.to_string())
            .or_default()
            .push_back((turn_id, answer));
    }

    /// Answers the oldest live question of `channel`; false when none was open.
    pub fn answer(&mut self, channel: &str, allow: bool) -> bool {
        let Some(q) = self.by_channel.get_mut(channel) else {
            return false;
        };
        let mut answered = false;
        while let Some((_, tx)) = q.pop_front() {
            if tx.send(allow).is_ok() {
                answered = true;
                break;
            }
        }
        if q.is_empty() {
            self.by_channel.remove(channel);
        }
        answered
    }

    /// Withdraws every question of a turn that ended.
    pub fn forget_turn(&mut self, turn_id: u64) {
        self.by_channel.retain(|_, q| {
            q.retain(|(t, _)| *t != turn_id);
            !q.is_empty()
        });
    }

    /// Number of open questions.
    pub fn len(&self) -> usize {
        self.by_channel.values().map(VecDeque::len).sum()
    }

    /// True when no question is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_live_question_of_the_channel_is_answered() {
        let mut a = Asks::default();
        let (t1, mut r1) = oneshot::channel();
        let (t2, mut r2) = oneshot::channel();
        let (t3, mut r3) = oneshot::channel();
        a.open("c", 1, t1);
        a.open("c", 2, t2);
        a.open("d", 3, t3);
        r1.close();
        assert!(a.answer("c", true), "the closed first question is skipped");
        assert_eq!(r2.try_recv(), Ok(true));
        assert!(!a.answer("c", false), "nothing left in c");
        assert!(!a.answer("x", true));
        a.forget_turn(3);
        assert!(a.is_empty());
        assert!(
            r3.try_recv().is_err(),
            "withdrawn: the waiter sees the sender dropped"
        );
        let _ = r1.try_recv();
    }
}

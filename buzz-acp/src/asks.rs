//! The owner's open permission questions (`ask-owner`; issue 30 item 2,
//! review-9b395e0 finding 5). Pure bookkeeping.
//!
//! Each question has an id, random and never reused in a run, which its text
//! shows. An answer is bound to one question, never to "the oldest": it
//! names the id (`!allow 3fa2c1`), or it is a reply (NIP-10 `e` tag) to the
//! question's event. A bare `!allow` that replies to nothing answers
//! nothing, even when one question is open: a late `!allow` for a question
//! that timed out must not grant the next one. An answer to no open
//! question is ignored, and the owner is told so ([`Answered`]).

use crate::acp::permission::Grant;
use crate::inbound::Answer;
use std::collections::HashSet;
use tokio::sync::oneshot;

/// Hex digits of a question id.
pub const ID_LEN: usize = 6;

/// One open question.
#[derive(Debug)]
pub struct Question {
    /// The id the question's text shows.
    pub id: String,
    /// The id of the question's own event (an answer may reply to it).
    pub event_id: String,
    /// The turn it belongs to.
    pub turn_id: u64,
    /// Where the waiter is.
    pub answer: oneshot::Sender<Grant>,
}

/// What became of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// The question `id` got the grant.
    Granted { id: String, grant: Grant },
    /// The answer named `id`, which is not open (answered, timed out, its
    /// turn ended, or never asked).
    NotOpen { id: String },
    /// The answer named no question and replied to none of the open ones.
    Unnamed { open: usize },
}

/// The open questions of a run.
#[derive(Debug, Default)]
pub struct Asks {
    open: Vec<Question>,
    used: HashSet<String>,
}

impl Asks {
    /// A fresh id: [`ID_LEN`] hex digits from `random`, unused in this run.
    pub fn fresh_id(&mut self, mut random: impl FnMut() -> u32) -> String {
        loop {
            let id = format!("{:06x}", random() & 0x00ff_ffff);
            if self.used.insert(id.clone()) {
                return id;
            }
        }
    }

    /// Records an open question.
    pub fn open(&mut self, q: Question) {
        self.open.push(q);
    }

    /// Applies the owner's answer to the question it names.
    pub fn answer(&mut self, a: &Answer) -> Answered {
        self.open.retain(|q| !q.answer.is_closed());
        let found = match &a.id {
            Some(id) => self.open.iter().position(|q| q.id == *id),
            None => self.open.iter().position(|q| a.reply_to.contains(&q.event_id)),
        };
        let Some(i) = found else {
            return match &a.id {
                Some(id) => Answered::NotOpen { id: id.clone() },
                None => Answered::Unnamed {
                    open: self.open.len(),
                },
            };
        };
        let q = self.open.swap_remove(i);
        if q.answer.send(a.grant).is_err() {
            // The waiter gave up between the sweep and the send.
            return Answered::NotOpen { id: q.id };
        }
        Answered::Granted {
            id: q.id,
            grant: a.grant,
        }
    }

    /// Withdraws every question of a turn that ended.
    pub fn forget_turn(&mut self, turn_id: u64) {
        self.open.retain(|q| q.turn_id != turn_id);
    }

    /// Number of open questions.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// True when no question is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(grant: Grant, id: Option<&str>, reply_to: &[&str]) -> Answer {
        Answer {
            grant,
            id: id.map(str::to_string),
            reply_to: reply_to.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn question(a: &mut Asks, n: u32, turn_id: u64) -> (String, oneshot::Receiver<Grant>) {
        let id = a.fresh_id(|| n);
        let (tx, rx) = oneshot::channel();
        a.open(Question {
            id: id.clone(),
            event_id: format!("ev-{n}"),
            turn_id,
            answer: tx,
        });
        (id, rx)
    }

    #[test]
    fn an_answer_goes_to_the_question_it_names_never_to_the_oldest() {
        let mut a = Asks::default();
        let (q1, mut r1) = question(&mut a, 1, 1);
        let (q2, mut r2) = question(&mut a, 2, 1);
        assert_eq!(
            a.answer(&answer(Grant::Once, Some(&q2), &[])),
            Answered::Granted {
                id: q2.clone(),
                grant: Grant::Once
            }
        );
        assert_eq!(r2.try_recv(), Ok(Grant::Once));
        assert!(r1.try_recv().is_err(), "the older question is untouched");
        assert_eq!(
            a.answer(&answer(Grant::Deny, None, &["ev-1"])),
            Answered::Granted {
                id: q1,
                grant: Grant::Deny
            }
        );
        assert_eq!(r1.try_recv(), Ok(Grant::Deny));
        assert!(a.is_empty());
    }

    #[test]
    fn a_late_answer_for_a_closed_question_grants_nothing() {
        let mut a = Asks::default();
        let (q1, r1) = question(&mut a, 1, 1);
        drop(r1); // Q1 timed out: its waiter gave up.
        let (_q2, mut r2) = question(&mut a, 2, 1);
        assert_eq!(
            a.answer(&answer(Grant::Once, Some(&q1), &[])),
            Answered::NotOpen { id: q1 }
        );
        assert_eq!(
            a.answer(&answer(Grant::Once, None, &["ev-1"])),
            Answered::Unnamed { open: 1 }
        );
        assert!(r2.try_recv().is_err(), "the next question is not granted");
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn a_bare_answer_answers_nothing_even_with_one_question_open() {
        let mut a = Asks::default();
        let (_q, mut r) = question(&mut a, 7, 1);
        assert_eq!(
            a.answer(&answer(Grant::Once, None, &[])),
            Answered::Unnamed { open: 1 }
        );
        assert!(r.try_recv().is_err());
    }

    #[test]
    fn ids_are_never_reused_and_a_turns_questions_go_with_it() {
        let mut a = Asks::default();
        let mut n = 0;
        let first = a.fresh_id(|| 5);
        let second = a.fresh_id(|| {
            n += 1;
            if n < 3 { 5 } else { 6 }
        });
        assert_eq!((first.as_str(), second.as_str()), ("000005", "000006"));
        let (q, mut r) = question(&mut a, 9, 4);
        a.forget_turn(4);
        assert!(a.is_empty() && r.try_recv().is_err());
        assert_eq!(
            a.answer(&answer(Grant::Once, Some(&q), &[])),
            Answered::NotOpen { id: q }
        );
    }
}

//! Per-turn usage, as the agent reported it (issue 34 item 1): what one
//! turn tells ([`TurnReport`]) and the pure ledger that makes it Buzz's
//! kind-44200 payload ([`Ledger::metric`],
//! [`buzz_contract::turn_metric::TurnMetric`]). The run loop seals it to
//! the owner and publishes it ([`crate::events::sealed`]).
//!
//! Where the figures come from, and nothing else:
//! - **tokens**: the agent's own count for the turn, ACP
//!   `PromptResponse.usage` (claude-agent-acp, codex-acp and gemini-cli
//!   send it). ACP counts input without the cache, so the payload's
//!   `inputTokens` (which includes it) is input + cache read + cache write;
//!   `totalTokens` is the agent's, never a sum of ours;
//! - **context fill and cost**: the last `usage_update` of the turn (`used`,
//!   `size`, and `cost`, the session's cost so far). Only a cost in `USD`
//!   becomes `costUsd`; another unit is not reported.
//!
//! **Decisions.**
//! - A turn is reported whatever its end (answered, cancelled, failed),
//!   with `null` for every figure the agent did not give: the owner sees
//!   that the turn happened and that the agent reports nothing, instead of
//!   a missing row that reads as "free".
//! - The turn's cost is the session's cost now minus at the previous turn's
//!   end. For a session this run did not begin (one brought back after a
//!   restart, issue 32) the first turn's base is unknown: its cost is `null`
//!   and `deltaReliable` is false. A session's cost that went down (the
//!   agent restarted its count) does the same.
//! - `cumulative` tokens are the sum of this run's turns, given only for a
//!   session this run began (else the sum would pass for the whole);
//!   `cumulative.costUsd` is the agent's own session figure.
//! - The agent's counts are summed saturating (review afa2bf1 finding 9):
//!   a hostile or huge count stops at `u64::MAX`, never panics in a debug
//!   build nor wraps in a release one.
//! - `turnSeq` counts the session's turns in this run; with the run's
//!   `timestamp` it orders them.

use buzz_contract::turn_metric::{Outcome, StopReason, TokenCounts, TurnMetric};
use std::collections::HashMap;
use std::time::SystemTime;

/// The harness's name in the payload.
pub const HARNESS: &str = "buzz-acp";

/// The agent's per-turn token count (ACP `PromptResponse.usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub total: u64,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
}

/// The last `usage_update` of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub used: u64,
    pub size: u64,
    /// The session's cost so far, and its unit.
    pub cost: Option<(f64, String)>,
}

/// How the turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The agent's stop reason, in ACP's words (`end_turn`, `max_tokens`,
    /// `refusal`, …).
    Answered(String),
    Cancelled,
    Failed,
}

/// What one turn tells about its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    pub turn_id: u64,
    pub channel: String,
    pub session: Option<String>,
    /// This run opened the session (a `session/new`), so it saw every turn.
    pub fresh_session: bool,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub tokens: Option<Tokens>,
    pub context: Option<Context>,
    pub end: End,
}

/// One session as this run saw it.
#[derive(Debug, Default)]
struct Tally {
    seq: u64,
    /// The session's cost at the last turn's end, when known.
    cost: Option<f64>,
    /// This run's token sums; `None` once a turn did not report them.
    sums: Option<(u64, u64, u64)>,
    fresh: bool,
}

/// Each session's count, cost and sums in this run.
#[derive(Debug, Default)]
pub struct Ledger {
    sessions: HashMap<String, Tally>,
}

impl Ledger {
    /// The payload for `r`, answering the mention `mention` (its event id),
    /// with `model` the record's model when one was set.
    pub fn metric(&mut self, r: &TurnReport, mention: Option<&str>, model: Option<&str>) -> TurnMetric {
        let key = r.session.clone().unwrap_or_default();
        let tally = self.sessions.entry(key).or_insert_with(|| Tally {
            fresh: r.fresh_session,
            sums: r.fresh_session.then_some((0, 0, 0)),
            ..Tally::default()
        });
        tally.seq += 1;
        let usd = r
            .context
            .as_ref()
            .and_then(|c| c.cost.as_ref())
            .and_then(|(amount, unit)| {
                (unit.eq_ignore_ascii_case("USD") && amount.is_finite() && *amount >= 0.0).then_some(*amount)
            });
        let base = match (tally.cost, tally.fresh, tally.seq) {
            (Some(prev), _, _) => Some(prev),
            (None, true, 1) => Some(0.0),
            (None, _, _) => None,
        };
        let (turn_cost, cost_reliable) = match (usd, base) {
            (Some(now), Some(prev)) if now >= prev => (Some(now - prev), true),
            (Some(_), _) => (None, false),
            (None, _) => (None, true),
        };
        if usd.is_some() {
            tally.cost = usd;
        }
        let turn = r.tokens.map(|t| TokenCounts {
            input_tokens: Some(
                t.input
                    .saturating_add(t.cache_read.unwrap_or(0))
                    .saturating_add(t.cache_write.unwrap_or(0)),
            ),
            output_tokens: Some(t.output),
            total_tokens: Some(t.total),
            cost_usd: turn_cost,
            cache_read_tokens: t.cache_read,
            cache_write_tokens: t.cache_write,
        });
        tally.sums = match (tally.sums, &turn) {
            (Some((i, o, all)), Some(t)) => Some((
                i.saturating_add(t.input_tokens.unwrap_or(0)),
                o.saturating_add(t.output_tokens.unwrap_or(0)),
                all.saturating_add(t.total_tokens.unwrap_or(0)),
            )),
            _ => None,
        };
        let cumulative = TokenCounts {
            input_tokens: tally.sums.map(|s| s.0),
            output_tokens: tally.sums.map(|s| s.1),
            total_tokens: tally.sums.map(|s| s.2),
            cost_usd: usd,
            ..TokenCounts::default()
        };
        let (stop_reason, native, outcome) = ending(&r.end);
        TurnMetric {
            harness: HARNESS.into(),
            model: model.map(str::to_string),
            channel_id: Some(r.channel.clone()),
            session_id: r.session.clone(),
            turn_id: Some(r.turn_id.to_string()),
            turn_seq: Some(tally.seq),
            timestamp: rfc3339(r.ended),
            started_at: Some(rfc3339(r.started)),
            turn: Some(turn.unwrap_or(TokenCounts {
                cost_usd: turn_cost,
                ..TokenCounts::default()
            })),
            cumulative: (!cumulative.is_unknown()).then_some(cumulative),
            delta_reliable: cost_reliable,
            stop_reason: Some(stop_reason),
            native_stop_reason: native,
            outcome: Some(outcome),
            triggering_event_ids: mention.map(|m| vec![m.to_string()]).unwrap_or_default(),
            context_used_tokens: r.context.as_ref().map(|c| c.used),
            context_limit_tokens: r.context.as_ref().map(|c| c.size),
        }
    }
}

/// Buzz's stop reason, the agent's own word when Buzz has none, and the
/// outcome: one arm per way a turn ends.
fn ending(end: &End) -> (StopReason, Option<String>, Outcome) {
    match end {
        End::Answered(w) if w == "end_turn" => (StopReason::EndTurn, None, Outcome::Success),
        End::Answered(w) if w == "max_tokens" => (StopReason::MaxTokens, None, Outcome::Success),
        End::Answered(w) => (StopReason::Unknown, Some(w.clone()), Outcome::Success),
        End::Cancelled => (StopReason::Cancelled, None, Outcome::Cancelled),
        End::Failed => (StopReason::Error, None, Outcome::Failed),
    }
}

/// `t` as RFC 3339 UTC, to the second (nostr's own form).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    nostr_sdk::prelude::Timestamp::from_secs(secs).to_human_datetime()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(session: &str, fresh: bool, tokens: Option<Tokens>, cost: Option<f64>) -> TurnReport {
        TurnReport {
            turn_id: 7,
            channel: "chan".into(),
            session: Some(session.into()),
            fresh_session: fresh,
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_720_000),
            ended: SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_720_003_250),
            tokens,
            context: cost.map(|c| Context {
                used: 5_000,
                size: 200_000,
                cost: Some((c, "USD".into())),
            }),
            end: End::Answered("end_turn".into()),
        }
    }

    const T: Tokens = Tokens {
        input: 10,
        output: 4,
        total: 20,
        cache_read: Some(6),
        cache_write: None,
    };

    #[test]
    fn a_fresh_session_s_turns_carry_the_agent_s_figures_and_their_sums() {
        let mut l = Ledger::default();
        let a = l.metric(
            &report("s", true, Some(T), Some(0.01)),
            Some("ev1"),
            Some("haiku"),
        );
        let t = a.turn.clone().unwrap();
        assert_eq!(t.input_tokens, Some(16), "input includes the cache");
        assert_eq!((t.output_tokens, t.total_tokens), (Some(4), Some(20)));
        assert_eq!(t.cost_usd, Some(0.01));
        assert_eq!(a.context_used_tokens, Some(5_000));
        assert_eq!(a.triggering_event_ids, vec!["ev1"]);
        assert_eq!(a.timestamp, "2025-12-03T00:00:03Z");
        let b = l.metric(&report("s", true, Some(T), Some(0.03)), None, None);
        assert_eq!(b.turn_seq, Some(2));
        assert!((b.turn.unwrap().cost_usd.unwrap() - 0.02).abs() < 1e-12);
        let c = b.cumulative.unwrap();
        assert_eq!(
            (c.input_tokens, c.output_tokens, c.cost_usd),
            (Some(32), Some(8), Some(0.03))
        );
        assert!(b.delta_reliable);
    }

    #[test]
    fn an_agent_that_reports_nothing_gets_nulls_not_zeros() {
        let mut l = Ledger::default();
        let m = l.metric(&report("s", true, None, None), None, None);
        assert!(m.turn.unwrap().is_unknown());
        assert!(m.cumulative.is_none());
        assert_eq!(m.context_used_tokens, None);
    }

    #[test]
    fn a_brought_back_session_s_first_cost_is_unknown_and_a_falling_cost_is_unreliable() {
        let mut l = Ledger::default();
        let first = l.metric(&report("r", false, Some(T), Some(0.5)), None, None);
        assert_eq!(first.turn.unwrap().cost_usd, None);
        assert!(!first.delta_reliable);
        let cum = first.cumulative.unwrap();
        assert_eq!(cum.input_tokens, None, "this run did not see the session's start");
        assert_eq!(cum.cost_usd, Some(0.5));
        let next = l.metric(&report("r", false, Some(T), Some(0.7)), None, None);
        assert!(next.delta_reliable);
        let fell = l.metric(&report("r", false, Some(T), Some(0.1)), None, None);
        assert_eq!(fell.turn.unwrap().cost_usd, None);
        assert!(!fell.delta_reliable);
    }

    /// Review afa2bf1 finding 9: an agent's count is not trusted to be small.
    #[test]
    fn counts_near_u64_max_saturate() {
        let huge = Tokens {
            input: u64::MAX - 1,
            output: u64::MAX,
            total: u64::MAX,
            cache_read: Some(u64::MAX),
            cache_write: Some(3),
        };
        let mut l = Ledger::default();
        let a = l.metric(&report("s", true, Some(huge), None), None, None);
        assert_eq!(a.turn.unwrap().input_tokens, Some(u64::MAX));
        let b = l.metric(&report("s", true, Some(huge), None), None, None);
        let c = b.cumulative.unwrap();
        assert_eq!(
            (c.input_tokens, c.output_tokens, c.total_tokens),
            (Some(u64::MAX), Some(u64::MAX), Some(u64::MAX))
        );
    }

    #[test]
    fn each_end_maps_to_its_stop_reason() {
        for (end, stop, outcome) in [
            (
                End::Answered("end_turn".into()),
                StopReason::EndTurn,
                Outcome::Success,
            ),
            (
                End::Answered("max_tokens".into()),
                StopReason::MaxTokens,
                Outcome::Success,
            ),
            (
                End::Answered("refusal".into()),
                StopReason::Unknown,
                Outcome::Success,
            ),
            (End::Cancelled, StopReason::Cancelled, Outcome::Cancelled),
            (End::Failed, StopReason::Error, Outcome::Failed),
        ] {
            let mut r = report("s", true, None, None);
            r.end = end.clone();
            let m = Ledger::default().metric(&r, None, None);
            assert_eq!((m.stop_reason, m.outcome), (Some(stop), Some(outcome)), "{end:?}");
        }
    }
}

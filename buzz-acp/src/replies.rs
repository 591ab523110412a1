//! What an asker is told when there is no answer (spec I5; wire-facts §4):
//! the agent's error, scrubbed and shortened; a turn that ran out of time;
//! a shed mention. Pure: texts and the per-channel rate limit.

use crate::acp::{self, AgentSpec};
use crate::scrub::{Published, Scrub};
use std::time::{Duration, Instant};

/// What a shed mention's asker is told (rate-limited like error replies).
pub const BUSY_TEXT: &str = "too many requests are waiting; try again later";
/// What the asker of a mention still queued at a stop is told.
pub const STOPPED_TEXT: &str = "the agent stopped before it got to this; mention it again once it is back";
/// What the owner's `!cancel` is answered when no turn runs in its channel
/// (a dozing agent runs none; issue 50).
pub const NOTHING_RUNS_TEXT: &str = "nothing is running in this channel; there is nothing to cancel";
/// At most one error reply per channel per this interval.
pub const ERROR_REPLY_INTERVAL: Duration = Duration::from_secs(60);
/// Longest agent error message quoted in a reply, in characters.
pub const ERROR_REPLY_MAX_CHARS: usize = 300;

/// The error reply's text: the agent's message, secrets scrubbed (before
/// the cut, so no fragment of one survives it), shortened.
pub fn error_reply_text(scrub: &Scrub, error: &str) -> Published {
    scrub.publish_with(error, |clean| {
        let clean: String = clean
            .chars()
            .filter(|c| !c.is_control() || *c == '\n')
            .take(ERROR_REPLY_MAX_CHARS)
            .collect();
        format!("⚠️ The agent could not answer: {}", clean.trim())
    })
}

/// What the asker of a turn that ran out of time is told; `None` for the
/// other cancellations (the owner's `!cancel`, shutdown), which are asked for.
pub fn timeout_text(why: &str, spec: &AgentSpec) -> Option<String> {
    timeout_text_for(why, spec.idle_timeout, spec.max_turn)
}

fn timeout_text_for(why: &str, idle: Duration, max_turn: Duration) -> Option<String> {
    let bound = match why {
        acp::IDLE_TIMEOUT => idle,
        acp::MAX_TURN => max_turn,
        _ => return None,
    };
    Some(format!(
        "no answer within the turn limit ({why}, {} s); the turn was cancelled",
        bound.as_secs()
    ))
}

/// True when an error reply may go to a channel last answered with one at `last`.
pub fn error_reply_due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|l| now.saturating_duration_since(l) >= ERROR_REPLY_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_running_out_of_time_is_answered_among_cancellations() {
        let (idle, max) = (Duration::from_secs(8), Duration::from_secs(60));
        let timeout_text = |why| timeout_text_for(why, idle, max);
        assert_eq!(
            timeout_text(acp::IDLE_TIMEOUT).as_deref(),
            Some("no answer within the turn limit (idle timeout, 8 s); the turn was cancelled")
        );
        assert_eq!(
            timeout_text(acp::MAX_TURN).as_deref(),
            Some("no answer within the turn limit (max turn duration, 60 s); the turn was cancelled")
        );
        assert_eq!(timeout_text("cancel"), None);
        assert_eq!(timeout_text("shutdown"), None);
    }

    #[test]
    fn error_replies_are_scrubbed_cut_and_rate_limited() {
        let keys = nostr_sdk::prelude::Keys::generate();
        let scrub = Scrub::new(
            &keys,
            None,
            [("MY_API_KEY".to_string(), "secret-1234".to_string())],
        );
        let p = error_reply_text(&scrub, &format!("bad key secret-1234\u{7}{}", "x".repeat(1000)));
        let t = p.as_str();
        assert!(!t.contains("secret-1234") && !t.contains('\u{7}'), "{t}");
        assert!(p.withheld(), "{t}");
        assert!(t.chars().count() <= ERROR_REPLY_MAX_CHARS + 100);
        let now = Instant::now();
        assert!(error_reply_due(None, now));
        assert!(!error_reply_due(Some(now), now + Duration::from_secs(59)));
        assert!(error_reply_due(Some(now), now + ERROR_REPLY_INTERVAL));
    }
}

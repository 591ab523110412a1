//! How usage reads (issue 34 item 2): one turn's usage as the launcher
//! holds it ([`TurnUsage`]), and the sums and the lines the CLI's `usage`
//! prints and the page shows, from the turns `app::usage` fetched. Pure.
//!
//! The agent's counts are summed saturating ([`Figure`]; review afa2bf1
//! finding 9): a hostile or huge count never panics nor wraps.
//!
//! A figure the agent did not report is "—", never 0, and a sum says how
//! many turns it is missing ("3 of 4 turns reported tokens"): a total that
//! quietly skips the unreported would read as the whole.
//!
//! **The hours** (issue 50 item 3): from the agent's state changes (kind
//! 44201, [`buzz_contract::awake`]), each state lasts until the agent's
//! next change, the last one until now ([`hours`]). The count starts at
//! the first change in the window, never before: what came before it is
//! not known, so it is not shown as any state.

use buzz_contract::awake::AwakeState;
use buzz_contract::turn_metric::TurnMetric;
use std::collections::BTreeMap;

/// One turn's usage.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnUsage {
    /// The agent's name.
    pub agent: String,
    pub event_id: String,
    /// The event's `created_at` (unix seconds).
    pub at: u64,
    pub metric: TurnMetric,
}

/// One state change of an agent (kind 44201).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The agent's name.
    pub agent: String,
    /// The event's `created_at` (unix seconds).
    pub at: u64,
    /// Its number in its run.
    pub seq: u64,
    pub state: AwakeState,
}

/// The seconds one agent spent in each state since its first change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hours {
    /// The first change's time: where the count starts.
    pub from: u64,
    /// Seconds per state; a state the launcher does not know counts in none.
    pub secs: BTreeMap<AwakeState, u64>,
}

/// Each agent's hours from its changes, oldest first as `usage` sorts them,
/// up to `now`. A change dated after `now` (a clock ahead) counts nothing.
pub fn hours(changes: &[Change], now: u64) -> BTreeMap<String, Hours> {
    let mut by_agent: BTreeMap<&str, Vec<&Change>> = BTreeMap::new();
    for c in changes {
        by_agent.entry(c.agent.as_str()).or_default().push(c);
    }
    by_agent
        .into_iter()
        .map(|(agent, cs)| {
            let mut h = Hours {
                from: cs[0].at,
                secs: BTreeMap::new(),
            };
            for (i, c) in cs.iter().enumerate() {
                let until = cs.get(i + 1).map_or(now, |next| next.at.min(now));
                if c.state != AwakeState::Unknown {
                    *h.secs.entry(c.state).or_default() += until.saturating_sub(c.at);
                }
            }
            (agent.to_string(), h)
        })
        .collect()
}

/// One agent's hours: `napper, over the last 3h 0m: awake 1h 0m, dozing
/// 2h 0m, asleep 0s, stopped 0s`.
pub fn hours_line(name: &str, h: &Hours, now: u64) -> String {
    let parts: Vec<String> = AwakeState::ALL
        .iter()
        .map(|s| {
            let secs = h.secs.get(s).copied().unwrap_or(0);
            format!("{} {}", s.as_str(), crate::presence::span(secs))
        })
        .collect();
    format!(
        "{name}, over the last {}: {}",
        crate::presence::span(now.saturating_sub(h.from)),
        parts.join(", ")
    )
}

/// A sum over the turns that reported a figure.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sum<T> {
    pub total: T,
    /// Turns that reported it.
    pub known: usize,
}

/// A figure summed as the agent reported it: a count saturates at its
/// largest value instead of panicking (debug) or wrapping (release), since
/// the agent, not this launcher, chose it (review afa2bf1 finding 9).
pub trait Figure: Copy {
    fn plus(self, other: Self) -> Self;
}

impl Figure for u64 {
    fn plus(self, other: u64) -> u64 {
        self.saturating_add(other)
    }
}

impl Figure for f64 {
    fn plus(self, other: f64) -> f64 {
        self + other
    }
}

impl<T: Figure> Sum<T> {
    fn add(&mut self, v: Option<T>) {
        if let Some(v) = v {
            self.total = self.total.plus(v);
            self.known += 1;
        }
    }
}

/// One agent's totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub turns: usize,
    pub input: Sum<u64>,
    pub output: Sum<u64>,
    pub cost_usd: Sum<f64>,
    /// The last context fill seen: used and window.
    pub context: Option<(u64, u64)>,
}

/// Each agent's totals, by name.
pub fn totals(turns: &[TurnUsage]) -> BTreeMap<String, Totals> {
    let mut out: BTreeMap<String, Totals> = BTreeMap::new();
    for t in turns {
        let e = out.entry(t.agent.clone()).or_default();
        e.turns += 1;
        let turn = t.metric.turn.clone().unwrap_or_default();
        e.input.add(turn.input_tokens);
        e.output.add(turn.output_tokens);
        e.cost_usd.add(turn.cost_usd);
        if let (Some(u), Some(s)) = (t.metric.context_used_tokens, t.metric.context_limit_tokens) {
            e.context = Some((u, s));
        }
    }
    out
}

/// `n` with thin groups of three (`12 345`).
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A dollar amount: four decimals under a dollar, two above.
pub fn dollars(v: f64) -> String {
    if v < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

fn or_dash<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "—".to_string(), f)
}

/// The context fill: `1 280 / 200 000 (1%)`; `0%` of a size of 0, and a
/// percentage past `u64::MAX` saturates.
pub fn context(used: u64, size: u64) -> String {
    let pct = (u128::from(used) * 100)
        .checked_div(u128::from(size))
        .map_or(0, |p| u64::try_from(p).unwrap_or(u64::MAX));
    format!("{} / {} ({pct}%)", count(used), count(size))
}

/// The table's header.
pub const HEADER: [&str; 8] = [
    "WHEN (UTC)",
    "AGENT",
    "TURN",
    "IN",
    "OUT",
    "CONTEXT",
    "COST",
    "END",
];

/// One turn's cells, as [`HEADER`] names them.
pub fn row(t: &TurnUsage) -> [String; 8] {
    let m = &t.metric;
    let turn = m.turn.clone().unwrap_or_default();
    let end = match (&m.stop_reason, &m.native_stop_reason) {
        (_, Some(native)) => native.clone(),
        (Some(r), None) => serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        (None, None) => "—".into(),
    };
    [
        m.timestamp.replace('T', " ").trim_end_matches('Z').to_string(),
        t.agent.clone(),
        or_dash(m.turn_seq, |s| s.to_string()),
        or_dash(turn.input_tokens, count),
        or_dash(turn.output_tokens, count),
        match (m.context_used_tokens, m.context_limit_tokens) {
            (Some(u), Some(s)) => context(u, s),
            _ => "—".into(),
        },
        or_dash(turn.cost_usd, dollars),
        end,
    ]
}

/// One agent's total line.
pub fn total_line(name: &str, t: &Totals) -> String {
    let of = |known: usize| {
        if known == t.turns {
            String::new()
        } else {
            format!(" ({known} of {} turns reported)", t.turns)
        }
    };
    let tokens = if t.input.known + t.output.known == 0 {
        "tokens not reported".to_string()
    } else {
        format!(
            "{} in{}, {} out{}",
            count(t.input.total),
            of(t.input.known),
            count(t.output.total),
            of(t.output.known)
        )
    };
    let cost = if t.cost_usd.known == 0 {
        "cost not reported".to_string()
    } else {
        format!("{}{}", dollars(t.cost_usd.total), of(t.cost_usd.known))
    };
    let ctx = t
        .context
        .map_or(String::new(), |(u, s)| format!("; context {}", context(u, s)));
    format!("{name}: {} turn(s); {tokens}; {cost}{ctx}", t.turns)
}

/// `--since`: unix seconds, or a span back from `now` (`90s`, `30m`,
/// `12h`, `7d`).
pub fn parse_since(text: &str, now: u64) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("--since {t:?}: give unix seconds or a span back from now, like 30m, 12h or 7d");
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(secs);
    }
    let (n, unit) = t.split_at(t.len().saturating_sub(1));
    let n: u64 = n.parse().map_err(|_| bad())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    Ok(now.saturating_sub(n.saturating_mul(per)))
}

/// A turn with the given figures, for the tests of this module and the plots.
#[cfg(test)]
pub(crate) fn sample(agent: &str, at: u64, tokens: Option<(u64, u64)>, cost: Option<f64>) -> TurnUsage {
    use buzz_contract::turn_metric::{StopReason, TokenCounts};
    TurnUsage {
        agent: agent.into(),
        event_id: "e".into(),
        at,
        metric: TurnMetric {
            harness: "buzz-acp".into(),
            model: None,
            channel_id: None,
            session_id: None,
            turn_id: None,
            turn_seq: Some(1),
            timestamp: "2026-12-03T10:00:00Z".into(),
            started_at: None,
            turn: Some(TokenCounts {
                input_tokens: tokens.map(|t| t.0),
                output_tokens: tokens.map(|t| t.1),
                cost_usd: cost,
                ..TokenCounts::default()
            }),
            cumulative: None,
            delta_reliable: true,
            stop_reason: Some(StopReason::EndTurn),
            native_stop_reason: None,
            outcome: None,
            triggering_event_ids: vec![],
            context_used_tokens: Some(1280),
            context_limit_tokens: Some(200_000),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(agent: &str, at: u64, state: AwakeState) -> Change {
        Change {
            agent: agent.into(),
            at,
            seq: 0,
            state,
        }
    }

    #[test]
    fn each_state_lasts_until_the_next_change_and_the_last_until_now() {
        use AwakeState::*;
        let cs = [
            change("a", 1000, Awake),
            change("b", 1500, Awake),
            change("a", 1300, Dozing),
            change("a", 2000, Awake),
            change("a", 2100, Dozing),
            change("a", 3000, Asleep),
            change("a", 3600, Awake),
            change("a", 3700, Stopped),
            change("a", 3900, Unknown),
        ];
        let mut sorted = cs.to_vec();
        sorted.sort_by_key(|c| c.at);
        let h = hours(&sorted, 4000);
        let a = &h["a"];
        assert_eq!(a.from, 1000);
        assert_eq!(a.secs[&Awake], 300 + 100 + 100);
        assert_eq!(a.secs[&Dozing], 700 + 900);
        assert_eq!(a.secs[&Asleep], 600);
        assert_eq!(a.secs[&Stopped], 200);
        assert!(!a.secs.contains_key(&Unknown), "an unknown state counts in none");
        assert_eq!(h["b"].secs[&Awake], 2500);
        assert_eq!(
            hours_line("a", a, 4000),
            "a, over the last 50m 0s: awake 8m 20s, dozing 26m 40s, asleep 10m 0s, stopped 3m 20s"
        );
    }

    #[test]
    fn a_change_after_now_counts_nothing() {
        let h = hours(
            &[
                change("a", 100, AwakeState::Awake),
                change("a", 900, AwakeState::Dozing),
            ],
            500,
        );
        assert_eq!(h["a"].secs[&AwakeState::Awake], 400);
        assert_eq!(h["a"].secs[&AwakeState::Dozing], 0);
    }
    fn turn(agent: &str, input: Option<u64>, cost: Option<f64>) -> TurnUsage {
        super::sample(agent, 0, input.map(|i| (i, i / 10)), cost)
    }

    #[test]
    fn a_total_says_how_many_turns_it_is_missing_and_never_counts_a_null_as_zero() {
        let turns = [
            turn("a", Some(1000), Some(0.5)),
            turn("a", None, None),
            turn("b", None, None),
        ];
        let t = totals(&turns);
        assert_eq!(
            t["a"].input,
            Sum {
                total: 1000,
                known: 1
            }
        );
        assert_eq!(
            total_line("a", &t["a"]),
            "a: 2 turn(s); 1 000 in (1 of 2 turns reported), 100 out (1 of 2 turns reported); $0.5000 (1 of 2 turns reported); context 1 280 / 200 000 (0%)"
        );
        assert!(total_line("b", &t["b"]).contains("tokens not reported; cost not reported"));
    }

    #[test]
    fn a_row_shows_dashes_for_what_was_not_reported() {
        let r = row(&turn("a", None, None));
        assert_eq!(&r[3..7], &["—", "—", "1 280 / 200 000 (0%)", "—"]);
        assert_eq!(r[0], "2026-12-03 10:00:00");
        assert_eq!(r[7], "end_turn");
        assert_eq!(row(&turn("a", Some(1_234_567), Some(12.5)))[3], "1 234 567");
    }

    /// Review afa2bf1 finding 9: an agent's count is not trusted to be small.
    #[test]
    fn counts_near_u64_max_saturate() {
        let huge = [
            turn("a", Some(u64::MAX - 1), None),
            turn("a", Some(u64::MAX - 1), None),
        ];
        let t = totals(&huge);
        assert_eq!(
            t["a"].input,
            Sum {
                total: u64::MAX,
                known: 2
            }
        );
        assert!(total_line("a", &t["a"]).contains("18 446 744 073 709 551 615 in"));
        assert_eq!(
            context(u64::MAX, u64::MAX),
            "18 446 744 073 709 551 615 / 18 446 744 073 709 551 615 (100%)"
        );
        assert!(context(u64::MAX, 1).ends_with("(18446744073709551615%)"));
        assert_eq!(context(5, 0), "5 / 0 (0%)");
    }

    #[test]
    fn since_takes_seconds_or_a_span() {
        assert_eq!(parse_since("1700000000", 0), Ok(1_700_000_000));
        assert_eq!(parse_since("2h", 10_000), Ok(10_000 - 7200));
        assert_eq!(parse_since("7d", 100), Ok(0));
        assert!(parse_since("2w", 0).unwrap_err().contains("30m, 12h or 7d"));
        assert!(parse_since("", 0).is_err());
    }
}

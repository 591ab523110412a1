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

//! The usage panel's plots (issue 34 item 2): inline SVG drawn from the
//! page's own data, with no script and no external asset. Pure: turns in,
//! markup out, every number formatted here and every text escaped.
//!
//! - [`tokens_per_turn`]: one bar per turn, input below output, a gap where
//!   the agent reported no tokens (drawn as a dashed outline: unknown, not
//!   zero);
//! - [`cost_over_time`]: the running sum of the turns' reported cost, a
//!   step line over the turns' end times;
//! - [`cpu_over_time`], [`memory_over_time`]: what the collector measured
//!   of the agent's pod ([`crate::measured`]), one point per hour window, a
//!   break where an hour was not measured; the memory plot marks each OOM
//!   kill with a vertical line and the memory limit, when known, dashed.
//!
//! Nothing here trusts what it is given (review afa2bf1 finding 9): turns
//! and windows are put oldest first whatever order they came in, and the
//! agent's counts are summed saturating.

use crate::measured::{self, Measured};
use crate::usage_view::TurnUsage;

/// The plots' size, in SVG user units.
pub const WIDTH: f64 = 480.0;
pub const HEIGHT: f64 = 140.0;
const PAD: f64 = 24.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn open(title: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = esc(title)
    )
}

/// The turns oldest first, whatever order they came in.
fn by_time(turns: &[TurnUsage]) -> Vec<&TurnUsage> {
    let mut sorted: Vec<&TurnUsage> = turns.iter().collect();
    sorted.sort_by_key(|t| t.at);
    sorted
}

/// Bars of input and output tokens, one per turn, oldest on the left.
pub fn tokens_per_turn(turns: &[TurnUsage]) -> String {
    let mut out = open("tokens per turn");
    let figures: Vec<Option<(u64, u64)>> = by_time(turns)
        .into_iter()
        .map(|t| {
            let c = t.metric.turn.clone().unwrap_or_default();
            match (c.input_tokens, c.output_tokens) {
                (None, None) => None,
                (i, o) => Some((i.unwrap_or(0), o.unwrap_or(0))),
            }
        })
        .collect();
    let max = figures
        .iter()
        .flatten()
        .map(|(i, o)| i.saturating_add(*o))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let n = turns.len().max(1) as f64;
    let slot = (WIDTH - 2.0 * PAD) / n;
    let bar = (slot * 0.8).max(1.0);
    let base = HEIGHT - PAD;
    let scale = (HEIGHT - 2.0 * PAD) / max;
    for (k, f) in figures.iter().enumerate() {
        let x = PAD + k as f64 * slot;
        match f {
            Some((i, o)) => {
                let (hi, ho) = (*i as f64 * scale, *o as f64 * scale);
                out.push_str(&format!(
                    r#"<rect class="in" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{hi:.1}"><title>turn {}: {i} in</title></rect>"#,
                    base - hi,
                    k + 1
                ));
                out.push_str(&format!(
                    r#"<rect class="out" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{ho:.1}"><title>turn {}: {o} out</title></rect>"#,
                    base - hi - ho,
                    k + 1
                ));
            }
            None => out.push_str(&format!(
                r#"<rect class="unknown" x="{x:.1}" y="{PAD:.1}" width="{bar:.1}" height="{:.1}" fill="none" stroke-dasharray="2 2"><title>turn {}: not reported</title></rect>"#,
                base - PAD,
                k + 1
            )),
        }
    }
    out.push_str(&format!(
        r#"<text x="{PAD}" y="{:.1}" font-size="10">max {max:.0} tokens</text></svg>"#,
        PAD - 8.0
    ));
    out
}

/// The running sum of reported cost over the turns' end times.
pub fn cost_over_time(turns: &[TurnUsage]) -> String {
    let mut out = open("cost over time");
    let mut sum = 0.0;
    let points: Vec<(u64, f64)> = by_time(turns)
        .into_iter()
        .filter_map(|t| {
            let c = t.metric.turn.as_ref()?.cost_usd?;
            sum += c;
            Some((t.at, sum))
        })
        .collect();
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        out.push_str(&format!(
            r#"<text x="{PAD}" y="{:.1}" font-size="12">no cost reported</text></svg>"#,
            HEIGHT / 2.0
        ));
        return out;
    };
    let span = last.0.saturating_sub(first.0).max(1) as f64;
    let top = last.1.max(f64::MIN_POSITIVE);
    let x = |t: u64| PAD + t.saturating_sub(first.0) as f64 / span * (WIDTH - 2.0 * PAD);
    let y = |v: f64| HEIGHT - PAD - v / top * (HEIGHT - 2.0 * PAD);
    let mut d = format!("M{:.1} {:.1}", x(first.0), HEIGHT - PAD);
    for (t, v) in &points {
        d.push_str(&format!(" H{:.1} V{:.1}", x(*t), y(*v)));
    }
    out.push_str(&format!(r#"<path class="cost" d="{d}" fill="none"/>"#));
    out.push_str(&format!(
        r#"<text x="{PAD}" y="{:.1}" font-size="10">{}</text></svg>"#,
        PAD - 8.0,
        esc(&crate::usage_view::dollars(last.1))
    ));
    out
}

/// Average cores per hour window.
pub fn cpu_over_time(m: &Measured) -> String {
    hourly("CPU (average cores per hour)", m, |w| w.cores, "cores", None, &[])
}

/// The largest working set per hour window, the OOM kills and the limit.
pub fn memory_over_time(m: &Measured) -> String {
    let limit = m
        .oom_kills
        .iter()
        .filter(|k| k.memory_limit_bytes.is_some())
        .max_by_key(|k| (k.observed_unix, &k.observed_at))
        .and_then(|k| k.memory_limit_bytes)
        .map(|b| b as f64 / 1_048_576.0);
    let kills: Vec<u64> = m.oom_kills.iter().filter_map(|k| k.observed_unix).collect();
    hourly(
        "memory (largest working set per hour, MiB)",
        m,
        |w| w.max_mib,
        "MiB",
        limit,
        &kills,
    )
}

fn hourly(
    title: &str,
    m: &Measured,
    value: fn(&measured::Window) -> Option<f64>,
    unit: &str,
    limit: Option<f64>,
    kills: &[u64],
) -> String {
    let mut out = open(title);
    // Oldest first whatever the ingest sent (review afa2bf1 finding 9): the
    // line is drawn in this order, and the axis runs from the first to the
    // last, so `t0 <= t1` always.
    let mut windows = m.windows.clone();
    windows.sort_by_key(|w| w.window_start);
    let (Some(first), Some(last)) = (windows.first(), windows.last()) else {
        out.push_str(&format!(
            r#"<text x="{PAD}" y="{:.1}" font-size="12">not measured yet</text></svg>"#,
            HEIGHT / 2.0
        ));
        return out;
    };
    let (t0, t1) = (first.window_start, last.window_start.saturating_add(3600));
    let span = t1.saturating_sub(t0).max(1) as f64;
    let top = windows
        .iter()
        .filter_map(value)
        .chain(limit)
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |t: u64| PAD + (t.clamp(t0, t1) - t0) as f64 / span * (WIDTH - 2.0 * PAD);
    let y = |v: f64| HEIGHT - PAD - v / top * (HEIGHT - 2.0 * PAD);
    let mut d = String::new();
    let mut pen_down = false;
    for w in &windows {
        match value(w) {
            Some(v) => {
                let (px, py) = (x(w.window_start.saturating_add(1800)), y(v));
                d.push_str(&format!("{}{px:.1} {py:.1} ", if pen_down { "L" } else { "M" }));
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    if !d.is_empty() {
        out.push_str(&format!(
            r#"<path class="measured" d="{}" fill="none"/>"#,
            d.trim_end()
        ));
    }
    for w in windows.iter().filter(|w| value(w).is_none()) {
        out.push_str(&format!(
            r#"<rect class="unknown" x="{:.1}" y="{PAD:.1}" width="{:.1}" height="{:.1}" fill="none" stroke-dasharray="2 2"><title>not measured</title></rect>"#,
            x(w.window_start),
            x(w.window_start.saturating_add(3600)) - x(w.window_start),
            HEIGHT - 2.0 * PAD
        ));
    }
    if let Some(l) = limit {
        out.push_str(&format!(
            r#"<line class="limit" x1="{PAD}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke-dasharray="4 2"><title>limit {l:.0} {u}</title></line>"#,
            WIDTH - PAD,
            y = y(l),
            u = esc(unit)
        ));
    }
    for t in kills {
        out.push_str(&format!(
            r#"<line class="oom" x1="{x:.1}" x2="{x:.1}" y1="{PAD}" y2="{:.1}"><title>OOM kill</title></line>"#,
            HEIGHT - PAD,
            x = x(*t)
        ));
    }
    out.push_str(&format!(
        r#"<text x="{PAD}" y="{:.1}" font-size="10">max {top:.2} {}</text></svg>"#,
        PAD - 8.0,
        esc(unit)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(at: u64, tokens: Option<(u64, u64)>, cost: Option<f64>) -> TurnUsage {
        crate::usage_view::sample("a", at, tokens, cost)
    }

    #[test]
    fn a_turn_without_figures_is_drawn_unknown_not_as_a_zero_bar() {
        let svg = tokens_per_turn(&[turn(1, Some((300, 100)), None), turn(2, None, None)]);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="in""#).count(), 1);
        assert!(svg.contains("turn 2: not reported"));
        assert!(svg.contains("max 400 tokens"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn the_cost_line_climbs_by_each_reported_turn() {
        let svg = cost_over_time(&[
            turn(10, None, Some(0.5)),
            turn(20, None, None),
            turn(30, None, Some(0.25)),
        ]);
        assert!(svg.contains("$0.7500"), "{svg}");
        assert!(
            svg.contains(r#"<path class="cost" d="M24.0 116.0 H24.0 V54.7 H456.0 V24.0""#),
            "{svg}"
        );
        assert!(cost_over_time(&[turn(1, None, None)]).contains("no cost reported"));
        assert!(!cost_over_time(&[]).contains("NaN"));
    }

    #[test]
    fn measured_hours_break_where_nothing_was_measured_and_kills_are_marked() {
        let w = |start, cores, max_mib| measured::Window {
            window_start: start,
            cores,
            max_mib,
        };
        let m = Measured {
            windows: vec![
                w(0, Some(0.5), Some(50.0)),
                w(3600, None, None),
                w(7200, Some(1.0), Some(100.0)),
            ],
            windows_omitted: 0,
            oom_kills: vec![measured::OomKill {
                observed_at: "1970-01-01T02:30:00Z".into(),
                observed_unix: Some(9000),
                container: "agent".into(),
                memory_limit_bytes: Some(128 << 20),
                oom_kill_total: 1,
            }],
            oom_kills_omitted: 0,
        };
        let cpu = cpu_over_time(&m);
        assert!(
            cpu.contains(r#"d="M96.0 70.0 M384.0 24.0""#),
            "a break, not a line through the gap: {cpu}"
        );
        assert_eq!(cpu.matches("not measured").count(), 1);
        let mem = memory_over_time(&m);
        assert!(mem.contains(r#"<line class="oom" x1="384.0""#), "{mem}");
        assert!(
            mem.contains("limit 128 MiB") && mem.contains("max 128.00 MiB"),
            "{mem}"
        );
        let none = Measured { windows: vec![], ..m };
        assert!(cpu_over_time(&none).contains("not measured yet"));
        assert!(!mem.contains("NaN") && !cpu.contains("inf"));
    }

    /// Review afa2bf1 finding 9: the ingest's order is not trusted.
    #[test]
    fn an_unordered_ingest_answer_plots_as_the_ordered_one_without_panicking() {
        let w = |start, cores, max_mib| measured::Window {
            window_start: start,
            cores,
            max_mib,
        };
        let kill = measured::OomKill {
            observed_at: "1970-01-01T02:30:00Z".into(),
            observed_unix: Some(9000),
            container: "agent".into(),
            memory_limit_bytes: Some(128 << 20),
            oom_kill_total: 1,
        };
        let ordered = Measured {
            windows: vec![
                w(0, Some(0.5), Some(50.0)),
                w(3600, None, None),
                w(7200, Some(1.0), Some(100.0)),
            ],
            windows_omitted: 0,
            oom_kills: vec![kill],
            oom_kills_omitted: 0,
        };
        let mut unordered = ordered.clone();
        unordered.windows.reverse();
        assert_eq!(cpu_over_time(&unordered), cpu_over_time(&ordered));
        assert_eq!(memory_over_time(&unordered), memory_over_time(&ordered));
        // A window at the end of time: no overflow, no NaN.
        let end = Measured {
            windows: vec![w(u64::MAX, Some(1.0), Some(1.0)), w(0, Some(0.5), None)],
            ..ordered.clone()
        };
        let svg = cpu_over_time(&end) + &memory_over_time(&end);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        // Turns out of order: the cost still climbs left to right.
        let turns = [
            turn(30, None, Some(0.25)),
            turn(10, None, Some(0.5)),
            turn(20, None, None),
        ];
        let sorted = [
            turn(10, None, Some(0.5)),
            turn(20, None, None),
            turn(30, None, Some(0.25)),
        ];
        assert_eq!(cost_over_time(&turns), cost_over_time(&sorted));
        assert_eq!(tokens_per_turn(&turns), tokens_per_turn(&sorted));
    }

    #[test]
    fn counts_near_u64_max_saturate() {
        let svg = tokens_per_turn(&[
            turn(1, Some((u64::MAX, u64::MAX)), None),
            turn(2, Some((1, 1)), None),
        ]);
        assert!(svg.contains("max 18446744073709551616 tokens"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }
}

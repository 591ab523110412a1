//! The usage panel's plots (issue 34 item 2): inline SVG drawn from the
//! page's own data, with no script and no external asset. Pure: turns in,
//! markup out, every number formatted here and every text escaped.
//!
//! - [`tokens_per_turn`]: one bar per turn, input below output, a gap where
//!   the agent reported no tokens (drawn as a dashed outline: unknown, not
//!   zero);
//! - [`cost_over_time`]: the running sum of the turns' reported cost, a
//!   step line over the turns' end times.

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

/// Bars of input and output tokens, one per turn, oldest on the left.
pub fn tokens_per_turn(turns: &[TurnUsage]) -> String {
    let mut out = open("tokens per turn");
    let figures: Vec<Option<(u64, u64)>> = turns
        .iter()
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
        .map(|(i, o)| i + o)
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
    let points: Vec<(u64, f64)> = turns
        .iter()
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
    let span = (last.0 - first.0).max(1) as f64;
    let top = last.1.max(f64::MIN_POSITIVE);
    let x = |t: u64| PAD + (t - first.0) as f64 / span * (WIDTH - 2.0 * PAD);
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
}

//! `runtime-ingest report`: a per-agent usage chart a person can look at
//! (issue 9, "A reference ingest backend").
//!
//! From the stored usage rows (closed windows and open snapshots), one point per
//! agent (pod) and hour window: the average cores over the covered time
//! (`core_nanoseconds / covered_nanoseconds`) and the largest working set sampled
//! (`max_bytes`, MiB). [`series`] is pure; [`render`] draws two panels into an SVG
//! through plotters' SVG backend.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

use crate::store::Stored;

/// One hour window of one agent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    /// Window start, Unix seconds.
    pub window_start: u64,
    /// Average cores over the covered time (absent when nothing was covered).
    pub cores: Option<f64>,
    /// Largest sampled working set, MiB (absent without memory samples).
    pub max_mib: Option<f64>,
}

/// Why a report could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no usage rows to draw")]
    Empty,
    #[error("drawing failed: {0}")]
    Draw(String),
}

/// Agent label (`namespace/pod`) → its points in window order.
pub fn series(rows: &[Stored]) -> BTreeMap<String, Vec<Point>> {
    let mut out: BTreeMap<String, BTreeMap<u64, Point>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.kind.starts_with("usage_")) {
        let Ok(v) = serde_json::from_str::<Value>(&row.payload) else {
            continue;
        };
        for r in v["records"].as_array().into_iter().flatten() {
            let Some(start) = r["window_start"].as_str().and_then(crate::checks::parse_rfc3339) else {
                continue;
            };
            let label = format!(
                "{}/{}",
                r["namespace"].as_str().unwrap_or("?"),
                r["pod"].as_str().unwrap_or("?")
            );
            let core = r["cpu"]["core_nanoseconds"].as_f64();
            let covered = r["cpu"]["covered_nanoseconds"].as_f64().filter(|c| *c > 0.0);
            let cores = core.zip(covered).map(|(c, d)| c / d);
            let max_mib = r["memory"]["max_bytes"].as_f64().map(|b| b / 1_048_576.0);
            out.entry(label).or_default().insert(
                start,
                Point {
                    window_start: start,
                    cores,
                    max_mib,
                },
            );
        }
    }
    out.into_iter()
        .map(|(k, v)| (k, v.into_values().collect()))
        .collect()
}

/// One panel: title, unit, top of the data, and the value it draws.
type Panel = (&'static str, &'static str, f64, fn(&Point) -> Option<f64>);

fn time_label(secs: &i64) -> String {
    let text = crate::checks::format_utc(u64::try_from(*secs).unwrap_or(0));
    // `YYYY-MM-DDTHH:MM:SSZ` → `MM-DD HH:MM` (ticks need not fall on the hour).
    text.get(5..16).map(|s| s.replace('T', " ")).unwrap_or(text)
}

/// Draw `series` into an SVG at `out`.
pub fn render(series: &BTreeMap<String, Vec<Point>>, out: &Path) -> Result<(), ReportError> {
    let draw = |e: &dyn std::fmt::Display| ReportError::Draw(e.to_string());
    let starts = series.values().flatten().map(|p| p.window_start as i64);
    let (Some(x0), Some(x1)) = (starts.clone().min(), starts.max()) else {
        return Err(ReportError::Empty);
    };
    let x_range = x0..(x1 + 3600).max(x0 + 3600);
    let max_cores = series
        .values()
        .flatten()
        .filter_map(|p| p.cores)
        .fold(0.0_f64, f64::max);
    let max_mib = series
        .values()
        .flatten()
        .filter_map(|p| p.max_mib)
        .fold(0.0_f64, f64::max);
    let root = SVGBackend::new(out, (1000, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let panels = root.split_evenly((2, 1));
    let specs: [Panel; 2] = [
        (
            "CPU per agent (average cores per hour)",
            "cores",
            max_cores,
            |p| p.cores,
        ),
        (
            "Memory per agent (largest working set per hour)",
            "MiB",
            max_mib,
            |p| p.max_mib,
        ),
    ];
    for (panel, (title, unit, top, value)) in panels.iter().zip(specs) {
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(x_range.clone(), 0.0..(top * 1.15).max(0.01))
            .map_err(|e| draw(&e))?;
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&time_label)
            .y_desc(unit)
            .draw()
            .map_err(|e| draw(&e))?;
        for (i, (label, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let data: Vec<(i64, f64)> = points
                .iter()
                .filter_map(|p| value(p).map(|v| (p.window_start as i64, v)))
                .collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| draw(&e))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            chart
                .draw_series(
                    data.into_iter()
                        .map(|(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(|e| draw(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| draw(&e))?;
    }
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::validate;

    fn usage(kind: &str, pod: &str, start: &str, core: u64, covered: u64, max: u64) -> Vec<u8> {
        format!(
            r#"{{"kind":"{kind}","source":"measured","window_start":"{start}","window_seconds":3600,"records":[{{"namespace":"ns","pod":"{pod}","pod_uid":"{pod}-uid","container":"agent","window_start":"{start}","window_seconds":3600,"cpu":{{"core_nanoseconds":{core},"covered_nanoseconds":{covered}}},"memory":{{"max_bytes":{max}}}}}]}}"#
        )
        .into_bytes()
    }

    #[test]
    fn one_point_per_agent_and_window_then_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("db")).unwrap();
        for (kind, pod, start, core, covered, max) in [
            (
                "usage_window",
                "a",
                "2026-08-06T10:00:00Z",
                1_800_000_000_000u64,
                3_600_000_000_000u64,
                104_857_600u64,
            ),
            (
                "usage_snapshot",
                "a",
                "2026-08-06T11:00:00Z",
                600_000_000_000,
                600_000_000_000,
                52_428_800,
            ),
            ("usage_window", "b", "2026-08-06T10:00:00Z", 0, 0, 1_048_576),
        ] {
            let bytes = usage(kind, pod, start, core, covered, max);
            store.upsert("s", &validate(kind, &bytes).unwrap()).unwrap();
        }
        let s = series(&store.records(None, None).unwrap());
        assert_eq!(s.len(), 2);
        assert_eq!(s["ns/a"].len(), 2);
        assert_eq!(s["ns/a"][0].cores, Some(0.5));
        assert_eq!(s["ns/a"][1].cores, Some(1.0));
        assert_eq!(s["ns/a"][0].max_mib, Some(100.0));
        assert_eq!(s["ns/b"][0].cores, None, "nothing covered: no value, not zero");
        let out = dir.path().join("chart.svg");
        render(&s, &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("ns/a") && svg.contains("ns/b"));
        assert!(svg.contains("<polyline"), "the lines are drawn");
        assert!(matches!(render(&BTreeMap::new(), &out), Err(ReportError::Empty)));
    }
}

//! `bench scale`'s goals and human table (pure: figures in, text out). The
//! goals are issue 22 §4's: per-deploy p50 within 1.5× from N = 1 to N = 50,
//! and requests per deploy independent of the namespace's population.

use super::round3;
use serde_json::{Value, json};

fn find<'a>(cases: &'a [Value], case: &str, n: Option<u64>) -> Option<&'a Value> {
    cases
        .iter()
        .find(|c| c["case"] == case && n.is_none_or(|n| c["n"] == n))
}

/// CPU seconds per deploy of every party of a case.
fn all_cpu(c: &Value) -> Option<f64> {
    let cpu = &c["cpu_s_per_deploy"];
    ["apiserver", "etcd", "providers", "bench_proxy_and_node"]
        .iter()
        .map(|k| cpu[*k].as_f64())
        .sum()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(round3(a / b)),
        _ => None,
    }
}

/// The goals next to the figures; the per-deploy CPU ratio is the
/// cost the wall-time ratio is about, shown beside it.
pub(super) fn goals(cases: &[Value]) -> Value {
    let fleet = |n| find(cases, "fleet", Some(n));
    let p50 = |n| fleet(n).and_then(|c| c["deploy_ms"]["p50"].as_f64());
    let req = |c: Option<&Value>| c.and_then(|c| c["requests_per_deploy"].as_f64());
    let ratio_p50 = ratio(p50(50), p50(1));
    let ratio_cpu = ratio(fleet(50).and_then(all_cpu), fleet(1).and_then(all_cpu));
    let (empty, full) = (req(fleet(1)), req(find(cases, "populated", None)));
    json!({
        "goals": {
            "deploy_p50_n50_over_n1": {
                "value": ratio_p50, "goal": "<= 1.5", "met": ratio_p50.is_some_and(|r| r <= 1.5),
            },
            "cpu_per_deploy_n50_over_n1": {
                "value": ratio_cpu, "goal": "<= 1.5", "met": ratio_cpu.is_some_and(|r| r <= 1.5),
            },
            "requests_per_deploy_populated_vs_empty": {
                "value": [full, empty], "goal": "equal", "met": full.is_some() && full == empty,
            },
        }
    })
}

/// A number as the table shows it; `-` when absent.
fn num(v: &Value, scale: f64) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{:.1}", x * scale))
}

/// The short human table.
pub(super) fn table(cases: &[Value]) -> String {
    let mut t = format!(
        "{:<28} {:>7} {:>8} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10} {:>9}\n",
        "case",
        "deploys",
        "p50 ms",
        "p99 ms",
        "p50 after",
        "req/dep",
        "api cpu ms",
        "all cpu ms",
        "all-online",
        "cpu floor"
    );
    for c in cases.iter().filter(|c| c["case"] != "status") {
        let label = match c["n"].as_u64() {
            Some(n) => format!("{n} Starts at once"),
            None => format!(
                "1 Start, {} agents in ns",
                c["population"]["pods"].as_u64().unwrap_or_default()
            ),
        };
        let cpu = &c["cpu_s_per_deploy"];
        t.push_str(&format!(
            "{:<28} {:>7} {:>8} {:>8} {:>10} {:>8} {:>10} {:>10} {:>10} {:>9}\n",
            label,
            c["deploys"].as_u64().unwrap_or_default(),
            num(&c["deploy_ms"]["p50"], 1.0),
            num(&c["deploy_ms"]["p99"], 1.0),
            num(&c["after_running_ms"]["p50"], 1.0),
            num(&c["requests_per_deploy"], 1.0),
            num(&cpu["apiserver"], 1000.0),
            num(&all_cpu(c).into(), 1000.0),
            num(&c["all_online_ms"]["median"], 1.0),
            num(&c["cpu_floor_ms"], 1.0),
        ));
    }
    for c in cases.iter().filter(|c| c["case"] == "status") {
        t.push_str(&format!(
            "status, {} agents, {:<19} full report {:>7} ms, {:>6} bytes read from the relay\n",
            c["agents"].as_u64().unwrap_or_default(),
            c["relay"].as_str().unwrap_or_default(),
            num(&c["report_ms"], 1.0),
            c["bytes_read"].as_u64().unwrap_or_default(),
        ));
    }
    if let Some(probe) = find(cases, "populated", None).map(|c| &c["list_probe"]) {
        for kind in [
            "pods_by_label",
            "secrets_by_label",
            "events_by_uid",
            "secrets_by_label_after_a_write",
            "events_watch_open_without_rv_after_a_write",
            "events_watch_open_at_rv_0_after_a_write",
            "events_watch_open_at_that_write_rv",
        ] {
            let (e, p) = (&probe["empty"][kind], &probe["populated"][kind]);
            t.push_str(&format!(
                "{kind:<42} empty / populated ns: {:>6} / {:>6} ms, apiserver CPU {:>5} / {:>5} ms\n",
                num(&e["ms_p50"], 1.0),
                num(&p["ms_p50"], 1.0),
                num(&e["apiserver_cpu_ms_per_list"], 1.0),
                num(&p["apiserver_cpu_ms_per_list"], 1.0),
            ));
        }
    }
    let g = goals(cases);
    let d = &g["goals"]["deploy_p50_n50_over_n1"];
    let c = &g["goals"]["cpu_per_deploy_n50_over_n1"];
    let r = &g["goals"]["requests_per_deploy_populated_vs_empty"];
    t.push_str(&format!(
        "goal: deploy p50 N=50 / N=1 = {} (<= 1.5: {}; CPU per deploy N=50 / N=1 = {}); requests per deploy populated / empty = {} / {} (equal: {})\n",
        num(&d["value"], 1.0),
        d["met"],
        num(&c["value"], 1.0),
        num(&r["value"][0], 1.0),
        num(&r["value"][1], 1.0),
        r["met"],
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(n: u64, p50: f64, req: f64) -> Value {
        let cpu =
            json!({ "apiserver": p50 / 1e4, "etcd": 0.0, "providers": 0.0, "bench_proxy_and_node": 0.0 });
        json!({ "case": "fleet", "n": n, "deploy_ms": { "p50": p50 }, "requests_per_deploy": req, "cpu_s_per_deploy": cpu })
    }

    #[test]
    fn goals_compare_n50_with_n1_and_populated_with_empty() {
        let pop = json!({ "case": "populated", "requests_per_deploy": 7.0 });
        let ok = goals(&[fleet(1, 200.0, 7.0), fleet(50, 300.0, 7.0), pop.clone()]);
        assert_eq!(ok["goals"]["deploy_p50_n50_over_n1"]["value"], 1.5);
        assert_eq!(ok["goals"]["deploy_p50_n50_over_n1"]["met"], true);
        assert_eq!(ok["goals"]["cpu_per_deploy_n50_over_n1"]["value"], 1.5);
        assert_eq!(ok["goals"]["requests_per_deploy_populated_vs_empty"]["met"], true);
        let bad = goals(&[fleet(1, 200.0, 8.0), fleet(50, 301.0, 8.0), pop]);
        assert_eq!(bad["goals"]["deploy_p50_n50_over_n1"]["met"], false);
        assert_eq!(
            bad["goals"]["requests_per_deploy_populated_vs_empty"]["met"],
            false
        );
        assert_eq!(goals(&[])["goals"]["deploy_p50_n50_over_n1"]["met"], false);
    }
}

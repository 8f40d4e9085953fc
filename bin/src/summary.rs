//! The readable summary printed on stdout after a run.

use std::fmt::Write;

use blis_actors::RunOutput;
use blis_contracts::{EstimateRecord, RunResult};

/// The summary of a run: fates, latency estimates with their intervals over replications (or
/// replication 0's figures when there is one), throughput, prefix-cache hits and preemptions,
/// what was withheld and why, and the validity-domain flag.
pub fn render(output: &RunOutput) -> String {
    let r = &output.result;
    let f = &r.fates;
    let mut s = String::new();
    let engines: Vec<String> = r.engines.iter().map(|e| format!("{} {}", e.kind, e.version)).collect();
    let router = &r.scenario.resolved["router"];
    let router = match router["kind"].as_str() {
        Some("llm-d") => format!("llm-d-router {}", router["version"].as_str().unwrap_or_default()),
        _ => "round-robin".to_owned(),
    };
    let _ = writeln!(
        s,
        "seed {}, {} replication{}, engines: {}, router: {router}",
        r.seed,
        r.replications.len(),
        if r.replications.len() == 1 { "" } else { "s" },
        engines.join(", ")
    );
    let _ = write!(
        s,
        "fates (replication 0): {} calls = {} completed + {} dropped",
        f.arrivals, f.completed, f.dropped
    );
    if f.timed_out > 0 {
        let _ = write!(s, " + {} timed out", f.timed_out);
    }
    let _ =
        write!(s, " + {} in flight + {} queued at the horizon", f.in_flight_at_horizon, f.queued_at_horizon);
    if f.not_started > 0 {
        let _ = write!(s, " + {} not started", f.not_started);
    }
    s.push('\n');
    let reasons = &r.dropped_by_reason;
    if !reasons.is_empty() {
        let listed: Vec<String> = reasons.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
        let _ = writeln!(s, "dropped (replication 0): {}", listed.join(", "));
    }
    if f.arrivals > 0 && f.completed == 0 {
        let _ = writeln!(s, "no call completed: there is no latency figure to report");
    }
    if !r.estimates.is_empty() {
        latency_table(&mut s, r);
        let value = |name: &str| r.estimates.get(name).map(|e| with_interval(e, 1));
        let _ = writeln!(
            s,
            "throughput: {} output tokens/s, {} completed calls/s; makespan {} s; {} engine steps (replication 0)",
            value("output_tokens_per_s").unwrap_or_default(),
            value("requests_per_s").unwrap_or_default(),
            value("makespan_s").unwrap_or_default(),
            r.simulation.engine_steps
        );
        if let Some(goodput) = value("goodput_requests_per_s") {
            let _ = writeln!(s, "goodput: {goodput} completed calls/s meeting the SLOs");
        }
        if let Some(rate) = r.estimates.get("prefix_cache_hit_rate") {
            let _ = writeln!(s, "prefix cache: {} of prompt tokens hit", percent(rate));
        }
        if let Some(preemptions) = r.estimates.get("preemptions").filter(|e| e.mean > 0.0) {
            let _ = writeln!(s, "preemptions: {}", with_interval(preemptions, 1));
        }
    }
    if !r.coefficient_spread.is_empty() {
        let samples = r.coefficient_spread.values().map(|s| s.samples).max().unwrap_or(0);
        let _ =
            writeln!(s, "coefficient uncertainty (replication 0 rerun with {samples} calibrated samples):");
        for name in ["ttft_ms.mean", "tpot_ms.mean", "e2e_ms.mean", "e2e_ms.p99", "output_tokens_per_s"] {
            if let Some(spread) = r.coefficient_spread.get(name) {
                let _ = writeln!(
                    s,
                    "  {name:<20} {:.3} (from {:.3} to {:.3})",
                    spread.nominal, spread.min, spread.max
                );
            }
        }
    }
    for reason in &r.withheld {
        let _ = writeln!(s, "withheld: {reason}");
    }
    if !r.validity.in_domain {
        let _ = writeln!(s, "outside the validated domain: {}", r.validity.reasons.join("; "));
    }
    s
}

/// The latency estimates, one row per metric.
fn latency_table(s: &mut String, r: &RunResult) {
    let rows = [("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")];
    if !rows.iter().any(|(_, id)| r.estimates.contains_key(&format!("{id}.mean"))) {
        return;
    }
    let n = r.replications.len();
    let _ = writeln!(
        s,
        "{:<6} {:>18} {:>18} {:>18} {:>18}{}",
        "ms",
        "mean",
        "p50",
        "p90",
        "p99",
        if n > 1 { format!("   (95% intervals over {n} replications)") } else { String::new() }
    );
    for (label, id) in rows {
        let cell = |statistic: &str| {
            r.estimates
                .get(&format!("{id}.{statistic}"))
                .map_or_else(|| "-".to_owned(), |e| with_interval(e, 3))
        };
        let _ = writeln!(
            s,
            "{label:<6} {:>18} {:>18} {:>18} {:>18}",
            cell("mean"),
            cell("p50"),
            cell("p90"),
            cell("p99")
        );
    }
}

/// `mean ± half width` with `decimals` decimals.
fn with_interval(e: &EstimateRecord, decimals: usize) -> String {
    match e.half_width {
        Some(h) => format!("{:.*} ± {:.*}", decimals, e.mean, decimals, h),
        None => format!("{:.*}", decimals, e.mean),
    }
}

/// A fraction as a percentage with its interval.
fn percent(e: &EstimateRecord) -> String {
    match e.half_width {
        Some(h) => format!("{:.1}% ± {:.1}", e.mean * 100.0, h * 100.0),
        None => format!("{:.1}%", e.mean * 100.0),
    }
}

/// What llm-d's router config left without effect (always) and what upstream would log while
/// loading it (unless `quiet`), one line each, for stderr.
pub fn router_notes(output: &RunOutput, quiet: bool) -> Vec<String> {
    let router = &output.result.scenario.resolved["router"];
    let mut lines = Vec::new();
    for inert in router["inert"].as_array().into_iter().flatten() {
        lines.push(format!(
            "warning: {} is accepted but has no effect: {}",
            inert["path"].as_str().unwrap_or_default(),
            inert["reason"].as_str().unwrap_or_default()
        ));
    }
    if !quiet {
        for warning in router["warnings"].as_array().into_iter().flatten() {
            lines.push(format!("llm-d router: {}", warning.as_str().unwrap_or_default()));
        }
    }
    lines
}

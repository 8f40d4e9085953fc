//! The readable summary printed on stdout after a run.

use std::fmt::Write;

use blis_actors::RunOutput;
use blis_contracts::LatencySummary;

/// The summary of a run: fates, latency table, throughput, prefix-cache hits and preemptions.
pub fn render(output: &RunOutput) -> String {
    let r = &output.result;
    let f = &r.fates;
    let mut s = String::new();
    let engines: Vec<String> = r.engines.iter().map(|e| format!("{} {}", e.kind, e.version)).collect();
    let _ = writeln!(s, "seed {}, engines: {}", r.seed, engines.join(", "));
    let _ = write!(s, "fates: {} calls = {} completed + {} dropped", f.arrivals, f.completed, f.dropped);
    if f.timed_out > 0 {
        let _ = write!(s, " + {} timed out", f.timed_out);
    }
    let _ =
        write!(s, " + {} in flight + {} queued at the horizon", f.in_flight_at_horizon, f.queued_at_horizon);
    if f.not_started > 0 {
        let _ = write!(s, " + {} not started", f.not_started);
    }
    s.push('\n');
    let m = &r.metrics;
    let _ =
        writeln!(s, "{:<6} {:>10} {:>10} {:>10} {:>10} {:>9}", "ms", "mean", "p50", "p90", "p99", "samples");
    let mut row = |name: &str, l: &LatencySummary| {
        let _ = writeln!(
            s,
            "{name:<6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>9}",
            l.mean, l.p50, l.p90, l.p99, l.count
        );
    };
    row("TTFT", &m.ttft_ms);
    row("TPOT", &m.tpot_ms);
    row("ITL", &m.itl_ms);
    row("E2E", &m.e2e_ms);
    let _ = writeln!(
        s,
        "throughput: {:.1} output tokens/s, {:.2} requests/s over {:.1} s; {} engine steps",
        m.output_tokens_per_s, m.requests_per_s, m.span_s, r.simulation.engine_steps
    );
    let queries: u64 = r.instances.iter().map(|i| i.prefix_cache_queries).sum();
    let hits: u64 = r.instances.iter().map(|i| i.prefix_cache_hits).sum();
    let preemptions: u64 = r.instances.iter().map(|i| i.preemptions).sum();
    if queries > 0 {
        let rate = hits as f64 / queries as f64 * 100.0;
        let _ = writeln!(s, "prefix cache: {hits} of {queries} prompt tokens hit ({rate:.1}%)");
    }
    if preemptions > 0 {
        let _ = writeln!(s, "preemptions: {preemptions}");
    }
    s
}

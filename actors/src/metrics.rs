//! Metrics of a run, computed from the call records.
//!
//! Definitions (also in `docs/RESULT.md`): latencies over completed calls only; TTFT is the
//! client's send to the first token back; E2E the send to the last token; TPOT
//! `(E2E − TTFT) / (output − 1)` per call with at least two output tokens; ITL every gap between
//! consecutive tokens, pooled. Percentiles are nearest-rank. Throughput is over the span from the
//! first send to the last completion.

use blis_contracts::{CallRecord, Fate, LatencySummary, Metrics};

/// Summary of samples given in microseconds, reported in milliseconds.
pub fn summarise_us(mut samples: Vec<f64>) -> LatencySummary {
    if samples.is_empty() {
        return LatencySummary::default();
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let rank = |p: f64| samples[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1] / 1_000.0;
    LatencySummary {
        count: n as u64,
        mean: samples.iter().sum::<f64>() / n as f64 / 1_000.0,
        p50: rank(50.0),
        p90: rank(90.0),
        p99: rank(99.0),
    }
}

/// The metrics of a set of calls.
pub fn metrics(calls: &[CallRecord]) -> Metrics {
    let completed: Vec<&CallRecord> = calls.iter().filter(|c| c.fate == Fate::Completed).collect();
    let ttft = completed.iter().filter_map(|c| c.ttft_us()).map(|v| v as f64).collect();
    let e2e = completed.iter().filter_map(|c| c.e2e_us()).map(|v| v as f64).collect();
    let tpot = completed
        .iter()
        .filter(|c| c.token_latency_us.len() >= 2)
        .map(|c| c.token_latency_us[1..].iter().sum::<u64>() as f64 / (c.token_latency_us.len() - 1) as f64)
        .collect();
    let itl = completed.iter().flat_map(|c| c.token_latency_us[1..].iter().map(|&v| v as f64)).collect();
    let first_send = calls.iter().map(|c| c.arrival_us).min();
    let last_done = completed.iter().filter_map(|c| c.e2e_us().map(|e| c.arrival_us + e)).max();
    let span_s = match (first_send, last_done) {
        (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
        _ => 0.0,
    };
    let output_tokens: u64 = completed.iter().map(|c| u64::from(c.output_tokens)).sum();
    let per_s = |x: f64| if span_s > 0.0 { x / span_s } else { 0.0 };
    Metrics {
        ttft_ms: summarise_us(ttft),
        tpot_ms: summarise_us(tpot),
        itl_ms: summarise_us(itl),
        e2e_ms: summarise_us(e2e),
        output_tokens_per_s: per_s(output_tokens as f64),
        requests_per_s: per_s(completed.len() as f64),
        span_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let s = summarise_us((1..=10).map(|v| f64::from(v) * 1_000.0).collect());
        assert_eq!((s.count, s.mean, s.p50, s.p90, s.p99), (10, 5.5, 5.0, 9.0, 10.0));
        let one = summarise_us(vec![2_500.0]);
        assert_eq!((one.p50, one.p99), (2.5, 2.5));
        assert_eq!(summarise_us(Vec::new()).count, 0);
    }

    #[test]
    fn metrics_follow_their_definitions() {
        let call = |arrival_us, latency: Vec<u64>| CallRecord {
            request_id: "c-0".into(),
            request: "c-0".into(),
            node: "llm".into(),
            parents: Vec::new(),
            client: "c".into(),
            arrival_us,
            input_tokens: 10,
            output_tokens: latency.len() as u32,
            instance: "e".into(),
            cached_tokens: 0,
            preemptions: 0,
            fate: Fate::Completed,
            token_latency_us: latency,
            request_e2e_us: None,
        };
        let calls = vec![
            call(0, vec![100, 10, 30]),
            call(50, vec![200]),
            CallRecord {
                fate: Fate::Dropped { reason: "x".into() },
                token_latency_us: vec![],
                ..call(60, vec![])
            },
        ];
        let m = metrics(&calls);
        assert_eq!(m.ttft_ms.count, 2);
        assert_eq!(m.ttft_ms.mean, 0.15);
        assert_eq!((m.e2e_ms.p50, m.e2e_ms.p99), (0.14, 0.2));
        assert_eq!((m.tpot_ms.count, m.tpot_ms.mean), (1, 0.02));
        assert_eq!((m.itl_ms.count, m.itl_ms.p50, m.itl_ms.p99), (2, 0.01, 0.03));
        // Span: first send at 0 to the last completion at 250 µs.
        assert_eq!(m.span_s, 250e-6);
        assert!((m.output_tokens_per_s - 4.0 / 250e-6).abs() < 1e-6);
    }
}

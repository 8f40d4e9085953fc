//! One replication's figures, computed from its call records and instance counters as
//! `contracts::METRICS` defines them (also in `docs/METRICS.md`).
//!
//! Latencies cover completed calls of the measured window only. Percentiles are nearest-rank.
//! Throughput is over the span from the window's first send to its last completion.

use blis_contracts::{CallRecord, Fate, InstanceRecord, LatencySummary, Metrics, Slo};

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

/// Time per output token of a completed call, µs, if it has at least two tokens.
pub fn tpot_us(call: &CallRecord) -> Option<f64> {
    let gaps = call.token_latency_us.get(1..).filter(|g| !g.is_empty())?;
    Some(gaps.iter().sum::<u64>() as f64 / gaps.len() as f64)
}

/// Whether a completed call meets every objective of `slo`.
fn meets(call: &CallRecord, slo: &Slo) -> bool {
    let ttft_ok = slo.ttft_ms.is_none_or(|limit| call.ttft_us().is_some_and(|t| t as f64 / 1_000.0 <= limit));
    let tpot_ok = slo.tpot_ms.is_none_or(|limit| tpot_us(call).is_none_or(|t| t / 1_000.0 <= limit));
    ttft_ok && tpot_ok
}

/// The figures of `window` (the measured calls), with whole-run quantities from `all` and the
/// instances; latency summaries are left out when `withhold_latency`.
pub fn metrics(
    window: &[&CallRecord],
    all: &[CallRecord],
    instances: &[InstanceRecord],
    slo: Option<&Slo>,
    withhold_latency: bool,
) -> Metrics {
    let completed: Vec<&CallRecord> = window.iter().copied().filter(|c| c.fate == Fate::Completed).collect();
    // A figure with no samples is absent, never a summary of zeros.
    let summary = |values: Vec<f64>| (!withhold_latency && !values.is_empty()).then(|| summarise_us(values));
    let end = |c: &CallRecord| c.e2e_us().map(|e| c.arrival_us + e);
    let first_send = window.iter().map(|c| c.arrival_us).min();
    let last_done = completed.iter().filter_map(|c| end(c)).max();
    let span_s = match (first_send, last_done) {
        (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
        _ => 0.0,
    };
    let per_s = |x: f64| if span_s > 0.0 { x / span_s } else { 0.0 };
    let output_tokens: u64 = completed.iter().map(|c| u64::from(c.output_tokens)).sum();
    let makespan_s = match (
        all.iter().map(|c| c.arrival_us).min(),
        all.iter().filter(|c| c.fate == Fate::Completed).filter_map(end).max(),
    ) {
        (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
        _ => 0.0,
    };
    let queries: u64 = instances.iter().map(|i| i.prefix_cache_queries).sum();
    let hits: u64 = instances.iter().map(|i| i.prefix_cache_hits).sum();
    Metrics {
        ttft_ms: summary(completed.iter().filter_map(|c| c.ttft_us()).map(|v| v as f64).collect()),
        tpot_ms: summary(completed.iter().filter_map(|c| tpot_us(c)).collect()),
        itl_ms: summary(
            completed.iter().flat_map(|c| c.token_latency_us.iter().skip(1).map(|&v| v as f64)).collect(),
        ),
        e2e_ms: summary(completed.iter().filter_map(|c| c.e2e_us()).map(|v| v as f64).collect()),
        normalized_e2e_ms: summary(
            completed
                .iter()
                .filter_map(|c| c.e2e_us().map(|e| e as f64 / f64::from(c.output_tokens.max(1))))
                .collect(),
        ),
        request_e2e_ms: summary(window.iter().filter_map(|c| c.request_e2e_us).map(|v| v as f64).collect()),
        makespan_s,
        output_tokens_per_s: per_s(output_tokens as f64),
        requests_per_s: per_s(completed.len() as f64),
        goodput_requests_per_s: slo
            .map(|slo| per_s(completed.iter().filter(|c| meets(c, slo)).count() as f64)),
        prefix_cache_hit_rate: (queries > 0).then(|| hits as f64 / queries as f64),
        preemptions: instances.iter().map(|i| i.preemptions).sum(),
        kv_utilisation: if instances.is_empty() {
            0.0
        } else {
            instances.iter().map(|i| i.kv_usage_mean).sum::<f64>() / instances.len() as f64
        },
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

    fn call(arrival_us: u64, latency: Vec<u64>) -> CallRecord {
        CallRecord {
            replication: 0,
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
            settled_us: None,
            token_latency_us: latency,
            request_e2e_us: None,
        }
    }

    #[test]
    fn metrics_follow_their_definitions() {
        let calls = vec![
            call(0, vec![100, 10, 30]),
            CallRecord { request_e2e_us: Some(200), ..call(50, vec![200]) },
            CallRecord { fate: Fate::Dropped { reason: "x".into() }, ..call(60, vec![]) },
        ];
        let window: Vec<&CallRecord> = calls.iter().collect();
        let instance = InstanceRecord {
            prefix_cache_queries: 40,
            prefix_cache_hits: 10,
            preemptions: 3,
            kv_usage_mean: 0.5,
            ..InstanceRecord::default()
        };
        let slo = Slo { ttft_ms: Some(0.15), tpot_ms: None };
        let m = metrics(&window, &calls, &[instance], Some(&slo), false);
        let ttft = m.ttft_ms.unwrap();
        assert_eq!((ttft.count, ttft.mean), (2, 0.15));
        let e2e = m.e2e_ms.unwrap();
        assert_eq!((e2e.p50, e2e.p99), (0.14, 0.2));
        let tpot = m.tpot_ms.unwrap();
        assert_eq!((tpot.count, tpot.mean), (1, 0.02));
        let itl = m.itl_ms.unwrap();
        assert_eq!((itl.count, itl.p50, itl.p99), (2, 0.01, 0.03));
        // 140 µs over 3 tokens, 200 µs over 1.
        let normalized = m.normalized_e2e_ms.unwrap();
        assert!((normalized.mean - (140.0 / 3.0 + 200.0) / 2.0 / 1_000.0).abs() < 1e-12);
        assert_eq!(m.request_e2e_ms.unwrap().count, 1);
        // Span: first send at 0 to the last completion at 250 µs.
        assert_eq!((m.span_s, m.makespan_s), (250e-6, 250e-6));
        assert!((m.output_tokens_per_s - 4.0 / 250e-6).abs() < 1e-6);
        // Only the first call's 100 µs TTFT meets the 150 µs objective.
        assert!((m.goodput_requests_per_s.unwrap() - 1.0 / 250e-6).abs() < 1e-6);
        assert_eq!((m.prefix_cache_hit_rate, m.preemptions, m.kv_utilisation), (Some(0.25), 3, 0.5));
        let withheld = metrics(&window, &calls, &[], None, true);
        assert!(withheld.ttft_ms.is_none() && withheld.goodput_requests_per_s.is_none());
        assert_eq!(withheld.requests_per_s, m.requests_per_s, "throughput stays");
    }
}

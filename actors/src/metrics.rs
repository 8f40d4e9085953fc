//! One replication's figures, gathered from its call records as they settle and from its
//! instance counters, as `contracts::METRICS` defines them (also in `docs/METRICS.md`).
//!
//! Latencies cover completed calls of the measured window only. Means are exact; percentiles
//! are nearest-rank, read from a mergeable log-linear histogram: never below the exact value
//! and less than 1/1024 of it above (exact below 2,048 µs; fractional values such as TPOT are
//! rounded to whole µs first). Throughput is over the span from the window's first send to its
//! last completion.

use blis_contracts::{CallRecord, Fate, InstanceRecord, LatencySummary, Metrics, Slo};

use crate::stats::histogram::LatencyHistogram;
use crate::tally::SeriesCall;

/// Time per output token of a completed call, µs, if it has at least two tokens.
pub fn tpot_us(call: &CallRecord) -> Option<f64> {
    let gaps = call.token_latency_us.get(1..).filter(|g| !g.is_empty())?;
    Some(gaps.iter().sum::<u64>() as f64 / gaps.len() as f64)
}

/// Whether a completed call meets every objective of `slo`.
pub(crate) fn meets(call: &CallRecord, slo: &Slo) -> bool {
    let ttft_ok = slo.ttft_ms.is_none_or(|limit| call.ttft_us().is_some_and(|t| t as f64 / 1_000.0 <= limit));
    let tpot_ok = slo.tpot_ms.is_none_or(|limit| tpot_us(call).is_none_or(|t| t / 1_000.0 <= limit));
    ttft_ok && tpot_ok
}

/// One latency figure gathered value by value: a mergeable histogram for the percentiles (of
/// values rounded to whole µs) and the exact sum of the values for the mean.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    histogram: LatencyHistogram,
    sum_us: f64,
}

impl Summary {
    /// Record one value, µs.
    pub fn record(&mut self, value_us: f64) {
        self.histogram.record(value_us.round() as u64);
        self.sum_us += value_us;
    }

    /// Record whole-µs values in order: the same summary as recording each with
    /// [`Summary::record`], the mean's sum added in the same order.
    pub fn record_all_us(&mut self, values_us: &[u64]) {
        self.histogram.record_all(values_us);
        // While every partial sum is a whole number below 2^53, adding the values one by one
        // rounds nothing, so adding their total at once gives the same bits (and spares a chain
        // of dependent additions per value). A sum that is not such a number takes the chain.
        const EXACT_BELOW: f64 = 9_007_199_254_740_992.0;
        let whole =
            self.sum_us >= 0.0 && self.sum_us < EXACT_BELOW && (self.sum_us as u64) as f64 == self.sum_us;
        let total = values_us.iter().try_fold(0u64, |sum, &value| sum.checked_add(value));
        match total {
            Some(total) if whole && self.sum_us + (total as f64) < EXACT_BELOW => self.sum_us += total as f64,
            _ => {
                for &value in values_us {
                    self.sum_us += value as f64;
                }
            }
        }
    }

    /// Add every value of `other`.
    pub fn merge(&mut self, other: &Summary) {
        self.histogram.merge(&other.histogram);
        self.sum_us += other.sum_us;
    }

    /// The histogram of the values.
    pub fn histogram(&self) -> &LatencyHistogram {
        &self.histogram
    }

    /// Count, exact mean and histogram percentiles, in ms.
    pub fn summary(&self) -> LatencySummary {
        let n = self.histogram.count();
        if n == 0 {
            return LatencySummary::default();
        }
        let ms = |p: f64| self.histogram.value_at_percentile(p).map_or(0.0, |v| v as f64 / 1_000.0);
        LatencySummary {
            count: n,
            mean: self.sum_us / n as f64 / 1_000.0,
            p50: ms(50.0),
            p90: ms(90.0),
            p99: ms(99.0),
        }
    }
}

/// The figures of one measured window, gathered call by call as calls settle: nothing is kept
/// per call.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Time to first token of completed calls.
    pub ttft: Summary,
    /// Time per output token of completed calls with two tokens or more.
    pub tpot: Summary,
    /// Every gap between tokens of completed calls.
    pub itl: Summary,
    /// End to end of completed calls.
    pub e2e: Summary,
    /// End to end over output tokens of completed calls.
    pub normalized_e2e: Summary,
    /// Requests' end to end (on the call that ended each request).
    pub request_e2e: Summary,
    first_send_us: Option<u64>,
    last_done_us: Option<u64>,
    output_tokens: u64,
    completed: u64,
    good: u64,
}

impl Figures {
    /// Count one call of the window (`slo` decides goodput); `gaps` says whether its token gaps
    /// go into `itl` (a caller keeping them elsewhere passes false).
    pub fn add(&mut self, call: &CallRecord, slo: Option<&Slo>, gaps: bool) {
        self.first_send_us = Some(self.first_send_us.map_or(call.arrival_us, |t| t.min(call.arrival_us)));
        if let Some(e2e) = call.request_e2e_us {
            self.request_e2e.record(e2e as f64);
        }
        if call.fate != Fate::Completed {
            return;
        }
        self.completed += 1;
        self.output_tokens += u64::from(call.output_tokens);
        if slo.is_some_and(|slo| meets(call, slo)) {
            self.good += 1;
        }
        if let Some(ttft) = call.ttft_us() {
            self.ttft.record(ttft as f64);
        }
        if let Some(tpot) = tpot_us(call) {
            self.tpot.record(tpot);
        }
        if gaps && let Some(later) = call.token_latency_us.get(1..) {
            self.itl.record_all_us(later);
        }
        if let Some(e2e) = call.e2e_us() {
            self.e2e.record(e2e as f64);
            self.normalized_e2e.record(e2e as f64 / f64::from(call.output_tokens.max(1)));
            let done = call.arrival_us + e2e;
            self.last_done_us = Some(self.last_done_us.map_or(done, |t| t.max(done)));
        }
    }

    /// Count a window's completed calls kept as a series, the requests' end-to-end times and
    /// the window's first send (token gaps are counted apart, into `itl`).
    pub(crate) fn add_series(
        &mut self,
        calls: &[SeriesCall],
        request_e2e_us: impl Iterator<Item = u64>,
        first_send_us: Option<u64>,
    ) {
        self.first_send_us = first_send_us;
        for e2e in request_e2e_us {
            self.request_e2e.record(e2e as f64);
        }
        for call in calls {
            self.completed += 1;
            self.output_tokens += u64::from(call.output_tokens);
            self.good += u64::from(call.good);
            self.ttft.record(call.ttft_us as f64);
            if !call.tpot_us.is_nan() {
                self.tpot.record(call.tpot_us);
            }
            self.e2e.record(call.e2e_us as f64);
            self.normalized_e2e.record(call.e2e_us as f64 / f64::from(call.output_tokens.max(1)));
            let done = call.arrival_us + call.e2e_us;
            self.last_done_us = Some(self.last_done_us.map_or(done, |t| t.max(done)));
        }
    }

    /// The window's first send to its last completion, seconds.
    pub fn span_s(&self) -> f64 {
        match (self.first_send_us, self.last_done_us) {
            (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
            _ => 0.0,
        }
    }

    /// The figures, with `makespan_s` over the whole run and the instances' counters; latency
    /// summaries are left out when `withhold_latency`, and goodput without objectives.
    pub fn metrics(
        &self,
        makespan_s: f64,
        instances: &[InstanceRecord],
        slo: Option<&Slo>,
        withhold_latency: bool,
    ) -> Metrics {
        let span_s = self.span_s();
        let per_s = |x: f64| if span_s > 0.0 { x / span_s } else { 0.0 };
        // A figure with no samples is absent, never a summary of zeros.
        let summary = |s: &Summary| (!withhold_latency && s.histogram().count() > 0).then(|| s.summary());
        let queries: u64 = instances.iter().map(|i| i.prefix_cache_queries).sum();
        let hits: u64 = instances.iter().map(|i| i.prefix_cache_hits).sum();
        Metrics {
            ttft_ms: summary(&self.ttft),
            tpot_ms: summary(&self.tpot),
            itl_ms: summary(&self.itl),
            e2e_ms: summary(&self.e2e),
            normalized_e2e_ms: summary(&self.normalized_e2e),
            request_e2e_ms: summary(&self.request_e2e),
            makespan_s,
            output_tokens_per_s: per_s(self.output_tokens as f64),
            requests_per_s: per_s(self.completed as f64),
            goodput_requests_per_s: slo.map(|_| per_s(self.good as f64)),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_gaps_recorded_at_once_gives_the_summary_of_recording_each() {
        let gaps: Vec<u64> = (0..200u64).map(|i| (i * 7_919) % 40_013 + i % 3).collect();
        let mut each = Summary::default();
        each.record(1_234.0);
        gaps.iter().for_each(|&g| each.record(g as f64));
        let mut at_once = Summary::default();
        at_once.record(1_234.0);
        at_once.record_all_us(&gaps);
        assert_eq!(at_once.histogram(), each.histogram());
        assert_eq!(at_once.sum_us.to_bits(), each.sum_us.to_bits(), "the mean's sum in the same order");
        // A fractional sum rounds at each binade it crosses: the values one by one give
        // 4503599634076009, their total at once would give 4503599634076010.
        let (mut each, mut at_once) = (Summary::default(), Summary::default());
        each.record(4_503_599_627_370_494.5);
        at_once.record(4_503_599_627_370_494.5);
        [16, 6_705_499].iter().for_each(|&g| each.record(g as f64));
        at_once.record_all_us(&[16, 6_705_499]);
        assert_eq!(each.sum_us, 4_503_599_634_076_009.0);
        assert_eq!(at_once.sum_us.to_bits(), each.sum_us.to_bits(), "a fractional sum takes the chain");
    }

    proptest::proptest! {
        #[test]
        fn runs_recorded_at_once_keep_the_bits_of_the_sum_value_by_value(
            batches in proptest::collection::vec(
                (proptest::collection::vec(
                    proptest::prop_oneof![0u64..50_000, (1u64 << 52)..(1u64 << 54), proptest::num::u64::ANY],
                    0..20,
                ), proptest::option::of(proptest::prop_oneof![0.0f64..1e6, 1e9f64..1e15])),
                0..12,
            )
        ) {
            // Small gaps, gaps near 2^53 (where whole sums stop being exact) and any u64, with
            // fractional values recorded between the runs.
            let (mut each, mut at_once) = (Summary::default(), Summary::default());
            for (values, fractional) in &batches {
                values.iter().for_each(|&v| each.sum_us += v as f64);
                at_once.record_all_us(values);
                if let Some(x) = fractional {
                    each.sum_us += x;
                    at_once.sum_us += x;
                }
                proptest::prop_assert_eq!(at_once.sum_us.to_bits(), each.sum_us.to_bits());
            }
        }
    }

    #[test]
    fn percentiles_are_nearest_rank_within_the_histogram_precision() {
        let mut s = Summary::default();
        for v in 1..=10 {
            s.record(f64::from(v) * 1_000.0);
        }
        let summary = s.summary();
        assert_eq!((summary.count, summary.mean), (10, 5.5), "the mean is exact");
        // 1 ms is below 2,048 µs, so exact; 5 ms and 9 ms sit in buckets 4 and 8 µs wide.
        assert_eq!(s.histogram().value_at_percentile(10.0), Some(1_000));
        assert_eq!((summary.p50, summary.p90, summary.p99), (5.003, 9.007, 10.0));
        let mut one = Summary::default();
        one.record(2_500.0);
        assert_eq!((one.summary().p50, one.summary().p99), (2.5, 2.5), "capped at the maximum");
        assert_eq!(Summary::default().summary().count, 0);
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
            disaggregated: None,
        }
    }

    #[test]
    fn metrics_follow_their_definitions() {
        let calls = vec![
            call(0, vec![100, 10, 30]),
            CallRecord { request_e2e_us: Some(200), ..call(50, vec![200]) },
            CallRecord { fate: Fate::Dropped { reason: "x".into() }, ..call(60, vec![]) },
        ];
        let instance = InstanceRecord {
            prefix_cache_queries: 40,
            prefix_cache_hits: 10,
            preemptions: 3,
            kv_usage_mean: 0.5,
            ..InstanceRecord::default()
        };
        let slo = Slo { ttft_ms: Some(0.15), tpot_ms: None };
        let mut figures = Figures::default();
        for call in &calls {
            figures.add(call, Some(&slo), true);
        }
        let m = figures.metrics(250e-6, &[instance], Some(&slo), false);
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
        let withheld = figures.metrics(250e-6, &[], None, true);
        assert!(withheld.ttft_ms.is_none() && withheld.goodput_requests_per_s.is_none());
        assert_eq!(withheld.requests_per_s, m.requests_per_s, "throughput stays");
    }
}

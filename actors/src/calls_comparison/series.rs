//! The numbers `draw` plots, from a run's calls: a latency metric's empirical CDF, and
//! throughput or cumulative output over time (token and completion times as the client saw
//! them). Paired values for a scatter are [`super::pairs`].

use blis_contracts::{CallRecord, Fate};

use crate::metrics::tpot_us;

/// The latency metrics a CDF or a scatter can show (the registry's ids).
pub const LATENCIES: [&str; 6] =
    ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "normalized_e2e_ms", "request_e2e_ms"];

/// What a time series can show: the two throughputs per time bin, and the cumulative output
/// tokens.
pub const OVER_TIME: [&str; 3] = ["output_tokens_per_s", "requests_per_s", "output_tokens"];

/// Most points one drawn series keeps: a CDF is cut to evenly spaced ranks, a scatter to
/// evenly spaced pairs, so a million-call file still draws a small image.
pub const MAX_POINTS: usize = 2_000;

/// Every value of the latency metric `id` in `calls`, ms, sorted.
pub fn latencies(calls: &[CallRecord], id: &str) -> Vec<f64> {
    let ms = |us: f64| us / 1_000.0;
    let completed = calls.iter().filter(|c| c.fate == Fate::Completed);
    let mut values: Vec<f64> = match id {
        "ttft_ms" => completed.filter_map(|c| c.ttft_us()).map(|v| ms(v as f64)).collect(),
        "tpot_ms" => completed.filter_map(tpot_us).map(ms).collect(),
        "itl_ms" => {
            completed.flat_map(|c| c.token_latency_us.iter().skip(1)).map(|&v| ms(v as f64)).collect()
        }
        "e2e_ms" => completed.filter_map(|c| c.e2e_us()).map(|v| ms(v as f64)).collect(),
        "normalized_e2e_ms" => completed
            .filter_map(|c| c.e2e_us().map(|e| ms(e as f64) / f64::from(c.output_tokens.max(1))))
            .collect(),
        "request_e2e_ms" => calls.iter().filter_map(|c| c.request_e2e_us).map(|v| ms(v as f64)).collect(),
        _ => Vec::new(),
    };
    values.sort_by(f64::total_cmp);
    values
}

/// The empirical CDF of sorted `values`: (value, fraction of values at or below it), at most
/// [`MAX_POINTS`] of them (every rank when there are fewer, else evenly spaced ranks ending at
/// the largest).
pub fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let n = values.len();
    let step = n.div_ceil(MAX_POINTS).max(1);
    let mut points: Vec<(f64, f64)> =
        (0..n).step_by(step).map(|i| (values[i], (i + 1) as f64 / n as f64)).collect();
    if n > 0 && points.last().is_some_and(|p| p.1 < 1.0) {
        points.push((values[n - 1], 1.0));
    }
    points
}

/// At most [`MAX_POINTS`] of `pairs`, evenly spaced.
pub fn thin(pairs: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let step = pairs.len().div_ceil(MAX_POINTS).max(1);
    pairs.into_iter().step_by(step).collect()
}

/// The bin width, seconds, for a run of `span_s`: one second, or a fiftieth of a shorter run.
pub fn bin_width_s(span_s: f64) -> f64 {
    if span_s >= 50.0 { 1.0 } else { (span_s / 50.0).max(1e-3) }
}

/// `id` of [`OVER_TIME`] over time since `origin_us`: per bin of `bin_s` seconds (the bin's
/// middle, its rate) for a throughput, or after every token for the cumulative output (at most
/// [`MAX_POINTS`] steps).
pub fn over_time(calls: &[CallRecord], id: &str, origin_us: u64, bin_s: f64) -> Vec<(f64, f64)> {
    let completed = calls.iter().filter(|c| c.fate == Fate::Completed);
    let seconds = |us: u64| us.saturating_sub(origin_us) as f64 / 1e6;
    let mut times: Vec<f64> = match id {
        "requests_per_s" => completed.filter_map(|c| c.e2e_us().map(|e| seconds(c.arrival_us + e))).collect(),
        _ => completed
            .flat_map(|c| {
                c.token_latency_us.iter().scan(c.arrival_us, |at, gap| {
                    *at += gap;
                    Some(seconds(*at))
                })
            })
            .collect(),
    };
    times.sort_by(f64::total_cmp);
    if id == "output_tokens" {
        let counts: Vec<f64> = (1..=times.len()).map(|k| k as f64).collect();
        let pairs: Vec<(f64, f64)> = times.into_iter().zip(counts).collect();
        let mut points = thin(pairs.clone());
        if let Some(last) = pairs.last()
            && points.last() != Some(last)
        {
            points.push(*last);
        }
        return points;
    }
    let Some(&end) = times.last() else { return Vec::new() };
    let bins = (end / bin_s).floor() as usize + 1;
    let mut counts = vec![0u64; bins];
    for t in times {
        counts[((t / bin_s).floor() as usize).min(bins - 1)] += 1;
    }
    counts.iter().enumerate().map(|(k, &c)| ((k as f64 + 0.5) * bin_s, c as f64 / bin_s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(arrival_us: u64, latency: Vec<u64>) -> CallRecord {
        CallRecord {
            replication: 0,
            request_id: format!("r{arrival_us}"),
            request: format!("r{arrival_us}"),
            node: "llm".into(),
            parents: Vec::new(),
            client: "c".into(),
            arrival_us,
            input_tokens: 1,
            output_tokens: latency.len() as u32,
            instance: String::new(),
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
    fn cdfs_and_series_follow_the_clients_times() {
        let calls = vec![call(0, vec![300_000, 200_000]), call(1_000_000, vec![100_000])];
        assert_eq!(latencies(&calls, "ttft_ms"), [100.0, 300.0]);
        assert_eq!(cdf(&latencies(&calls, "ttft_ms")), [(100.0, 0.5), (300.0, 1.0)]);
        let big: Vec<f64> = (0..10_001).map(f64::from).collect();
        let thinned = cdf(&big);
        assert!(thinned.len() <= MAX_POINTS + 1 && thinned.last() == Some(&(10_000.0, 1.0)));
        // Tokens at 0.3 s, 0.5 s and 1.1 s; bins of 0.5 s: [0, 0.5) holds one, [0.5, 1) one, [1, 1.5) one.
        assert_eq!(over_time(&calls, "output_tokens_per_s", 0, 0.5), [(0.25, 2.0), (0.75, 2.0), (1.25, 2.0)]);
        assert_eq!(over_time(&calls, "output_tokens", 0, 0.5), [(0.3, 1.0), (0.5, 2.0), (1.1, 3.0)]);
        assert_eq!(over_time(&calls, "requests_per_s", 0, 1.0), [(0.5, 1.0), (1.5, 1.0)]);
        assert_eq!((bin_width_s(200.0), bin_width_s(10.0)), (1.0, 0.2));
    }
}

//! A replication's account of its calls, kept as they settle so that nothing is held per call
//! beyond what a figure needs.
//!
//! Every record passes through [`Tally::add`] once, in `calls.jsonl` order. Fates, the makespan
//! and the backlog counts for the overload assessment are kept for every run. When the measured
//! window is known in advance (no warm-up, or a fixed one) the figures are gathered at once and
//! nothing is kept per call. When it is not — an MSER-5 warm-up, chosen from the whole TTFT
//! series in send order, and the batch means of a steady-state run — each completed call keeps
//! a [`SeriesCall`] (48 bytes) and its token gaps go to the ITL histogram of its slice of send
//! times (at most [`ITL_SLICES`] slices); the window's ITL figure then covers the slices that
//! start at or after the cut.

use blis_contracts::{CallRecord, Fate, FateCounts, Metrics, RunKind, Slo, WarmUp};

use crate::metrics::{Figures, Summary, meets, tpot_us};
use crate::stats::histogram::LatencyHistogram;

/// Most time buckets of sends and settlements kept for the backlog; beyond, neighbours merge.
const BACKLOG_BUCKETS: usize = 1 << 15;

/// Most send-time slices of ITL histograms kept for a window chosen at the end.
pub const ITL_SLICES: usize = 64;

/// Sends and ends of waiting (the first token, or a refusal or abandonment) counted per bucket
/// of simulated time, buckets `2^shift` µs wide; and, by send time, the calls served and the
/// calls abandoned, for the overload rule.
#[derive(Clone, Debug, Default)]
struct BacklogCounts {
    shift: u32,
    sent: Vec<u32>,
    settled: Vec<u32>,
    served: Vec<u32>,
    abandoned: Vec<u32>,
}

impl BacklogCounts {
    /// The bucket of `at_us`, widening the buckets until it fits.
    fn bucket(&mut self, at_us: u64) -> usize {
        while (at_us >> self.shift) as usize >= BACKLOG_BUCKETS {
            self.shift += 1;
            for counts in [&mut self.sent, &mut self.settled, &mut self.served, &mut self.abandoned] {
                // Merged pairwise in place, so the buffer keeps its capacity for the buckets to
                // come instead of being regrown from half.
                let merged = counts.len().div_ceil(2);
                for i in 0..merged {
                    counts[i] = counts[2 * i] + counts.get(2 * i + 1).copied().unwrap_or(0);
                }
                counts.truncate(merged);
            }
        }
        let index = (at_us >> self.shift) as usize;
        if index >= self.sent.len() {
            for counts in [&mut self.sent, &mut self.settled, &mut self.served, &mut self.abandoned] {
                counts.resize(index + 1, 0);
            }
        }
        index
    }

    /// One call sent at `sent_us` that stopped waiting at `waited_until_us` (none: still
    /// waiting at the end), with its fate.
    fn add(&mut self, sent_us: u64, waited_until_us: Option<u64>, fate: &Fate) {
        let sent = self.bucket(sent_us);
        self.sent[sent] += 1;
        match fate {
            Fate::Completed => self.served[sent] += 1,
            Fate::TimedOut => self.abandoned[sent] += 1,
            _ => {}
        }
        if let Some(until) = waited_until_us {
            let until = self.bucket(until);
            self.settled[until] += 1;
        }
    }

    /// Of the calls sent from `from_us` to `to_us` that were served or abandoned, the share
    /// abandoned (over whole buckets); absent when none was abandoned.
    fn abandoned_share(&self, from_us: u64, to_us: u64) -> Option<f64> {
        let first = ((from_us >> self.shift) as usize).min(self.sent.len());
        let last = (((to_us >> self.shift) + 1) as usize).min(self.sent.len());
        let sum = |counts: &[u32]| counts[first..last.max(first)].iter().map(|&c| u64::from(c)).sum::<u64>();
        let (served, abandoned) = (sum(&self.served), sum(&self.abandoned));
        (abandoned > 0).then(|| abandoned as f64 / (served + abandoned) as f64)
    }

    /// Calls sent and not settled at `t_us`, counting the buckets that start by then (so the
    /// last arrival is counted at the last sample).
    fn backlog_at(&self, t_us: u64) -> i64 {
        let whole = (((t_us >> self.shift) + 1) as usize).min(self.sent.len());
        self.sent[..whole].iter().map(|&c| i64::from(c)).sum::<i64>()
            - self.settled[..whole].iter().map(|&c| i64::from(c)).sum::<i64>()
    }
}

/// What a completed call keeps when the window is chosen at the end.
#[derive(Clone, Copy, Debug)]
pub struct SeriesCall {
    /// When it was sent, µs.
    pub arrival_us: u64,
    /// Time to first token, µs.
    pub ttft_us: u64,
    /// End to end, µs.
    pub e2e_us: u64,
    /// Time per output token, µs (NaN with fewer than two tokens).
    pub tpot_us: f64,
    /// Output tokens.
    pub output_tokens: u32,
    /// Whether it met the objectives.
    pub good: bool,
}

/// Completed calls in a series, with the requests' end-to-end times and ITL slices.
#[derive(Clone, Debug, Default)]
struct Series {
    calls: Vec<SeriesCall>,
    /// (send time, the request's end to end) on the call that ended a request.
    request_e2e: Vec<(u64, u64)>,
    /// Send-time slices `2^shift` µs wide, each with its calls' token gaps.
    itl_shift: u32,
    itl: Vec<Summary>,
    first_send_us: Option<u64>,
}

impl Series {
    fn itl_slice(&mut self, arrival_us: u64) -> &mut Summary {
        while (arrival_us >> self.itl_shift) as usize >= ITL_SLICES {
            self.itl_shift += 1;
            let slices = std::mem::take(&mut self.itl);
            self.itl = slices
                .chunks(2)
                .map(|pair| {
                    let mut merged = pair[0].clone();
                    if let Some(second) = pair.get(1) {
                        merged.merge(second);
                    }
                    merged
                })
                .collect();
        }
        let index = (arrival_us >> self.itl_shift) as usize;
        if index >= self.itl.len() {
            self.itl.resize(index + 1, Summary::default());
        }
        &mut self.itl[index]
    }
}

/// A replication's calls, accounted as they settle.
#[derive(Clone, Debug)]
pub struct Tally {
    slo: Option<blis_contracts::Slo>,
    warm_up: WarmUp,
    fates: FateCounts,
    dropped_by_reason: std::collections::BTreeMap<String, u64>,
    backlog: BacklogCounts,
    first_arrival_us: Option<u64>,
    last_completion_us: Option<u64>,
    /// The window's figures, when the window is known in advance.
    figures: Figures,
    /// The completed calls' series, when the window is chosen at the end.
    series: Option<Series>,
}

/// A window's figures and where it starts.
pub struct Window {
    /// Calls sent before this were warm-up, µs.
    pub from_us: u64,
    /// Its figures.
    pub figures: Figures,
    /// Its completed calls in send order, when the run kept them.
    pub series: Vec<SeriesCall>,
}

impl Tally {
    /// An empty account for a run of `kind` with `warm_up` and objectives `slo`.
    pub fn new(kind: RunKind, warm_up: WarmUp, slo: Option<Slo>) -> Tally {
        let keep_series = kind == RunKind::SteadyState || warm_up == WarmUp::Mser5;
        Tally {
            slo,
            warm_up,
            fates: FateCounts::default(),
            dropped_by_reason: Default::default(),
            backlog: BacklogCounts::default(),
            first_arrival_us: None,
            last_completion_us: None,
            figures: Figures::default(),
            series: keep_series.then(Series::default),
        }
    }

    /// Account for one call.
    pub fn add(&mut self, call: &CallRecord) {
        self.fates.count(&call.fate);
        if let Fate::Dropped { reason } = &call.fate {
            *self.dropped_by_reason.entry(reason.clone()).or_default() += 1;
        }
        self.first_arrival_us =
            Some(self.first_arrival_us.map_or(call.arrival_us, |t| t.min(call.arrival_us)));
        if call.fate != Fate::NotStarted {
            // A call waits from when it is sent until its first token reaches the client, or
            // until it is refused or abandoned; one unanswered at the end waits to the end.
            let served = call.ttft_us().map(|t| call.arrival_us + t);
            self.backlog.add(call.arrival_us, served.or(call.settled_us), &call.fate);
        }
        if let Some(done) =
            call.e2e_us().filter(|_| call.fate == Fate::Completed).map(|e| call.arrival_us + e)
        {
            self.last_completion_us = Some(self.last_completion_us.map_or(done, |t| t.max(done)));
        }
        let slo = self.slo;
        match &mut self.series {
            None => {
                if let WarmUp::Fixed { seconds } = self.warm_up
                    && call.arrival_us < fixed_cut_us(seconds)
                {
                    return;
                }
                self.figures.add(call, slo.as_ref(), true);
            }
            Some(series) => {
                // The first send of the window, as far as the cut is known now (an MSER-5 cut
                // falls on a completed call's send, so it is that call's).
                let known_cut = match self.warm_up {
                    WarmUp::Fixed { seconds } => fixed_cut_us(seconds),
                    WarmUp::None | WarmUp::Mser5 => 0,
                };
                if call.arrival_us >= known_cut {
                    series.first_send_us =
                        Some(series.first_send_us.map_or(call.arrival_us, |t| t.min(call.arrival_us)));
                }
                if let Some(e2e) = call.request_e2e_us {
                    series.request_e2e.push((call.arrival_us, e2e));
                }
                if call.fate != Fate::Completed {
                    return;
                }
                let (Some(ttft_us), Some(e2e_us)) = (call.ttft_us(), call.e2e_us()) else { return };
                let later = call.token_latency_us.get(1..).unwrap_or_default();
                series.itl_slice(call.arrival_us).record_all_us(later);
                series.calls.push(SeriesCall {
                    arrival_us: call.arrival_us,
                    ttft_us,
                    e2e_us,
                    tpot_us: tpot_us(call).unwrap_or(f64::NAN),
                    output_tokens: call.output_tokens,
                    good: slo.as_ref().is_some_and(|slo| meets(call, slo)),
                });
            }
        }
    }

    /// Every call's fate.
    pub fn fates(&self) -> FateCounts {
        self.fates
    }

    /// The dropped calls by reason.
    pub fn dropped_by_reason(&self) -> &std::collections::BTreeMap<String, u64> {
        &self.dropped_by_reason
    }

    /// The first send to the last completion over the whole run, seconds.
    pub fn makespan_s(&self) -> f64 {
        match (self.first_arrival_us, self.last_completion_us) {
            (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
            _ => 0.0,
        }
    }

    /// Of the calls sent in the second half of the offered load (until `last_arrival_us`) and
    /// served or abandoned, the share abandoned; absent when none was abandoned.
    pub fn abandoned_share(&self, last_arrival_us: u64) -> Option<f64> {
        self.backlog.abandoned_share(last_arrival_us / 2, last_arrival_us)
    }

    /// The backlog (calls sent and still waiting for a first token) at each of `points` evenly spaced times up
    /// to `until_us`, as (seconds, calls); each is counted over the time buckets that start by
    /// then (buckets are at most 1/16,384 of the run wide).
    pub fn backlog_samples(&self, until_us: u64, points: usize) -> Vec<(f64, f64)> {
        (1..=points)
            .map(|k| {
                let t = until_us as f64 * k as f64 / points as f64;
                (t / 1e6, self.backlog.backlog_at(t.floor() as u64) as f64)
            })
            .collect()
    }

    /// The measured window: its start (from `cut`, given the completed calls' TTFT series in
    /// send order, when it is chosen at the end) and its figures.
    pub fn window(&self, cut: impl FnOnce(&[(u64, f64)]) -> u64) -> Window {
        let Some(series) = &self.series else {
            let from_us = match self.warm_up {
                WarmUp::Fixed { seconds } => fixed_cut_us(seconds),
                WarmUp::None | WarmUp::Mser5 => 0,
            };
            return Window { from_us, figures: self.figures.clone(), series: Vec::new() };
        };
        let mut calls = series.calls.clone();
        calls.sort_by_key(|c| c.arrival_us);
        let from_us = match self.warm_up {
            WarmUp::None => 0,
            WarmUp::Fixed { seconds } => fixed_cut_us(seconds),
            WarmUp::Mser5 => {
                let ttft: Vec<(u64, f64)> = calls.iter().map(|c| (c.arrival_us, c.ttft_us as f64)).collect();
                cut(&ttft)
            }
        };
        calls.retain(|c| c.arrival_us >= from_us);
        let mut figures = Figures::default();
        let first_send_us =
            if from_us > 0 && self.warm_up == WarmUp::Mser5 { Some(from_us) } else { series.first_send_us };
        figures.add_series(
            &calls,
            series.request_e2e.iter().filter(|&&(at, _)| at >= from_us).map(|&(_, e2e)| e2e),
            first_send_us,
        );
        let first_slice = from_us.div_ceil(1 << series.itl_shift) as usize;
        for slice in series.itl.iter().skip(first_slice) {
            figures.itl.merge(slice);
        }
        Window { from_us, figures, series: calls }
    }

    /// The window's figures as the Result reports them.
    pub fn metrics(
        window: &Window,
        makespan_s: f64,
        instances: &[blis_contracts::InstanceRecord],
        slo: Option<&Slo>,
        withhold: bool,
    ) -> Metrics {
        window.figures.metrics(makespan_s, instances, slo, withhold)
    }

    /// Mergeable histograms of the window's latencies, µs.
    pub fn histograms(window: &Window) -> serde_json::Value {
        let f = &window.figures;
        let json = |h: &LatencyHistogram| serde_json::to_value(h).expect("histograms serialise");
        serde_json::json!({
            "ttft_us": json(f.ttft.histogram()),
            "tpot_us": json(f.tpot.histogram()),
            "itl_us": json(f.itl.histogram()),
            "e2e_us": json(f.e2e.histogram()),
        })
    }
}

/// The first µs of a fixed warm-up of `seconds` that is measured.
fn fixed_cut_us(seconds: f64) -> u64 {
    (seconds * 1e6).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_counts_sends_and_settlements_by_bucket_and_widens_without_losing_any() {
        let mut counts = BacklogCounts::default();
        counts.add(10, Some(20), &Fate::Completed);
        counts.add(15, None, &Fate::QueuedAtHorizon);
        assert_eq!((counts.backlog_at(9), counts.backlog_at(10), counts.backlog_at(15)), (0, 1, 2));
        assert_eq!(counts.backlog_at(20), 1, "settled at 20");
        // A time past the last bucket widens every bucket: the totals stay.
        counts.add(1 << 20, Some((1 << 20) + 1), &Fate::TimedOut);
        assert!(counts.shift > 0);
        assert_eq!(counts.sent.iter().sum::<u32>(), 3);
        assert_eq!(counts.settled.iter().sum::<u32>(), 2);
        assert_eq!(counts.backlog_at(u64::MAX >> 1), 1, "one call never settled");
        // Served and abandoned by send time: of the calls sent from 2^19 on, one abandoned.
        assert_eq!(counts.abandoned_share(1 << 19, 1 << 21), Some(1.0));
        assert_eq!(counts.abandoned_share(0, 1 << 21), Some(0.5));
        assert_eq!(counts.abandoned_share(0, 100), None);
    }

    /// Widening merges neighbouring buckets pairwise, an odd last bucket alone.
    #[test]
    fn widening_merges_neighbouring_buckets() {
        let mut counts = BacklogCounts::default();
        for at_us in [1, 2, 3, 4] {
            counts.add(at_us, None, &Fate::QueuedAtHorizon);
        }
        assert_eq!(counts.sent, [0, 1, 1, 1, 1]);
        counts.add(BACKLOG_BUCKETS as u64, None, &Fate::QueuedAtHorizon);
        assert_eq!(counts.shift, 1);
        assert_eq!((counts.sent.len(), &counts.sent[..4]), (BACKLOG_BUCKETS / 2 + 1, &[1, 2, 1, 0][..]));
    }

    #[test]
    fn a_window_known_in_advance_keeps_nothing_per_call_and_a_fixed_warm_up_is_cut() {
        let call = |arrival_us: u64, gaps: Vec<u64>| CallRecord {
            replication: 0,
            request_id: format!("c-{arrival_us}"),
            request: format!("c-{arrival_us}"),
            node: "llm".into(),
            parents: Vec::new(),
            client: "c".into(),
            arrival_us,
            input_tokens: 4,
            output_tokens: gaps.len() as u32,
            instance: "e".into(),
            cached_tokens: 0,
            preemptions: 0,
            fate: Fate::Completed,
            settled_us: Some(arrival_us + gaps.iter().sum::<u64>()),
            token_latency_us: gaps,
            request_e2e_us: None,
            disaggregated: None,
        };
        let mut tally = Tally::new(RunKind::Terminating, WarmUp::Fixed { seconds: 1.0 }, None);
        tally.add(&call(500_000, vec![100, 10]));
        tally.add(&call(1_000_000, vec![200, 20, 30]));
        assert!(tally.series.is_none());
        let window = tally.window(|_| unreachable!("the cut is fixed"));
        assert_eq!(window.from_us, 1_000_000);
        let m = Tally::metrics(&window, tally.makespan_s(), &[], None, false);
        assert_eq!((m.ttft_ms.unwrap().count, m.itl_ms.unwrap().count), (1, 2));
        assert_eq!(tally.fates().completed, 2);
        assert_eq!(tally.makespan_s(), (1_000_250 - 500_000) as f64 / 1e6);
    }

    #[test]
    fn a_window_chosen_at_the_end_cuts_the_series_and_the_itl_slices_after_the_cut() {
        let mut tally = Tally::new(RunKind::SteadyState, WarmUp::Mser5, None);
        for k in 0..200u64 {
            let record = CallRecord {
                replication: 0,
                request_id: format!("c-{k}"),
                request: format!("c-{k}"),
                node: "llm".into(),
                parents: Vec::new(),
                client: "c".into(),
                arrival_us: k * 1_000,
                input_tokens: 4,
                output_tokens: 2,
                instance: "e".into(),
                cached_tokens: 0,
                preemptions: 0,
                fate: Fate::Completed,
                settled_us: Some(k * 1_000 + 50),
                token_latency_us: vec![40, 10],
                request_e2e_us: None,
                disaggregated: None,
            };
            tally.add(&record);
        }
        // Cut at the call sent at 100 ms: 100 calls stay, and the ITL slices that start at or
        // after it.
        let window = tally.window(|series| {
            assert_eq!(series.len(), 200);
            series[100].0
        });
        assert_eq!((window.from_us, window.series.len()), (100_000, 100));
        let itl = window.figures.itl.summary();
        assert!(itl.count <= 100 && itl.count > 0, "{}", itl.count);
        assert_eq!(window.figures.ttft.summary().count, 100);
    }
}

//! Runs side by side, real or simulated: `calls.jsonl` files (or an inference-perf summary as
//! the reference) compared metric by metric under the metric registry's definitions, and, call
//! by call, on the latencies both runs measured for the same calls.
//!
//! The first run is the reference. Each run's figures come from its calls through the same
//! [`Figures`] the simulator reports with (the whole file is the window: no warm-up is cut);
//! each run's mean and percentiles carry their signed relative error against the reference's,
//! `(run − reference) / reference`. Before any figure, the runs must describe the same work
//! ([`same_work`]) and be served alike ([`CallsHeader::serving_difference`]).

mod aggregate;
mod same_work;
pub mod series;

use std::collections::BTreeMap;

use blis_contracts::{CallRecord, CallsFile, CallsHeader, Fate, FieldError, metric};
use serde::Serialize;

use crate::metrics::{Figures, Summary, tpot_us};

pub use aggregate::{AggregateReference, is_inference_perf_summary};
pub use same_work::same_work;

/// The registry's metrics a comparison reports, in its order: the latencies (mean and
/// percentiles) then the run-wide values.
pub const COMPARED: [&str; 9] = [
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
    "normalized_e2e_ms",
    "request_e2e_ms",
    "makespan_s",
    "output_tokens_per_s",
    "requests_per_s",
];

/// The percentiles reported unless others are asked for.
pub const DEFAULT_PERCENTILES: [f64; 3] = [50.0, 95.0, 99.0];

/// One run to compare: its name and what it holds.
#[derive(Clone, Debug)]
pub enum Run {
    /// A `calls.jsonl` (simulated or real).
    Calls(CallsFile),
    /// An inference-perf summary: statistics only (the reference only).
    Aggregate(AggregateReference),
}

/// One statistic of one metric in every run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The registry's metric id.
    pub metric: &'static str,
    /// `mean`, `p50`, …, or `value` for a run-wide metric.
    pub statistic: String,
    /// The registry's unit.
    pub unit: &'static str,
    /// Per run, in the order given: the value (absent if the run has none) and its signed
    /// relative error against the reference (absent for the reference, or when either value is
    /// missing or the reference's is 0).
    pub values: Vec<(Option<f64>, Option<f64>)>,
}

/// Paired errors of one run against the reference on one metric, over the calls (requests, for
/// `request_e2e_ms`; token gaps, for `itl_ms`) both completed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairedErrors {
    /// The run's name.
    pub run: String,
    /// The registry's metric id.
    pub metric: &'static str,
    /// Pairs compared.
    pub pairs: usize,
    /// Mean absolute error, in the metric's unit.
    pub mae: f64,
    /// Mean signed error (run − reference), in the metric's unit.
    pub bias: f64,
    /// Mean absolute percentage error over pairs whose reference is not 0, %.
    pub mape_percent: Option<f64>,
    /// Weighted absolute percentage error, Σ|run − reference| / Σ|reference|, %.
    pub wape_percent: Option<f64>,
}

/// A whole comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The runs' names, the reference first.
    pub runs: Vec<String>,
    /// The percentiles reported.
    pub percentiles: Vec<f64>,
    /// Every statistic of every compared metric.
    pub rows: Vec<Row>,
    /// Paired errors of every other run against the reference (none for an aggregate
    /// reference: it holds no calls).
    pub paired: Vec<PairedErrors>,
    /// What could not be compared, for a person.
    pub notes: Vec<String>,
}

/// Compare `runs` (name, run; the first is the reference) on `percentiles`; refuses fewer than
/// two runs, an aggregate anywhere but first, percentiles outside (0, 100], runs of different
/// work or served differently, naming the first difference.
pub fn compare_runs(runs: &[(String, Run)], percentiles: &[f64]) -> Result<Comparison, FieldError> {
    if runs.len() < 2 {
        return Err(FieldError::new(
            "runs",
            runs.len(),
            "a comparison needs a reference and at least one run",
        ));
    }
    for (i, p) in percentiles.iter().enumerate() {
        if !(*p > 0.0 && *p <= 100.0) {
            return Err(FieldError::new(format!("--percentiles[{i}]"), p, "a percentile is in (0, 100]"));
        }
    }
    check_runs(runs)?;
    let mut notes = Vec::new();
    let (reference_name, reference) = &runs[0];
    if let Run::Aggregate(aggregate) = reference {
        notes.push(format!(
            "{reference_name} is an aggregate (inference-perf summary): it is compared on the statistics it holds, without checking that the runs did the same work and without paired errors"
        ));
        notes.extend(aggregate.notes.iter().cloned());
    }
    let stats: Vec<RunFigures> = runs
        .iter()
        .map(|(_, run)| match run {
            Run::Calls(file) => RunFigures::Calls(Box::new(CallFigures::of(&file.calls))),
            Run::Aggregate(aggregate) => RunFigures::Aggregate(aggregate.clone()),
        })
        .collect();
    let mut rows = Vec::new();
    for id in COMPARED {
        let unit = metric(id).map_or("", |m| m.unit);
        let statistics: Vec<String> = if is_latency(id) {
            std::iter::once("mean".to_owned())
                .chain(percentiles.iter().map(|p| percentile_name(*p)))
                .collect()
        } else {
            vec!["value".to_owned()]
        };
        for statistic in statistics {
            let raw: Vec<Option<f64>> = stats.iter().map(|s| s.value(id, &statistic)).collect();
            let reference_value = raw[0];
            let values = raw
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    let error = match (k, reference_value, v) {
                        (0, ..) => None,
                        (_, Some(r), Some(v)) if r != 0.0 => Some((v - r) / r),
                        _ => None,
                    };
                    (*v, error)
                })
                .collect();
            rows.push(Row { metric: id, statistic, unit, values });
        }
    }
    let mut paired = Vec::new();
    if let Run::Calls(reference) = reference {
        for (name, run) in &runs[1..] {
            if let Run::Calls(file) = run {
                paired.extend(paired_errors(name, &reference.calls, &file.calls));
            }
        }
    }
    Ok(Comparison {
        runs: runs.iter().map(|(name, _)| name.clone()).collect(),
        percentiles: percentiles.to_vec(),
        rows,
        paired,
        notes,
    })
}

/// Refuse runs after the first that are aggregates, or (against a reference of calls) that did
/// other work or were served otherwise, naming the first difference.
pub fn check_runs(runs: &[(String, Run)]) -> Result<(), FieldError> {
    let Some((reference_name, reference)) = runs.first() else { return Ok(()) };
    for (name, run) in &runs[1..] {
        let Run::Calls(file) = run else {
            return Err(FieldError::at(
                name.as_str(),
                "an inference-perf summary holds no calls: it can only be the reference (the first run)",
            ));
        };
        if let Run::Calls(reference) = reference {
            check_serving(reference_name, &reference.header, name, &file.header)?;
            same_work(reference_name, &reference.calls, name, &file.calls)?;
        }
    }
    Ok(())
}

/// Refuse `other` served on other hardware, model or settings than the reference.
fn check_serving(
    reference_name: &str,
    reference: &CallsHeader,
    name: &str,
    other: &CallsHeader,
) -> Result<(), FieldError> {
    match reference.serving_difference(other) {
        None => Ok(()),
        Some((path, ours, theirs)) => Err(FieldError::new(
            format!("{name}:1.{path}"),
            theirs,
            format!(
                "the reference {reference_name} has {ours}: runs served with other settings are not compared"
            ),
        )),
    }
}

/// Whether `id` is a latency (mean and percentiles) rather than a run-wide value.
fn is_latency(id: &str) -> bool {
    id.ends_with("_ms")
}

/// `p50`, `p99.9`.
fn percentile_name(p: f64) -> String {
    format!("p{p}")
}

/// A run's figures, from calls or from an aggregate.
enum RunFigures {
    Calls(Box<CallFigures>),
    Aggregate(AggregateReference),
}

impl RunFigures {
    fn value(&self, id: &str, statistic: &str) -> Option<f64> {
        match self {
            RunFigures::Calls(figures) => figures.value(id, statistic),
            RunFigures::Aggregate(aggregate) => aggregate.value(id, statistic),
        }
    }
}

/// The registry's figures of one file of calls.
struct CallFigures {
    figures: Figures,
    makespan_s: f64,
}

impl CallFigures {
    fn of(calls: &[CallRecord]) -> CallFigures {
        let mut figures = Figures::default();
        for call in calls {
            figures.add(call, None, true);
        }
        let first_send = calls.iter().map(|c| c.arrival_us).min();
        let last_done = calls.iter().filter_map(|c| c.e2e_us().map(|e| c.arrival_us + e)).max();
        let makespan_s = match (first_send, last_done) {
            (Some(start), Some(end)) if end > start => (end - start) as f64 / 1e6,
            _ => 0.0,
        };
        CallFigures { figures, makespan_s }
    }

    fn summary(&self, id: &str) -> Option<&Summary> {
        let f = &self.figures;
        Some(match id {
            "ttft_ms" => &f.ttft,
            "tpot_ms" => &f.tpot,
            "itl_ms" => &f.itl,
            "e2e_ms" => &f.e2e,
            "normalized_e2e_ms" => &f.normalized_e2e,
            "request_e2e_ms" => &f.request_e2e,
            _ => return None,
        })
    }

    fn value(&self, id: &str, statistic: &str) -> Option<f64> {
        if let Some(summary) = self.summary(id) {
            let histogram = summary.histogram();
            if histogram.count() == 0 {
                return None;
            }
            return match statistic.strip_prefix('p').and_then(|p| p.parse::<f64>().ok()) {
                Some(p) => histogram.value_at_percentile(p).map(|us| us as f64 / 1_000.0),
                None => Some(summary.summary().mean),
            };
        }
        let metrics = self.figures.metrics(self.makespan_s, &[], None, false);
        match id {
            "makespan_s" => Some(metrics.makespan_s),
            "output_tokens_per_s" => Some(metrics.output_tokens_per_s),
            "requests_per_s" => Some(metrics.requests_per_s),
            _ => None,
        }
    }
}

/// Per call (or request, or gap) of both runs, the reference's and the run's value, ms, for the
/// latency metric `id`.
pub fn pairs(id: &str, reference: &[CallRecord], run: &[CallRecord]) -> Vec<(f64, f64)> {
    let by_id = |calls: &[CallRecord]| -> BTreeMap<String, CallRecord> {
        calls
            .iter()
            .filter(|c| c.fate == Fate::Completed)
            .map(|c| (c.request_id.clone(), c.clone()))
            .collect()
    };
    let ms = |us: f64| us / 1_000.0;
    if id == "request_e2e_ms" {
        let ends = |calls: &[CallRecord]| -> BTreeMap<String, u64> {
            calls.iter().filter_map(|c| c.request_e2e_us.map(|e| (c.request.clone(), e))).collect()
        };
        let theirs = ends(run);
        return ends(reference)
            .iter()
            .filter_map(|(request, r)| theirs.get(request).map(|o| (ms(*r as f64), ms(*o as f64))))
            .collect();
    }
    let theirs = by_id(run);
    let mut out = Vec::new();
    for (name, r) in by_id(reference) {
        let Some(o) = theirs.get(&name) else { continue };
        match id {
            "ttft_ms" => out.extend(r.ttft_us().zip(o.ttft_us()).map(|(a, b)| (ms(a as f64), ms(b as f64)))),
            "tpot_ms" => out.extend(tpot_us(&r).zip(tpot_us(o)).map(|(a, b)| (ms(a), ms(b)))),
            "e2e_ms" => out.extend(r.e2e_us().zip(o.e2e_us()).map(|(a, b)| (ms(a as f64), ms(b as f64)))),
            "normalized_e2e_ms" => out.extend(r.e2e_us().zip(o.e2e_us()).map(|(a, b)| {
                let n = f64::from(r.output_tokens.max(1));
                (ms(a as f64) / n, ms(b as f64) / n)
            })),
            "itl_ms" => out.extend(
                r.token_latency_us
                    .iter()
                    .skip(1)
                    .zip(o.token_latency_us.iter().skip(1))
                    .map(|(a, b)| (ms(*a as f64), ms(*b as f64))),
            ),
            _ => {}
        }
    }
    out
}

/// MAE, bias, MAPE and WAPE of `run` against `reference` on every per-call latency metric.
fn paired_errors(name: &str, reference: &[CallRecord], run: &[CallRecord]) -> Vec<PairedErrors> {
    COMPARED
        .iter()
        .filter(|id| is_latency(id))
        .filter_map(|&id| {
            let pairs = pairs(id, reference, run);
            if pairs.is_empty() {
                return None;
            }
            let n = pairs.len() as f64;
            let mae = pairs.iter().map(|(r, o)| (o - r).abs()).sum::<f64>() / n;
            let bias = pairs.iter().map(|(r, o)| o - r).sum::<f64>() / n;
            let nonzero: Vec<_> = pairs.iter().filter(|(r, _)| *r != 0.0).collect();
            let mape_percent = (!nonzero.is_empty()).then(|| {
                nonzero.iter().map(|(r, o)| ((o - r) / r).abs()).sum::<f64>() / nonzero.len() as f64 * 100.0
            });
            let total: f64 = pairs.iter().map(|(r, _)| r.abs()).sum();
            let wape_percent =
                (total > 0.0).then(|| pairs.iter().map(|(r, o)| (o - r).abs()).sum::<f64>() / total * 100.0);
            Some(PairedErrors {
                run: name.to_owned(),
                metric: id,
                pairs: pairs.len(),
                mae,
                bias,
                mape_percent,
                wape_percent,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;

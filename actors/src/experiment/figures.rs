//! From replications to figures: each replication's warm-up, overload assessment, metrics and
//! histograms; estimates with intervals across replications (or batch means within one
//! steady-state run); the acceptance conditions; the validity-domain flag.

use std::collections::BTreeMap;

use blis_contracts::{
    AcceptanceOutcome, EstimateRecord, FrameSpec, LatencySummary, Metrics, OverloadRecord, Rank, RankShares,
    ReplicationRecord, RunKind, ValidityRecord,
};
use blis_costmodel::Registry;

use super::replication::ReplicationRun;
use crate::stats::batch_means::{DEFAULT_BATCHES, batch_means};
use crate::stats::interval::{DEFAULT_LEVEL, estimate};
use crate::stats::overload::{ABANDONED_SHARE, assess_overload};
use crate::stats::warmup::mser5;
use crate::tally::{Tally, Window};

/// Backlog samples taken over the offered load for the overload assessment.
const BACKLOG_SAMPLES: usize = 200;

/// One replication's figures, and its measured window (kept for the batch means).
pub fn replication_record(run: &ReplicationRun, frame: &FrameSpec) -> (ReplicationRecord, Window) {
    let window = run.tally.window(mser5_cut);
    let overload = overload(&run.tally, run.last_arrival_us, run.stopped_overloaded_us);
    let withhold = overload.overloaded && !frame.acceptance.allow_overload;
    let metrics =
        Tally::metrics(&window, run.tally.makespan_s(), &run.instances, frame.slo.as_ref(), withhold);
    let record = ReplicationRecord {
        seed: run.seed,
        fates: run.fates,
        metrics,
        warm_up_before_us: window.from_us,
        overload,
        histograms: Tally::histograms(&window),
        end_time_us: run.simulation.end_time_us,
        engine_steps: run.simulation.engine_steps,
    };
    (record, window)
}

/// The MSER-5 cut of the completed calls' TTFT series in send order: the send time of the
/// first call kept, or 0 when nothing is discarded or the series is too short to tell.
fn mser5_cut(completed: &[(u64, f64)]) -> u64 {
    let series: Vec<f64> = completed.iter().map(|&(_, t)| t).collect();
    match mser5(&series) {
        Ok(cut) if cut.discard > 0 && cut.discard < completed.len() => completed[cut.discard].0,
        _ => 0,
    }
}

/// Whether the run is overloaded, by the rule of `docs/METRICS.md`: the calls waiting for their
/// first token over the offered load (until the last arrival) keep growing, or the clients
/// abandon at least as many calls as the cluster serves, or the stop rule stopped the run.
fn overload(tally: &Tally, last_arrival_us: u64, stopped_us: Option<u64>) -> OverloadRecord {
    let samples = tally.backlog_samples(last_arrival_us, BACKLOG_SAMPLES);
    let final_backlog = samples.last().map_or(0.0, |&(_, b)| b);
    let abandoned_share = tally.abandoned_share(last_arrival_us);
    let abandoned = abandoned_share.is_some_and(|share| share >= ABANDONED_SHARE);
    let (growing, backlog_growth_per_s) = match assess_overload(&samples) {
        Ok(assessment) => (assessment.overloaded, Some(assessment.slope)),
        Err(_) => (false, None),
    };
    OverloadRecord {
        overloaded: growing || abandoned || stopped_us.is_some(),
        backlog_growth_per_s,
        final_backlog,
        abandoned_share,
        stopped_at_us: stopped_us,
    }
}

/// The scalar figures of one replication, named `metric.statistic` for latency summaries.
pub(crate) fn scalars(metrics: &Metrics) -> Vec<(String, Option<f64>)> {
    let mut out = Vec::new();
    let latencies: [(&str, &Option<LatencySummary>); 6] = [
        ("ttft_ms", &metrics.ttft_ms),
        ("tpot_ms", &metrics.tpot_ms),
        ("itl_ms", &metrics.itl_ms),
        ("e2e_ms", &metrics.e2e_ms),
        ("normalized_e2e_ms", &metrics.normalized_e2e_ms),
        ("request_e2e_ms", &metrics.request_e2e_ms),
    ];
    for (id, summary) in latencies {
        let usable = summary.filter(|s| s.count > 0);
        for (statistic, value) in [
            ("mean", usable.map(|s| s.mean)),
            ("p50", usable.map(|s| s.p50)),
            ("p90", usable.map(|s| s.p90)),
            ("p99", usable.map(|s| s.p99)),
        ] {
            out.push((format!("{id}.{statistic}"), value));
        }
    }
    out.push(("makespan_s".into(), Some(metrics.makespan_s)));
    out.push(("output_tokens_per_s".into(), Some(metrics.output_tokens_per_s)));
    out.push(("requests_per_s".into(), Some(metrics.requests_per_s)));
    out.push(("goodput_requests_per_s".into(), metrics.goodput_requests_per_s));
    out.push(("prefix_cache_hit_rate".into(), metrics.prefix_cache_hit_rate));
    out.push(("preemptions".into(), Some(metrics.preemptions as f64)));
    out.push(("kv_utilisation".into(), Some(metrics.kv_utilisation)));
    out
}

/// Estimates across replications: each scalar with a t interval over the replications that
/// have it (a metric withheld in any replication is left out). A steady-state run of one
/// replication gets batch-means intervals for the latency means.
pub fn estimates(
    records: &[ReplicationRecord],
    first: &Window,
    kind: RunKind,
) -> BTreeMap<String, EstimateRecord> {
    let mut by_name: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for record in records {
        for (name, value) in scalars(&record.metrics) {
            by_name.entry(name).or_default().push(value);
        }
    }
    let mut out = BTreeMap::new();
    for (name, values) in by_name {
        let Some(values) = values.into_iter().collect::<Option<Vec<f64>>>() else { continue };
        if let Ok(e) = estimate(&values, DEFAULT_LEVEL) {
            out.insert(
                name,
                EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level },
            );
        }
    }
    if kind == RunKind::SteadyState && records.len() == 1 && records[0].metrics.ttft_ms.is_some() {
        let window = &first.series;
        let series: [(&str, Vec<f64>); 3] = [
            ("ttft_ms.mean", window.iter().map(|c| c.ttft_us as f64 / 1e3).collect()),
            (
                "tpot_ms.mean",
                window.iter().filter(|c| !c.tpot_us.is_nan()).map(|c| c.tpot_us / 1e3).collect(),
            ),
            ("e2e_ms.mean", window.iter().map(|c| c.e2e_us as f64 / 1e3).collect()),
        ];
        for (name, values) in series {
            if let Ok(batches) = batch_means(&values, DEFAULT_BATCHES, DEFAULT_LEVEL) {
                let e = batches.estimate;
                out.insert(
                    name.to_owned(),
                    EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level },
                );
            }
        }
    }
    out
}

/// The acceptance conditions over every replication, and what they withhold.
pub fn acceptance(records: &[ReplicationRecord], frame: &FrameSpec) -> (Vec<AcceptanceOutcome>, Vec<String>) {
    let mut outcomes = Vec::new();
    let mut withheld = Vec::new();
    let conserved = records.iter().all(|r| r.fates.conserved());
    outcomes.push(AcceptanceOutcome {
        condition: "every call has exactly one fate".into(),
        met: conserved,
        detail: format!("{} replications checked", records.len()),
    });
    let fraction = frame.acceptance.min_completed_fraction;
    if fraction > 0.0 {
        let worst =
            records
                .iter()
                .map(|r| {
                    if r.fates.arrivals == 0 {
                        0.0
                    } else {
                        r.fates.completed as f64 / r.fates.arrivals as f64
                    }
                })
                .fold(f64::INFINITY, f64::min);
        let met = worst >= fraction;
        outcomes.push(AcceptanceOutcome {
            condition: format!("at least {:.1}% of calls complete", fraction * 100.0),
            met,
            detail: format!("lowest over replications: {:.2}%", worst * 100.0),
        });
        if !met {
            withheld.push(format!(
                "all figures: only {:.2}% of calls completed in the worst replication (the frame asks for {:.1}%)",
                worst * 100.0,
                fraction * 100.0
            ));
        }
    }
    let overloaded: Vec<String> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.overload.overloaded)
        .map(|(i, r)| format!("replication {i} ({})", overload_evidence(&r.overload)))
        .collect();
    outcomes.push(AcceptanceOutcome {
        condition: "not overloaded (the backlog does not keep growing)".into(),
        met: overloaded.is_empty(),
        detail: if overloaded.is_empty() {
            "no replication overloaded".into()
        } else {
            overloaded.join("; ")
        },
    });
    if !overloaded.is_empty() && !frame.acceptance.allow_overload {
        withheld.push(format!(
            "latency figures: overloaded — {}; latencies would only measure how long the run lasted (set frame.acceptance.allow_overload: true to report them anyway)",
            overloaded.join("; ")
        ));
    }
    (outcomes, withheld)
}

/// What made a replication overloaded, in words.
fn overload_evidence(record: &OverloadRecord) -> String {
    if let Some(at) = record.stopped_at_us {
        return format!(
            "stopped at {:.1} s: the backlog kept growing past {} calls",
            at as f64 / 1e6,
            crate::stats::overload::STOP_BACKLOG
        );
    }
    match record.abandoned_share {
        Some(share) if share >= ABANDONED_SHARE => format!(
            "{:.0}% of the calls sent in the second half of the offered load timed out, capping the backlog",
            share * 100.0
        ),
        _ => format!(
            "calls waiting for a first token growing by {:.2}/s to {:.0}",
            record.backlog_growth_per_s.unwrap_or(0.0),
            record.final_backlog
        ),
    }
}

/// The share of a run's priced step time that coefficients no run fitted (literature, vendor,
/// roofline, assumed) may price with the run still in domain. The calibration holds these terms
/// fixed while it fits the rest (the CUDA-graph launch, the sampler: 0.2–2.4% of a step on the
/// fitted models, the most for Llama-2-70B at TP4 under light load); at 5% even a fixed term
/// off by half moves a step by 2.5%, inside the fit's own per-token error (6% in sample,
/// `docs/ACCURACY.md`). A coefficient carried outside its fit range (`transferred`) always
/// takes the run out.
pub const UNFITTED_SHARE_IN_DOMAIN: f64 = 0.05;

/// Whether the run's prices came from trusted data, and its pools lie where that data was
/// fitted (the models and tensor-parallel degrees of the calibration experiments).
pub fn validity(priced: &RankShares, resolved: &serde_json::Value, registry: &Registry) -> ValidityRecord {
    let total = priced.total();
    let unfitted: f64 = Rank::ALL
        .iter()
        .filter(|r| matches!(r, Rank::Literature | Rank::VendorSpec | Rank::Roofline | Rank::Assumed))
        .map(|r| priced.get(*r))
        .sum();
    let trusted_prices =
        total > 0.0 && priced.get(Rank::Transferred) == 0.0 && unfitted / total <= UNFITTED_SHARE_IN_DOMAIN;
    let mut reasons = Vec::new();
    if total == 0.0 {
        reasons.push("no engine step was priced".to_owned());
    } else {
        for rank in Rank::ALL.iter().filter(|r| !matches!(r, Rank::Measured | Rank::Calibrated)) {
            let share = priced.get(*rank) / total;
            if share > 0.0 {
                reasons.push(format!(
                    "{:.1}% of the priced step time comes from {}-rank coefficients{}",
                    share * 100.0,
                    rank.as_str(),
                    match rank {
                        Rank::Transferred => " (calibrated ones used outside their fit range)",
                        Rank::Roofline => " (datasheet physics, not calibrated against real runs)",
                        _ => "",
                    }
                ));
            }
        }
    }
    let mut range_reasons: Vec<String> = Vec::new();
    for pool in resolved["pools"].as_array().into_iter().flatten() {
        let (chip, model) =
            (pool["chip"]["name"].as_str().unwrap_or(""), pool["model"]["name"].as_str().unwrap_or(""));
        let tp = pool["engine"]["plan"]["layout"]["tensor"].as_u64().unwrap_or(1) as u32;
        let name = pool["name"].as_str().unwrap_or("");
        // The coefficients were fitted on real vLLM runs only: an SGLang pool's steps are priced
        // by them, transferred across engines.
        if pool["engine"]["kind"] == "sglang" {
            range_reasons.push(format!(
                "pool {name} runs SGLang {}; there is no real SGLang run to calibrate on, so its steps are priced by the coefficients fitted on real vLLM runs (host time included)",
                pool["engine"]["config"]["version"].as_str().unwrap_or("")
            ));
        }
        let resolution = registry.resolve(chip);
        let fitted =
            resolution.entries().iter().filter(|e| matches!(e.rank, Rank::Measured | Rank::Calibrated));
        for range in fitted.filter_map(|e| e.range.as_ref()) {
            if let Some(models) = range.models.as_ref().filter(|m| !m.iter().any(|m| m == model)) {
                let reason = format!(
                    "pool {name} serves {model}; the calibrated coefficients were fitted on {}",
                    models.join(", ")
                );
                if !range_reasons.contains(&reason) {
                    range_reasons.push(reason);
                }
            }
            if let Some([low, high]) =
                range.tensor_parallel.filter(|[low, high]| !(low..=high).contains(&&tp))
            {
                let reason = format!(
                    "pool {name} runs tensor parallelism {tp}; the calibrated coefficients were fitted on {low}–{high}"
                );
                if !range_reasons.contains(&reason) {
                    range_reasons.push(reason);
                }
            }
        }
    }
    // In domain, the small shares of fixed terms are no reason; out of it, every share is said.
    if trusted_prices && range_reasons.is_empty() {
        return ValidityRecord { in_domain: true, reasons: Vec::new() };
    }
    reasons.append(&mut range_reasons);
    ValidityRecord { in_domain: false, reasons }
}

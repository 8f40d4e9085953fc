//! Validation against real vLLM runs: each experiment of `reference-data/real-vllm-h100/` re-run
//! as it really ran (the model, tensor parallelism and vLLM settings of its `exp-config.yaml`, the
//! stream its inference-perf build really sent) and compared stage by stage on the figures the
//! client measured robustly.
//!
//! Compared (seconds): TTFT and request latency, mean, p50, p90 and p99 (NumPy's linear
//! percentiles, as inference-perf reports them, over successful calls), and the per-token time
//! `(mean request latency − mean TTFT) / (output_len − 1)`. Left out: the reported TPOT and ITL
//! (the pinned client stamps blank SSE lines too, so TPOT is about half the true value and ITL
//! bimodal), NTPOT and `output_len` (the client's re-count of the text). An experiment whose
//! clients timed out is overloaded: its timed-out fractions are compared, its latencies are not
//! scored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_contracts::{Fate, FieldError, yaml};
use blis_costmodel::CostData;
use serde::Deserialize;
use serde_json::Value;

use crate::replication::replication_seed;
use crate::run::{Progress, RunError, RunOptions, RunOutput, run_observed};
use crate::stats::interval::{DEFAULT_LEVEL, estimate};

/// The server side of an experiment (`exp-config.yaml`).
#[derive(Debug, Deserialize)]
struct ExperimentConfig {
    model: String,
    tensor_parallelism: u32,
    max_model_len: u32,
    max_num_batched_tokens: u32,
    max_num_seqs: u32,
}

/// The figures compared, in table order.
pub const METRICS: [&str; 9] = [
    "ttft_mean",
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "e2e_mean",
    "e2e_p50",
    "e2e_p90",
    "e2e_p99",
    "per_token",
];

/// One stage's figures, seconds (all nine of [`METRICS`]), and its timed-out share.
#[derive(Clone, Debug, PartialEq)]
pub struct StageFigures {
    /// The nine figures of [`METRICS`], seconds.
    pub values: [f64; 9],
    /// Calls that timed out over calls sent.
    pub timed_out_fraction: f64,
    /// Successful calls.
    pub successes: u64,
}

/// One real experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Its folder's name.
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The catalog name of its model.
    pub model: String,
    /// Tensor-parallel degree.
    pub tensor_parallel: u32,
    /// vLLM's `max_model_len`, `max_num_batched_tokens` and `max_num_seqs`.
    pub limits: (u32, u32, u32),
    /// Output tokens of every request.
    pub output_len: u32,
    /// Each stage's measured figures.
    pub stages: Vec<StageFigures>,
}

impl Experiment {
    /// Read the experiment in `dir`.
    pub fn load(dir: &Path) -> Result<Experiment, FieldError> {
        let name =
            dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file)).map_err(|e| {
                FieldError::new(format!("{name}/{file}"), dir.display(), format!("cannot read: {e}"))
            })
        };
        let config: ExperimentConfig = yaml::from_str(&read("exp-config.yaml")?)
            .map_err(|e| e.within(&format!("{name}/exp-config.yaml")))?;
        let model = match config.model.as_str() {
            "meta-llama/Llama-2-70b-hf" => "Llama-2-70B",
            "mistralai/Mixtral-8x7B-v0.1" => "Mixtral-8x7B-v0.1",
            other => {
                return Err(FieldError::new(
                    format!("{name}/exp-config.yaml.model"),
                    other,
                    "no catalog model is known for it",
                ));
            }
        };
        let profile: Value =
            yaml::from_str(&read("profile.yaml")?).map_err(|e| e.within(&format!("{name}/profile.yaml")))?;
        let output_len = profile["data"]["shared_prefix"]["output_len"].as_u64().ok_or_else(|| {
            FieldError::at(format!("{name}/profile.yaml.data.shared_prefix.output_len"), "missing")
        })? as u32;
        let stage_count = profile["load"]["stages"].as_array().map_or(0, Vec::len);
        let mut stages = Vec::with_capacity(stage_count);
        for s in 0..stage_count {
            let file = format!("results/stage_{s}_lifecycle_metrics.json");
            let json: Value = serde_json::from_str(&read(&file)?)
                .map_err(|e| FieldError::at(format!("{name}/{file}"), e.to_string()))?;
            stages.push(real_stage(&json, output_len).ok_or_else(|| {
                FieldError::at(
                    format!("{name}/{file}"),
                    "missing successes.latency, load_summary or failures figures",
                )
            })?);
        }
        Ok(Experiment {
            name,
            dir: dir.to_path_buf(),
            model: model.to_owned(),
            tensor_parallel: config.tensor_parallelism,
            limits: (config.max_model_len, config.max_num_batched_tokens, config.max_num_seqs),
            output_len,
            stages,
        })
    }

    /// Whether the real run's clients timed out (then its latencies are not scored).
    pub fn overloaded(&self) -> bool {
        self.stages.iter().any(|s| s.timed_out_fraction > 0.0)
    }

    /// The scenario re-running it, stages shortened to `stage_cap_s` if given.
    pub fn scenario(&self, stage_cap_s: Option<f64>) -> String {
        let (max_model_len, max_num_batched_tokens, max_num_seqs) = self.limits;
        let cap = stage_cap_s.map_or_else(String::new, |c| format!(", stage_duration_cap_s: {c}"));
        format!(
            "# Re-run of reference-data/real-vllm-h100/{name}.\n\
             seed: 1\n\
             cluster:\n  router: {{ policy: round-robin }}\n  pools:\n    - name: h100\n      replicas: 1\n      \
             hardware: {{ chip: H100-SXM }}\n      model: {model}\n      engine:\n        kind: vllm\n        \
             version: \"0.15.1\"\n        args: {{ tensor_parallel_size: {tp}, max_model_len: {max_model_len}, \
             max_num_batched_tokens: {max_num_batched_tokens}, max_num_seqs: {max_num_seqs} }}\n\
             workload:\n  inference_perf: {{ profile: profile.yaml, emulate: b505c33{cap} }}\n",
            name = self.name,
            model = self.model,
            tp = self.tensor_parallel,
        )
    }
}

/// The measured figures of one stage file.
fn real_stage(json: &Value, output_len: u32) -> Option<StageFigures> {
    let latency = &json["successes"]["latency"];
    let pick = |metric: &str| -> Option<[f64; 4]> {
        let m = &latency[metric];
        Some([m["mean"].as_f64()?, m["median"].as_f64()?, m["p90"].as_f64()?, m["p99"].as_f64()?])
    };
    let (ttft, e2e) = (pick("time_to_first_token")?, pick("request_latency")?);
    let sent = json["load_summary"]["count"].as_f64()?;
    let failures = json["failures"]["count"].as_f64()?;
    Some(StageFigures {
        values: [
            ttft[0],
            ttft[1],
            ttft[2],
            ttft[3],
            e2e[0],
            e2e[1],
            e2e[2],
            e2e[3],
            (e2e[0] - ttft[0]) / f64::from(output_len.max(2) - 1),
        ],
        timed_out_fraction: if sent > 0.0 { failures / sent } else { 0.0 },
        successes: json["successes"]["count"].as_u64()?,
    })
}

/// NumPy's default ("linear") percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let position = p / 100.0 * (sorted.len() - 1) as f64;
    let (low, high) = (position.floor() as usize, position.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (position - low as f64)
}

/// One replication's figures per stage, from its calls (stage from the request id).
pub fn simulated_stages(output: &RunOutput, stages: usize, output_len: u32) -> Vec<StageFigures> {
    (0..stages)
        .map(|s| {
            let prefix = format!("-s{s}-");
            let calls: Vec<_> = output.calls.iter().filter(|c| c.request.contains(&prefix)).collect();
            let completed: Vec<_> = calls.iter().filter(|c| c.fate == Fate::Completed).collect();
            let mut ttft: Vec<f64> =
                completed.iter().filter_map(|c| c.ttft_us()).map(|t| t as f64 / 1e6).collect();
            let mut e2e: Vec<f64> =
                completed.iter().filter_map(|c| c.e2e_us()).map(|t| t as f64 / 1e6).collect();
            ttft.sort_by(f64::total_cmp);
            e2e.sort_by(f64::total_cmp);
            let mean =
                |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
            let timed_out = calls.iter().filter(|c| c.fate == Fate::TimedOut).count();
            StageFigures {
                values: [
                    mean(&ttft),
                    percentile(&ttft, 50.0),
                    percentile(&ttft, 90.0),
                    percentile(&ttft, 99.0),
                    mean(&e2e),
                    percentile(&e2e, 50.0),
                    percentile(&e2e, 90.0),
                    percentile(&e2e, 99.0),
                    (mean(&e2e) - mean(&ttft)) / f64::from(output_len.max(2) - 1),
                ],
                timed_out_fraction: if calls.is_empty() {
                    0.0
                } else {
                    timed_out as f64 / calls.len() as f64
                },
                successes: completed.len() as u64,
            }
        })
        .collect()
}

/// Simulate `experiment` with `replications` independent seeds; per replication, per stage.
/// `progress` hears each replication's progress, with its index.
pub fn simulate(
    experiment: &Experiment,
    replications: u32,
    stage_cap_s: Option<f64>,
    data: &CostData,
    progress: &mut dyn FnMut(u32, Progress),
) -> Result<Vec<Vec<StageFigures>>, RunError> {
    blis_contracts::bounds::check_replications("--replications", replications).map_err(RunError::Input)?;
    if let Some(cap) = stage_cap_s.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(RunError::Input(FieldError::new(
            "--stage-cap-s",
            cap,
            "must be a positive number of seconds",
        )));
    }
    let text = experiment.scenario(stage_cap_s);
    (0..replications)
        .map(|r| {
            let options = RunOptions {
                seed: Some(replication_seed(1, r)),
                replications: Some(1),
                threads: Some(1),
                base_dir: Some(experiment.dir.clone()),
                ..RunOptions::default()
            };
            let (output, _) = run_observed(&text, options, data, Vec::new(), &mut |p| progress(r, p))?;
            Ok(simulated_stages(&output, experiment.stages.len(), experiment.output_len))
        })
        .collect()
}

/// One row of the validation table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The experiment.
    pub experiment: String,
    /// The stage.
    pub stage: usize,
    /// One of [`METRICS`], or `timed_out_fraction`.
    pub metric: &'static str,
    /// The real value.
    pub real: f64,
    /// The simulated mean over replications.
    pub simulated: f64,
    /// Its 95% half width (absent with one replication).
    pub half_width: Option<f64>,
    /// `(simulated − real) / real`; absent for timed-out fractions and for overloaded
    /// experiments' latencies, which are not scored.
    pub relative_error: Option<f64>,
}

/// The rows of one experiment from its simulated replications.
pub fn rows(experiment: &Experiment, simulated: &[Vec<StageFigures>]) -> Vec<Row> {
    let mut out = Vec::new();
    let overloaded = experiment.overloaded();
    for (s, real) in experiment.stages.iter().enumerate() {
        let mut push = |metric: &'static str, real: f64, values: Vec<f64>, scored: bool| {
            let finite: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
            let e = estimate(&finite, DEFAULT_LEVEL).ok();
            let simulated = e.map_or(f64::NAN, |e| e.mean);
            out.push(Row {
                experiment: experiment.name.clone(),
                stage: s,
                metric,
                real,
                simulated,
                half_width: e.and_then(|e| e.half_width),
                relative_error: (scored && real != 0.0 && simulated.is_finite())
                    .then(|| (simulated - real) / real),
            });
        };
        for (k, metric) in METRICS.iter().enumerate() {
            push(metric, real.values[k], simulated.iter().map(|r| r[s].values[k]).collect(), !overloaded);
        }
        if overloaded {
            push(
                "timed_out_fraction",
                real.timed_out_fraction,
                simulated.iter().map(|r| r[s].timed_out_fraction).collect(),
                false,
            );
        }
    }
    out
}

/// The median absolute relative error per metric over the scored rows.
pub fn median_absolute_errors(rows: &[Row]) -> BTreeMap<&'static str, f64> {
    let mut by_metric: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    for row in rows {
        if let Some(e) = row.relative_error {
            by_metric.entry(row.metric).or_default().push(e.abs());
        }
    }
    by_metric
        .into_iter()
        .map(|(metric, mut errors)| {
            errors.sort_by(f64::total_cmp);
            let n = errors.len();
            let median = if n % 2 == 1 { errors[n / 2] } else { (errors[n / 2 - 1] + errors[n / 2]) / 2.0 };
            (metric, median)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_numpys_linear_ones() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 90.0) - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&v, 100.0), 4.0);
    }

    #[test]
    fn errors_are_signed_and_medians_are_of_absolute_values() {
        let row = |metric, real: f64, simulated: f64| Row {
            experiment: "x".into(),
            stage: 0,
            metric,
            real,
            simulated,
            half_width: None,
            relative_error: Some((simulated - real) / real),
        };
        let rows = [row("ttft_mean", 2.0, 2.2), row("ttft_mean", 1.0, 0.7), row("ttft_mean", 4.0, 4.0)];
        assert!((rows[1].relative_error.unwrap() + 0.3).abs() < 1e-12);
        assert!((median_absolute_errors(&rows)["ttft_mean"] - 0.1).abs() < 1e-12);
    }
}

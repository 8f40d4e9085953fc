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
//!
//! Any folder laid out like `reference-data/` is taken: its model is the folder's own
//! `model-config/config.json` if it has one, else a catalog model (one added with
//! `--model-config <exp-config model>=PATH` or a known Hugging Face id), else the
//! `model-configs/<name>/config.json` beside the experiments' folder; a results file that
//! publishes only some statistics is compared on those it holds, naming the ones it skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use blis_contracts::{Fate, FieldError, PromptTokenizer, ValidityRecord, yaml};
use blis_costmodel::CostData;
use serde::Deserialize;
use serde_json::Value;

use super::replication::replication_seed;
use crate::calls_out::CallsDigest;
use crate::run::{Progress, RunError, RunOptions, RunOutput, run_observed};
use crate::stats::interval::{DEFAULT_LEVEL, estimate};
use crate::workload::known_drift;

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

/// One stage's figures, seconds (the nine of [`METRICS`]), and its timed-out share.
#[derive(Clone, Debug, PartialEq)]
pub struct StageFigures {
    /// The nine figures of [`METRICS`], seconds; absent where a results file does not publish
    /// the statistic, or no simulated call completed.
    pub values: [Option<f64>; 9],
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
    /// The catalog name of its model (for a model read from a config, its Hugging Face id).
    pub model: String,
    /// The `config.json` its model is read from, when the catalog does not hold it.
    pub model_config: Option<PathBuf>,
    /// The prompt-length drift emulated for its client's tokenizer.
    pub tokenizer: PromptTokenizer,
    /// Why the tokenizer is not the client's own (its drift is not known), if so.
    pub tokenizer_note: Option<String>,
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
    /// Read the experiment in `dir`, its model found as the module says in `data`'s catalog
    /// or a config file, its tokenizer's drift `tokenizer` if given, else the client's own
    /// (exact lengths when that one's drift is not known).
    pub fn load(
        dir: &Path,
        data: &CostData,
        tokenizer: Option<PromptTokenizer>,
    ) -> Result<Experiment, FieldError> {
        let name =
            dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file)).map_err(|e| {
                FieldError::new(format!("{name}/{file}"), dir.display(), format!("cannot read: {e}"))
            })
        };
        let config: ExperimentConfig = yaml::from_str(&read("exp-config.yaml")?)
            .map_err(|e| e.within(&format!("{name}/exp-config.yaml")))?;
        let (model, model_config) = find_model(dir, &name, &config.model, data)?;
        let profile: Value =
            yaml::from_str(&read("profile.yaml")?).map_err(|e| e.within(&format!("{name}/profile.yaml")))?;
        let output_len = profile["data"]["shared_prefix"]["output_len"].as_u64().ok_or_else(|| {
            FieldError::at(format!("{name}/profile.yaml.data.shared_prefix.output_len"), "missing")
        })? as u32;
        let stage_count = profile["load"]["stages"].as_array().map_or(0, Vec::len);
        if stage_count == 0 {
            return Err(FieldError::at(format!("{name}/profile.yaml.load.stages"), "missing or empty"));
        }
        let mut stages = Vec::with_capacity(stage_count);
        for s in 0..stage_count {
            let file = format!("results/stage_{s}_lifecycle_metrics.json");
            let json: Value = serde_json::from_str(&read(&file)?)
                .map_err(|e| FieldError::at(format!("{name}/{file}"), e.to_string()))?;
            stages.push(real_stage(&json, output_len).map_err(|e| e.within(&format!("{name}/{file}")))?);
        }
        let client_tokenizer = profile["tokenizer"]["pretrained_model_name_or_path"]
            .as_str()
            .or_else(|| profile["server"]["model_name"].as_str())
            .unwrap_or("(none)")
            .to_owned();
        let (tokenizer, tokenizer_note) = match tokenizer.or_else(|| known_drift(&client_tokenizer)) {
            Some(tokenizer) => (tokenizer, None),
            None => (
                PromptTokenizer::Exact,
                Some(format!(
                    "the pinned client's prompt-length drift for the tokenizer {client_tokenizer} is not known: \
                     exact prompt lengths are sent (--tokenizer llama2 or mixtral overrides)"
                )),
            ),
        };
        Ok(Experiment {
            name,
            dir: dir.to_path_buf(),
            model,
            model_config,
            tokenizer,
            tokenizer_note,
            tensor_parallel: config.tensor_parallelism,
            limits: (config.max_model_len, config.max_num_batched_tokens, config.max_num_seqs),
            output_len,
            stages,
        })
    }

    /// The statistics its results files do not publish, as `stage N: metric`.
    pub fn skipped(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (s, stage) in self.stages.iter().enumerate() {
            for (k, metric) in METRICS.iter().enumerate() {
                if stage.values[k].is_none() {
                    out.push(format!("stage {s}: {metric}"));
                }
            }
        }
        out
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
            "# Re-run of the real experiment {name}.\n\
             seed: 1\n\
             cluster:\n  router: {{ policy: round-robin }}\n  pools:\n    - name: h100\n      replicas: 1\n      \
             hardware: {{ chip: H100-SXM }}\n      model: \"{model}\"\n      engine:\n        kind: vllm\n        \
             version: \"0.15.1\"\n        args: {{ tensor_parallel_size: {tp}, max_model_len: {max_model_len}, \
             max_num_batched_tokens: {max_num_batched_tokens}, max_num_seqs: {max_num_seqs} }}\n\
             workload:\n  inference_perf: {{ profile: profile.yaml, emulate: b505c33, tokenizer: {tokenizer}{cap} }}\n",
            name = self.name,
            model = self.model,
            tp = self.tensor_parallel,
            tokenizer = match self.tokenizer {
                PromptTokenizer::Llama2 => "llama2",
                PromptTokenizer::Mixtral => "mixtral",
                PromptTokenizer::Exact => "exact",
            },
        )
    }
}

/// Hugging Face ids of the catalog's models, for experiments that name them.
const CATALOG_IDS: [(&str, &str); 2] =
    [("meta-llama/Llama-2-70b-hf", "Llama-2-70B"), ("mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B-v0.1")];

/// The catalog name of an experiment's model `id`, and the config to add it from if the
/// catalog does not hold it; refuses naming the places looked in.
fn find_model(
    dir: &Path,
    name: &str,
    id: &str,
    data: &CostData,
) -> Result<(String, Option<PathBuf>), FieldError> {
    let own = dir.join("model-config").join("config.json");
    if own.is_file() {
        return Ok((id.to_owned(), Some(own)));
    }
    if data.catalog.model(id, "").is_ok() {
        return Ok((id.to_owned(), None));
    }
    if let Some((_, catalog_name)) = CATALOG_IDS.iter().find(|(known, _)| *known == id) {
        return Ok(((*catalog_name).to_owned(), None));
    }
    let repository = id.rsplit('/').next().unwrap_or(id);
    let beside = dir
        .parent()
        .and_then(Path::parent)
        .map(|root| root.join("model-configs").join(repository).join("config.json"));
    if let Some(beside) = beside.filter(|p| p.is_file()) {
        return Ok((id.to_owned(), Some(beside)));
    }
    Err(FieldError::new(
        format!("{name}/exp-config.yaml.model"),
        id,
        format!(
            "no config for this model: the folder has no model-config/config.json, the catalog has no such model, \
             and there is no ../../model-configs/{repository}/config.json; give --model-config {id}=PATH"
        ),
    ))
}

/// `base` with the model of every experiment read from a config added.
pub fn cost_data_for(experiments: &[Experiment], base: &CostData) -> Result<CostData, FieldError> {
    let mut data = base.clone();
    for experiment in experiments {
        if let Some(path) = &experiment.model_config
            && data.catalog.model(&experiment.model, "").is_err()
        {
            data = data.with_hf_model(&experiment.model, path).map_err(|e| e.within(&experiment.name))?;
        }
    }
    Ok(data)
}

/// The measured figures of one stage file; refuses a file without what every comparison
/// needs (`load_summary.count`, `successes.count`, `failures.count`), naming the key.
fn real_stage(json: &Value, output_len: u32) -> Result<StageFigures, FieldError> {
    let count = |key: &str| {
        let mut value = json;
        for part in key.split('.') {
            value = &value[part];
        }
        value.as_f64().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| {
            FieldError::at(
                key,
                "missing (or not a count): validation needs every stage's calls sent, succeeded and failed",
            )
        })
    };
    let sent = count("load_summary.count")?;
    let successes = count("successes.count")?;
    let failures = count("failures.count")?;
    let latency = &json["successes"]["latency"];
    let pick = |metric: &str| -> [Option<f64>; 4] {
        let m = &latency[metric];
        ["mean", "median", "p90", "p99"].map(|k| m[k].as_f64().filter(|v| v.is_finite()))
    };
    let (ttft, e2e) = (pick("time_to_first_token"), pick("request_latency"));
    let per_token = match (e2e[0], ttft[0]) {
        (Some(e2e), Some(ttft)) => Some((e2e - ttft) / f64::from(output_len.max(2) - 1)),
        _ => None,
    };
    Ok(StageFigures {
        values: [ttft[0], ttft[1], ttft[2], ttft[3], e2e[0], e2e[1], e2e[2], e2e[3], per_token],
        timed_out_fraction: if sent > 0.0 { failures / sent } else { 0.0 },
        successes: successes as u64,
    })
}

/// NumPy's default ("linear") percentile of sorted values (at least one).
fn percentile(sorted: &[f64], p: f64) -> f64 {
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
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let at = |v: &[f64], p: f64| (!v.is_empty()).then(|| percentile(v, p));
            let timed_out = calls.iter().filter(|c| c.fate == Fate::TimedOut).count();
            StageFigures {
                values: [
                    mean(&ttft),
                    at(&ttft, 50.0),
                    at(&ttft, 90.0),
                    at(&ttft, 99.0),
                    mean(&e2e),
                    at(&e2e, 50.0),
                    at(&e2e, 90.0),
                    at(&e2e, 99.0),
                    mean(&e2e)
                        .zip(mean(&ttft))
                        .map(|(e2e, ttft)| (e2e - ttft) / f64::from(output_len.max(2) - 1)),
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

/// An experiment's simulated replications.
#[derive(Clone, Debug)]
pub struct Simulated {
    /// Per replication, per stage.
    pub stages: Vec<Vec<StageFigures>>,
    /// The first replication's validity-domain flag, with the experiment's tokenizer fallback
    /// (if any) among its reasons.
    pub validity: ValidityRecord,
}

/// Simulate `experiment` with `replications` independent seeds (its model in `data`, see
/// [`cost_data_for`]). `progress` hears each replication's progress, with its index.
pub fn simulate(
    experiment: &Experiment,
    replications: u32,
    stage_cap_s: Option<f64>,
    data: &CostData,
    progress: &mut dyn FnMut(u32, Progress),
) -> Result<Simulated, RunError> {
    blis_contracts::bounds::check_replications("--replications", replications).map_err(RunError::Input)?;
    if let Some(cap) = stage_cap_s.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(RunError::Input(FieldError::new(
            "--stage-cap-s",
            cap,
            "must be a positive number of seconds",
        )));
    }
    let text = experiment.scenario(stage_cap_s);
    let mut validity = None;
    let mut stages = Vec::with_capacity(replications as usize);
    for r in 0..replications {
        let options = RunOptions {
            seed: Some(replication_seed(1, r)),
            replications: Some(1),
            threads: Some(1),
            base_dir: Some(experiment.dir.clone()),
            calls_digest: CallsDigest::Skipped,
            ..RunOptions::default()
        };
        let (output, _) = run_observed(&text, options, data, Vec::new(), &mut |p| progress(r, p))?;
        stages.push(simulated_stages(&output, experiment.stages.len(), experiment.output_len));
        validity.get_or_insert_with(|| output.result.validity.clone());
    }
    let mut validity = validity.expect("at least one replication (bounds checked)");
    if let Some(note) = &experiment.tokenizer_note {
        validity.in_domain = false;
        validity.reasons.push(note.clone());
    }
    Ok(Simulated { stages, validity })
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
        let mut push = |metric: &'static str, real: f64, values: Vec<Option<f64>>, scored: bool| {
            let finite: Vec<f64> = values.into_iter().flatten().filter(|v| v.is_finite()).collect();
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
            if let Some(value) = real.values[k] {
                push(metric, value, simulated.iter().map(|r| r[s].values[k]).collect(), !overloaded);
            }
        }
        if overloaded {
            push(
                "timed_out_fraction",
                real.timed_out_fraction,
                simulated.iter().map(|r| Some(r[s].timed_out_fraction)).collect(),
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

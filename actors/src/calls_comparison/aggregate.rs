//! An inference-perf lifecycle summary (`results/summary_lifecycle_metrics.json` or a stage's
//! `stage_N_lifecycle_metrics.json`, as in `reference-data/`) as a comparison's reference: the
//! statistics it holds, in seconds, mapped onto the registry's metrics in their units.
//!
//! inference-perf's `time_to_first_token` is `ttft_ms`, `time_per_output_token` `tpot_ms`,
//! `inter_token_latency` `itl_ms`, `request_latency` `e2e_ms` (one request is one call),
//! `normalized_time_per_output_token` `normalized_e2e_ms`, and `throughput.output_tokens_per_sec`
//! and `throughput.requests_per_sec` the two throughputs. Its `median` is p50 and its `pX` keys
//! the other percentiles (NumPy's linear percentiles, not nearest rank: on a few hundred calls or
//! more the two differ by less than the gap between neighbouring values). It holds no request
//! end-to-end times and no makespan; a statistic it does not publish is left empty.

use serde_json::Value;

use blis_contracts::FieldError;

/// The statistics of one inference-perf summary.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregateReference {
    summary: Value,
    /// What a person should know when reading the comparison.
    pub notes: Vec<String>,
}

/// Whether `json` looks like an inference-perf lifecycle summary.
pub fn is_inference_perf_summary(json: &Value) -> bool {
    json.get("load_summary").is_some() && json.get("successes").is_some()
}

impl AggregateReference {
    /// Read a summary's text; `source` names it in refusals.
    pub fn parse(source: &str, text: &str) -> Result<AggregateReference, FieldError> {
        let summary: Value =
            serde_json::from_str(text).map_err(|e| FieldError::at(source, format!("not JSON: {e}")))?;
        if !is_inference_perf_summary(&summary) {
            return Err(FieldError::at(
                source,
                "not an inference-perf lifecycle summary (no `load_summary` and `successes`)",
            ));
        }
        let successes = &summary["successes"]["count"];
        if successes.as_u64().is_none_or(|n| n == 0) {
            return Err(FieldError::new(
                format!("{source}.successes.count"),
                successes,
                "a summary without successful requests holds no latency",
            ));
        }
        let mut notes = vec![format!(
            "{source}: inference-perf's TPOT and ITL come from its own SSE timestamps (the pinned build also stamps blank lines, which halves TPOT and makes ITL bimodal); its TTFT, request latency and throughputs are the robust figures"
        )];
        if summary["failures"]["count"].as_u64().is_some_and(|n| n > 0) {
            notes.push(format!(
                "{source}: {} requests failed; its latencies cover the {} that succeeded",
                summary["failures"]["count"], successes
            ));
        }
        Ok(AggregateReference { summary, notes })
    }

    /// The value of `statistic` (`mean`, `p50`, …, `value`) of the registry metric `id`, in
    /// the registry's unit, if the summary publishes it.
    pub fn value(&self, id: &str, statistic: &str) -> Option<f64> {
        let successes = &self.summary["successes"];
        let latency = |key: &str| {
            let stats = &successes["latency"][key];
            let field = match statistic {
                "mean" => "mean".to_owned(),
                "p50" => "median".to_owned(),
                other => other.to_owned(),
            };
            stats[field.as_str()].as_f64().filter(|v| v.is_finite()).map(|s| s * 1_000.0)
        };
        match id {
            "ttft_ms" => latency("time_to_first_token"),
            "tpot_ms" => latency("time_per_output_token"),
            "itl_ms" => latency("inter_token_latency"),
            "e2e_ms" => latency("request_latency"),
            "normalized_e2e_ms" => latency("normalized_time_per_output_token"),
            "output_tokens_per_s" => successes["throughput"]["output_tokens_per_sec"].as_f64(),
            "requests_per_s" => successes["throughput"]["requests_per_sec"].as_f64(),
            _ => None,
        }
    }
}

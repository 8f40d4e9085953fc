//! `blis-actor validate-real DIR...`: each real experiment re-run as it ran, compared stage by
//! stage with what its client measured; `--json FILE` writes every figure.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use blis_actors::experiment::validation::{
    Experiment, Row, cost_data_for, median_absolute_errors, rows, simulate,
};
use blis_contracts::PromptTokenizer;
use blis_costmodel::CostData;
use serde_json::{Value, json};

/// What the simulation leaves out and says so: a real server's first requests after start-up
/// pay lazy initialisation (the first stages' TTFT tails are several times the later ones'),
/// which no term models; the first stage's TTFT p90/p99 errors include it.
const COLD_START: &str = "the first stage's TTFT tail (p90, p99) includes the real server's cold start (lazy initialisation on its first requests), which the simulation does not model";

/// How `validate-real` runs.
pub struct ValidateOptions<'a> {
    /// Replications per experiment.
    pub replications: u32,
    /// Stages shortened to at most this many seconds.
    pub stage_cap_s: Option<f64>,
    /// Each experiment with the registry's sample fitted without it.
    pub leave_one_out: bool,
    /// The tokenizer drift to emulate instead of the client's own.
    pub tokenizer: Option<PromptTokenizer>,
    /// Where to write every figure as JSON.
    pub json: Option<&'a Path>,
}

/// Run every experiment and render the table and the median absolute errors; the rows too.
pub fn validate(
    dirs: &[PathBuf],
    options: &ValidateOptions,
    data: &CostData,
) -> Result<(String, Vec<Row>), String> {
    let replications = options.replications;
    let mut all = Vec::new();
    let mut records = Vec::new();
    let mut out = String::new();
    let mut reporter = crate::progress::Reporter::new(false);
    let _ = writeln!(
        out,
        "{:<48} {:>5} {:<18} {:>12} {:>24} {:>9}",
        "experiment", "stage", "metric", "real", "simulated", "error"
    );
    for dir in dirs {
        let experiment = Experiment::load(dir, data, options.tokenizer).map_err(|e| e.to_string())?;
        let with_model = cost_data_for(std::slice::from_ref(&experiment), data).map_err(|e| e.to_string())?;
        let held_out;
        let mut held_out_label = None;
        let data = if options.leave_one_out {
            // The fit that left out the experiment's model, or else the experiment itself.
            let labels = [
                crate::calibrate::model_fold_label(&experiment.model),
                crate::calibrate::experiment_fold_label(&experiment.name),
            ];
            let sample =
                with_model.registry.uncertainty().iter().find(|s| labels.contains(&s.label)).ok_or_else(
                    || {
                        format!(
                            "--leave-one-out: the registry has no uncertainty sample {:?} or {:?}",
                            labels[0], labels[1]
                        )
                    },
                )?;
            held_out =
                with_model.with_registry(with_model.registry.with_sample(sample).map_err(|e| e.to_string())?);
            held_out_label = Some(sample.label.clone());
            &held_out
        } else {
            &with_model
        };
        let mut simulated = simulate(&experiment, replications, options.stage_cap_s, data, &mut |r, p| {
            reporter.update(&format!("{} replication {}/{replications}", experiment.name, r + 1), p);
        })
        .map_err(|e| format!("{}: {e}", experiment.name))?;
        let experiment_rows = rows(&experiment, &simulated.stages);
        for row in &experiment_rows {
            let simulated = match row.half_width {
                Some(h) => format!("{:.6} ± {:.6}", row.simulated, h),
                None => format!("{:.6}", row.simulated),
            };
            let error = row.relative_error.map_or_else(|| "-".to_owned(), |e| format!("{:+.1}%", e * 100.0));
            let _ = writeln!(
                out,
                "{:<48} {:>5} {:<18} {:>12.6} {:>24} {:>9}",
                row.experiment, row.stage, row.metric, row.real, simulated, error
            );
        }
        let source = experiment
            .model_config
            .as_ref()
            .map_or_else(|| "the catalog".to_owned(), |p| p.display().to_string());
        let _ = writeln!(out, "  {}: model {} from {source}", experiment.name, experiment.model);
        let skipped = experiment.skipped();
        if !skipped.is_empty() {
            let _ =
                writeln!(out, "  {}: not published, not compared: {}", experiment.name, skipped.join(", "));
        }
        let mut overload = Value::Null;
        if experiment.overloaded() {
            let timed_out = |side: fn(&Row) -> f64| {
                experiment_rows
                    .iter()
                    .filter(|r| r.metric == "timed_out_fraction")
                    .map(side)
                    .fold(0.0, f64::max)
            };
            let (real, simulated) = (timed_out(|r| r.real), timed_out(|r| r.simulated));
            let verdict = if simulated > 0.0 { "and in the simulation" } else { "but NOT in the simulation" };
            let _ = writeln!(
                out,
                "{:<48} overloaded in the real run ({:.1}% of calls timed out) {verdict} ({:.1}%): latencies not scored",
                experiment.name,
                real * 100.0,
                simulated * 100.0
            );
            overload = json!({ "real_timed_out": real, "simulated_timed_out": simulated, "simulated_overloaded": simulated > 0.0 });
        }
        let _ = writeln!(out, "  {}: not modelled: {COLD_START}", experiment.name);
        if let Some(label) = held_out_label {
            // A sample replaces the bundle's values, not its fit range, so the range check above
            // still sees the joint fit's models; the fold that priced this run never saw it.
            simulated.validity.in_domain = false;
            simulated.validity.reasons.push(format!(
                "held out: priced by the uncertainty sample {label:?}, a fit that never saw this experiment"
            ));
        }
        let validity = &simulated.validity;
        let flag = if validity.in_domain {
            "in domain".to_owned()
        } else {
            format!("OUT OF DOMAIN: {}", validity.reasons.join("; "))
        };
        let _ = writeln!(out, "  {}: validity: {flag}", experiment.name);
        records.push(json!({
            "experiment": experiment.name,
            "model": experiment.model,
            "model_config": experiment.model_config.as_ref().map(|p| p.display().to_string()),
            "tensor_parallel": experiment.tensor_parallel,
            "tokenizer": experiment.tokenizer,
            "skipped": skipped,
            "overload": overload,
            "validity": validity,
            "not_modelled": [COLD_START],
            "rows": experiment_rows.iter().map(|r| json!({
                "stage": r.stage,
                "metric": r.metric,
                "real": r.real,
                "simulated": r.simulated,
                "half_width": r.half_width,
                "relative_error": r.relative_error,
            })).collect::<Vec<_>>(),
        }));
        all.extend(experiment_rows);
    }
    let medians = median_absolute_errors(&all);
    let _ = writeln!(out, "\nmedian absolute error over scored stages:");
    for (metric, error) in &medians {
        let _ = writeln!(out, "  {metric:<12} {:.1}%", error * 100.0);
    }
    let _ = writeln!(
        out,
        "(times in seconds; per_token = (mean request latency − mean TTFT) / (output_len − 1); the client's TPOT and ITL are left out: it stamped blank SSE lines too)"
    );
    reporter.finish();
    if let Some(path) = options.json {
        let document =
            json!({ "experiments": records, "median_absolute_error": medians, "replications": replications });
        let text = serde_json::to_string_pretty(&document).map_err(|e| format!("--json: {e}"))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("--json {}: cannot write: {e}", path.display()))?;
    }
    Ok((out, all))
}

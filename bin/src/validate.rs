//! `blis-actor validate-real DIR...`: each real experiment re-run as it ran, compared stage by
//! stage with what its client measured.

use std::fmt::Write;
use std::path::PathBuf;

use blis_actors::validation::{Experiment, Row, median_absolute_errors, rows, simulate};
use blis_costmodel::CostData;

/// Run every experiment and render the table and the median absolute errors; the rows too.
pub fn validate(
    dirs: &[PathBuf],
    replications: u32,
    stage_cap_s: Option<f64>,
    leave_one_out: bool,
    data: &CostData,
) -> Result<(String, Vec<Row>), String> {
    let mut all = Vec::new();
    let mut out = String::new();
    let mut reporter = crate::progress::Reporter::new(false);
    let _ = writeln!(
        out,
        "{:<48} {:>5} {:<18} {:>12} {:>24} {:>9}",
        "experiment", "stage", "metric", "real", "simulated", "error"
    );
    for dir in dirs {
        let experiment = Experiment::load(dir).map_err(|e| e.to_string())?;
        let held_out;
        let data = if leave_one_out {
            let label = format!("fitted without {}", experiment.name);
            let sample = data.registry.uncertainty().iter().find(|s| s.label == label).ok_or_else(|| {
                format!("--leave-one-out: the registry has no uncertainty sample {label:?}")
            })?;
            held_out = data.with_registry(data.registry.with_sample(sample).map_err(|e| e.to_string())?);
            &held_out
        } else {
            data
        };
        let simulated = simulate(&experiment, replications, stage_cap_s, data, &mut |r, p| {
            reporter.update(&format!("{} replication {}/{replications}", experiment.name, r + 1), p);
        })
        .map_err(|e| format!("{}: {e}", experiment.name))?;
        let experiment_rows = rows(&experiment, &simulated);
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
        }
        all.extend(experiment_rows);
    }
    let _ = writeln!(out, "\nmedian absolute error over scored stages:");
    for (metric, error) in median_absolute_errors(&all) {
        let _ = writeln!(out, "  {metric:<12} {:.1}%", error * 100.0);
    }
    let _ = writeln!(
        out,
        "(times in seconds; per_token = (mean request latency − mean TTFT) / (output_len − 1); the client's TPOT and ITL are left out: it stamped blank SSE lines too)"
    );
    reporter.finish();
    Ok((out, all))
}

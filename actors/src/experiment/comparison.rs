//! Comparing two configurations on common random numbers: both run the same replications with
//! the same seeds, so every replication of B is paired with its twin of A, and each metric is
//! judged better, worse or not distinguished from the paired differences.

use std::path::PathBuf;

use blis_contracts::{Better, FieldError, Scenario, metric};
use blis_costmodel::CostData;

use super::figures::scalars;
use crate::run::{Progress, RunError, RunOptions, RunOutput, run_observed};
use crate::stats::compare::{Comparison, Direction, compare_paired};
use crate::stats::interval::DEFAULT_LEVEL;

/// One metric of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricComparison {
    /// `metric.statistic`, as in the Result's estimates.
    pub name: String,
    /// Mean over A's replications.
    pub a: f64,
    /// Mean over B's replications.
    pub b: f64,
    /// B − A with its interval, and the verdict for B (for a metric better in neither
    /// direction, `Better` means B is lower and `Worse` that it is higher).
    pub comparison: Comparison,
    /// Which direction the metric registry calls better.
    pub better: Better,
}

/// One side of a comparison: a scenario text and the folder its files are named from.
#[derive(Clone, Debug)]
pub struct Configuration<'a> {
    /// The scenario text.
    pub text: &'a str,
    /// Where its workload files are (default: the working directory).
    pub base_dir: Option<PathBuf>,
}

/// Run `a` and `b` on the same seed and replications — A's seed and frame unless `options`
/// overrides them — each reading its files from its own folder, and compare every metric both
/// report in every replication; `progress` hears each side's progress (`"A"` or `"B"`).
pub fn compare_configs(
    a: &Configuration<'_>,
    b: &Configuration<'_>,
    options: &RunOptions,
    data: &CostData,
    progress: &mut dyn FnMut(&str, Progress),
) -> Result<(RunOutput, RunOutput, Vec<MetricComparison>), RunError> {
    let scenario_a = Scenario::parse(a.text).map_err(|e| RunError::Input(e.within("A")))?;
    let options = RunOptions {
        seed: options.seed.or(scenario_a.seed),
        replications: Some(options.replications.unwrap_or_else(|| scenario_a.frame.replications())),
        ..options.clone()
    };
    if options.replications == Some(1) {
        return Err(RunError::Input(FieldError::new(
            "--replications",
            1,
            "a comparison needs at least 2 paired replications to judge a difference",
        )));
    }
    let mut run = |config: &Configuration<'_>, side: &str| {
        let options = RunOptions { base_dir: config.base_dir.clone(), ..options.clone() };
        run_observed(config.text, options, data, Vec::new(), &mut |p| progress(side, p))
            .map(|(output, _)| output)
            .map_err(|e| match e {
                RunError::Input(e) => RunError::Input(e.within(side)),
                other => other,
            })
    };
    let output_a = run(a, "A")?;
    let output_b = run(b, "B")?;
    let values = |output: &RunOutput| -> Vec<Vec<(String, Option<f64>)>> {
        output.result.replications.iter().map(|r| scalars(&r.metrics)).collect()
    };
    let (values_a, values_b) = (values(&output_a), values(&output_b));
    let mut comparisons = Vec::new();
    for (k, (name, _)) in values_a[0].iter().enumerate() {
        let series =
            |all: &[Vec<(String, Option<f64>)>]| all.iter().map(|r| r[k].1).collect::<Option<Vec<f64>>>();
        let (Some(xs), Some(ys)) = (series(&values_a), series(&values_b)) else { continue };
        let id = name.split('.').next().unwrap_or(name);
        let better = metric(id).map_or(Better::Lower, |m| m.better);
        // A descriptive metric is judged as if lower were better; the verdict then reads as
        // lower or higher (see MetricComparison::better).
        let direction = match better {
            Better::Higher => Direction::HigherIsBetter,
            Better::Lower | Better::Neither => Direction::LowerIsBetter,
        };
        let Ok(comparison) = compare_paired(&xs, &ys, direction, DEFAULT_LEVEL) else { continue };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        comparisons.push(MetricComparison {
            name: name.clone(),
            a: mean(&xs),
            b: mean(&ys),
            comparison,
            better,
        });
    }
    Ok((output_a, output_b, comparisons))
}

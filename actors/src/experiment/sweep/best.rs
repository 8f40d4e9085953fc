//! The best point of a sweep on one figure, with the chance of naming a false winner held at
//! `α` across all points, and the winner re-estimated on fresh seeds.
//!
//! The procedure is a multiple comparison with the best (Hsu, *Multiple Comparisons*, 1996,
//! ch. 4) made with Bonferroni's inequality. Every ranked point ran the same replications on
//! the same seeds, so replication r of every point is paired with replication r of the others.
//! Let b be the point whose mean is best. For each other point j the paired-t interval on the
//! mean of `x_j − x_b` is formed at level `1 − α/(k−1)` (k points ranked). b is named the
//! winner only when every interval lies wholly on b's good side; otherwise the points whose
//! interval holds zero remain contenders with b and no winner is named. Why the chance of a
//! false winner is at most α: let t be a truly best point. With probability at least `1 − α`
//! (Bonferroni over the k−1 intervals of the differences from t) every such interval holds its
//! true difference, which is on t's side of zero; then no interval of a point b ≠ t can lie
//! wholly on b's side of zero against t, so b cannot be named.
//!
//! The winner's in-sample mean is biased toward the good side (it is the best of k noisy
//! means); its fresh-seed re-run, on replications from a seed of its own stream, is not.

use blis_contracts::{Better, EstimateRecord, FieldError};
use serde::Serialize;

use super::evaluate::{Evaluate, fresh_seed};
use super::figure::Figure;
use super::record::{PointRecord, PointStatus};
use crate::RunError;
use crate::stats::interval::{DEFAULT_LEVEL, estimate};

/// The name of the procedure, as reports give it.
pub const PROCEDURE: &str = "multiple comparison with the best, Bonferroni: paired-t intervals of every point's difference from the sample best at level 1 - alpha/(k-1); a winner is named only when every interval excludes zero on its side";

/// Which way the figure is to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    /// Smaller is better.
    Minimize,
    /// Larger is better.
    Maximize,
}

impl Goal {
    /// The registry's direction for `figure`, unless the caller chose one; a figure better in
    /// neither direction needs a choice.
    pub fn for_figure(figure: &Figure, chosen: Option<Goal>) -> Result<Goal, FieldError> {
        match (chosen, figure.better) {
            (Some(goal), _) => Ok(goal),
            (None, Better::Lower) => Ok(Goal::Minimize),
            (None, Better::Higher) => Ok(Goal::Maximize),
            (None, Better::Neither) => Err(FieldError::new(
                "--best",
                &figure.name,
                "this figure describes a run and is better in neither direction: give --minimize or --maximize",
            )),
        }
    }

    /// Whether `a` is better than `b`.
    fn better(self, a: f64, b: f64) -> bool {
        match self {
            Goal::Minimize => a < b,
            Goal::Maximize => a > b,
        }
    }
}

/// A point left out of the ranking, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Excluded {
    /// The point.
    pub point: usize,
    /// Why it is not ranked.
    pub reason: String,
}

/// A contender's paired difference from the sample best.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Difference {
    /// The point.
    pub point: usize,
    /// Its mean.
    pub mean: f64,
    /// Mean of its value minus the best's, replication by replication, with its interval.
    pub difference: EstimateRecord,
    /// Whether the interval excludes zero on the best's side.
    pub distinguished: bool,
}

/// The outcome of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Selection {
    /// The point with the best mean.
    pub best: usize,
    /// Its in-sample estimate (biased toward the good side).
    pub in_sample: EstimateRecord,
    /// Whether it is named the winner (every other point distinguished from it).
    pub winner: bool,
    /// The points not distinguished from it (it included).
    pub contenders: Vec<usize>,
    /// The level of each interval.
    pub level_each: f64,
    /// Each other ranked point's difference from it.
    pub differences: Vec<Difference>,
    /// The points not ranked.
    pub excluded: Vec<Excluded>,
}

/// The best of `records` on `figure` toward `goal`, the chance of a false winner at most
/// `alpha`. Refused when fewer than two replications, or no point, can be ranked.
pub fn select(
    records: &[PointRecord],
    figure: &str,
    goal: Goal,
    alpha: f64,
) -> Result<Selection, FieldError> {
    let mut excluded = Vec::new();
    let mut ranked: Vec<(usize, &[f64])> = Vec::new();
    for record in records {
        let reason = match (record.status, record.overloaded, record.replications.get(figure)) {
            (PointStatus::Refused | PointStatus::Failed, _, _) => {
                Some(format!("{}: {}", status_word(record.status), record.reason.as_deref().unwrap_or("")))
            }
            (_, true, _) => Some("overloaded: its latency figures are withheld".to_owned()),
            (_, _, None) => Some(format!("no {figure} in every replication")),
            (_, _, Some(values)) => {
                ranked.push((record.index, values));
                None
            }
        };
        if let Some(reason) = reason {
            excluded.push(Excluded { point: record.index, reason });
        }
    }
    let Some(&(_, first)) = ranked.first() else {
        return Err(FieldError::new("--best", figure, "no point can be ranked (see each point's status)"));
    };
    let n = first.len();
    if n < 2 {
        return Err(FieldError::new(
            "--best",
            figure,
            "ranking needs at least 2 paired replications per point",
        ));
    }
    if let Some(&(point, values)) = ranked.iter().find(|(_, v)| v.len() != n) {
        return Err(FieldError::new(
            "--best",
            figure,
            format!(
                "point {point} has {} replications, point {} has {n}: they cannot be paired",
                values.len(),
                ranked[0].0
            ),
        ));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mut best = 0;
    for (k, (_, values)) in ranked.iter().enumerate() {
        if goal.better(mean(values), mean(ranked[best].1)) {
            best = k;
        }
    }
    let comparisons = ranked.len().saturating_sub(1).max(1);
    let level_each = 1.0 - alpha / comparisons as f64;
    let record = |values: &[f64], level: f64| {
        let e = estimate(values, level).expect("finite replication values");
        EstimateRecord { mean: e.mean, half_width: e.half_width, n: e.n as u64, level: e.level }
    };
    let (best_point, best_values) = ranked[best];
    let mut differences = Vec::new();
    let mut contenders = vec![best_point];
    for (k, &(point, values)) in ranked.iter().enumerate() {
        if k == best {
            continue;
        }
        let deltas: Vec<f64> = values.iter().zip(best_values).map(|(x, b)| x - b).collect();
        let difference = record(&deltas, level_each);
        let h = difference.half_width.unwrap_or(f64::INFINITY);
        let distinguished = match goal {
            Goal::Minimize => difference.mean - h > 0.0,
            Goal::Maximize => difference.mean + h < 0.0,
        };
        if !distinguished {
            contenders.push(point);
        }
        differences.push(Difference { point, mean: mean(values), difference, distinguished });
    }
    Ok(Selection {
        best: best_point,
        in_sample: record(best_values, DEFAULT_LEVEL),
        winner: contenders.len() == 1,
        contenders,
        level_each,
        differences,
        excluded,
    })
}

fn status_word(status: PointStatus) -> &'static str {
    match status {
        PointStatus::Ran => "ran",
        PointStatus::Refused => "refused",
        PointStatus::Failed => "failed",
    }
}

/// The fresh-seed re-run of the sample best.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FreshRun {
    /// Its seed ([`fresh_seed`] of the sweep's).
    pub seed: u64,
    /// Its replications (as many as the sweep's).
    pub replications: u32,
    /// The figure's estimate and interval over them; absent when it has none (overloaded).
    pub estimate: Option<EstimateRecord>,
    /// Whether the re-run was overloaded.
    pub overloaded: bool,
}

/// `best.json`: the comparison and the fresh-seed re-estimate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BestReport {
    /// The figure.
    pub figure: String,
    /// Which way.
    pub goal: Goal,
    /// The chance of a false winner allowed.
    pub alpha: f64,
    /// How the winner is named ([`PROCEDURE`]).
    pub procedure: &'static str,
    /// The comparison.
    pub selection: Selection,
    /// The sample best on fresh seeds.
    pub fresh: FreshRun,
}

/// Select the best of `records` (run on `seed`) and re-run it with `evaluator` on fresh seeds.
pub fn best(
    records: &[PointRecord],
    figure: &str,
    goal: Goal,
    alpha: f64,
    seed: u64,
    evaluator: &mut dyn Evaluate,
) -> Result<BestReport, RunError> {
    let selection = select(records, figure, goal, alpha).map_err(RunError::Input)?;
    let replications = records
        .iter()
        .find(|r| r.index == selection.best)
        .and_then(|r| r.replications.get(figure))
        .map_or(0, |v| v.len() as u32);
    let fresh = fresh_seed(seed);
    let rerun = evaluator.evaluate(selection.best, fresh, replications)?;
    let fresh_run = FreshRun {
        seed: fresh,
        replications,
        estimate: rerun.estimates.get(figure).copied(),
        overloaded: rerun.overloaded,
    };
    Ok(BestReport {
        figure: figure.to_owned(),
        goal,
        alpha,
        procedure: PROCEDURE,
        selection,
        fresh: fresh_run,
    })
}

#[cfg(test)]
mod tests {
    use super::super::stub::{FIGURE, Stub};
    use super::*;

    /// Every point of `stub` on `seed` with `n` replications.
    fn records(stub: &mut Stub, seed: u64, n: u32) -> Vec<PointRecord> {
        (0..stub.truth.len()).map(|i| stub.evaluate(i, seed, n).unwrap()).collect()
    }

    #[test]
    fn among_twenty_equal_configurations_the_fresh_re_estimate_of_the_winner_is_not_biased() {
        // 20 configurations of equal true mean 100 (sd 10, 5 replications each, independent
        // noise), 400 sweeps. The sample best's in-sample mean is the least of 20 noisy means:
        // about 100 − 1.87·10/√5 ≈ 91.6. Its fresh-seed re-estimate must average 100 (standard
        // error 10/√5/√400 ≈ 0.22), and a winner must almost never be named.
        let trials = 400;
        let (mut in_sample, mut fresh, mut named) = (0.0, 0.0, 0);
        for trial in 0..trials {
            let mut stub = Stub::new(vec![100.0; 20], 10.0);
            let rows = records(&mut stub, 1_000 + trial, 5);
            let report = best(&rows, FIGURE, Goal::Minimize, 0.05, 1_000 + trial, &mut stub).unwrap();
            in_sample += report.selection.in_sample.mean;
            fresh += report.fresh.estimate.unwrap().mean;
            named += usize::from(report.selection.winner);
            let (last, seed, n) = *stub.asked.last().unwrap();
            assert_eq!((last, seed, n), (report.selection.best, fresh_seed(1_000 + trial), 5));
        }
        let (in_sample, fresh) = (in_sample / trials as f64, fresh / trials as f64);
        assert!(in_sample < 94.0, "the in-sample winner is biased low: {in_sample}");
        assert!((fresh - 100.0).abs() < 0.9, "the fresh re-estimate is unbiased: {fresh}");
        assert!(named as f64 / trials as f64 <= 0.05, "false winners named in {named} of {trials} sweeps");
    }

    #[test]
    fn a_truly_better_configuration_is_named_winner() {
        let mut truth = vec![100.0; 8];
        truth[5] = 80.0;
        let mut stub = Stub::new(truth, 5.0);
        let rows = records(&mut stub, 7, 10);
        let report = best(&rows, FIGURE, Goal::Minimize, 0.05, 7, &mut stub).unwrap();
        assert_eq!(report.selection.best, 5);
        assert!(report.selection.winner, "{:?}", report.selection);
        assert_eq!(report.selection.contenders, vec![5]);
        assert!((report.selection.level_each - (1.0 - 0.05 / 7.0)).abs() < 1e-12);
        assert!(report.fresh.estimate.unwrap().half_width.unwrap() < 10.0);
    }

    #[test]
    fn overloaded_and_refused_points_are_never_ranked() {
        let mut stub = Stub::new(vec![50.0, 100.0, 100.0], 5.0);
        stub.overloaded = vec![0];
        let mut rows = records(&mut stub, 3, 5);
        rows[2] = PointRecord::not_run(2, Vec::new(), PointStatus::Refused, "does not fit".into());
        let selection = select(&rows, FIGURE, Goal::Minimize, 0.05).unwrap();
        assert_eq!(selection.best, 1);
        assert_eq!(
            selection.excluded,
            vec![
                Excluded { point: 0, reason: "overloaded: its latency figures are withheld".into() },
                Excluded { point: 2, reason: "refused: does not fit".into() },
            ]
        );
        let one = records(&mut Stub::new(vec![1.0], 1.0), 3, 1);
        assert!(select(&one, FIGURE, Goal::Minimize, 0.05).unwrap_err().cause.contains("at least 2"));
    }
}

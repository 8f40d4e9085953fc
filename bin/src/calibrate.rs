//! `blis-actor calibrate DIR...`: fit the calibrated bundle on real experiments, with the fits
//! that leave one experiment out as its uncertainty, and write the registry.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use blis_actors::experiment::calibration::{
    BUNDLE, CalibrationOptions, Fit, calibrated_registry, fit, scaled, terms_for,
};
use blis_actors::experiment::validation::{Experiment, cost_data_for};
use blis_contracts::FieldError;
use blis_costmodel::{CoefficientSample, CostData};

/// Fit, leave each experiment out in turn, write the registry to `out`; the report.
pub fn calibrate(
    dirs: &[PathBuf],
    out: &Path,
    options: &CalibrationOptions,
    data: &CostData,
) -> Result<String, String> {
    let experiments: Vec<Experiment> = dirs
        .iter()
        .map(|d| Experiment::load(d, data, None).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let with_models = cost_data_for(&experiments, data).map_err(|e| e.to_string())?;
    let data = &with_models;
    let terms = terms_for(&experiments, data);
    // Each leave-one-out fit gets a third of the budget and must still build its simplex.
    let least = 3 * (terms.len() + 1);
    if options.evaluations < least {
        return Err(FieldError::new(
            "--evaluations",
            options.evaluations,
            format!("must be at least {least} (each leave-one-out fit gets a third, and a simplex over {} terms takes {})", terms.len(), terms.len() + 1),
        )
        .to_string());
    }
    let mut report = String::new();
    // Progress on stderr: a line every tenth evaluation of each fit.
    let progress = |label: String, budget: usize| {
        move |evaluation: usize, best: f64| {
            if evaluation.is_multiple_of(10) || evaluation == budget {
                eprintln!("calibrate: {label}: evaluation {evaluation}/{budget}, best objective {best:.5}");
            }
        }
    };
    let mut report_full = progress("full fit".to_owned(), options.evaluations);
    let full = fit(data, &experiments, &terms, None, options, &mut report_full).map_err(|e| e.to_string())?;
    let _ = writeln!(
        report,
        "fitted on {} experiments ({} evaluations), objective {:.5}",
        experiments.len(),
        full.evaluations,
        full.objective
    );
    // Each experiment left out in turn, starting from the full fit: the spread of these fits is
    // the bundle's uncertainty (a jackknife over experiments).
    let leave_out = CalibrationOptions { evaluations: options.evaluations / 3, ..options.clone() };
    let mut samples = Vec::new();
    let mut jackknife: Vec<Fit> = Vec::new();
    for (i, experiment) in experiments.iter().enumerate() {
        let rest: Vec<Experiment> =
            experiments.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, e)| e.clone()).collect();
        let rest_terms = terms_for(&rest, data);
        let start: Vec<f64> = rest_terms
            .iter()
            .map(|t| {
                full.values
                    .iter()
                    .zip(scaled(&full))
                    .find(|((u, _), _)| u.name == t.name)
                    .map_or(0.5, |(_, s)| s)
            })
            .collect();
        let mut report_fit = progress(
            format!("fit {}/{} without {}", i + 1, experiments.len(), experiment.name),
            leave_out.evaluations,
        );
        let fit = fit(data, &rest, &rest_terms, Some(&start), &leave_out, &mut report_fit)
            .map_err(|e| e.to_string())?;
        samples.push(CoefficientSample {
            bundle: BUNDLE.to_owned(),
            label: format!("fitted without {}", experiment.name),
            params: fit
                .values
                .iter()
                .flat_map(|(t, v)| {
                    t.params.iter().map(move |(p, f)| (format!("{}.{p}", t.family.as_str()), v * f))
                })
                .collect(),
        });
        jackknife.push(fit);
    }
    let _ = writeln!(
        report,
        "{:<38} {:>12} {:>26} {:>12}",
        "term", "value", "range leaving one out", "literature"
    );
    for (term, value) in &full.values {
        let others: Vec<f64> = jackknife
            .iter()
            .filter_map(|f| f.values.iter().find(|(t, _)| t.name == term.name).map(|(_, v)| *v))
            .collect();
        let (low, high) =
            others.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(*v), h.max(*v)));
        let literature = term.prior.map_or("-".to_owned(), |p| format!("{:.4}", p.centre));
        let _ = writeln!(
            report,
            "{:<38} {:>12.4} {:>12.4} – {:<12.4} {:>12}",
            term.name, value, low, high, literature
        );
    }
    let registry = calibrated_registry(&data.registry, &full.values, &experiments)
        .and_then(|r| r.with_uncertainty(samples))
        .map_err(|e| e.to_string())?;
    std::fs::write(out, registry.to_yaml()).map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    let _ = writeln!(report, "wrote {}", out.display());
    Ok(report)
}

//! `blis-actor calibrate DIR...`: fit the calibrated bundle on real experiments, with the fits
//! that leave one experiment out as its uncertainty, and write the registry.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use blis_actors::experiment::calibration::{
    BUNDLE, CalibrationOptions, Fit, calibrated_registry, fit, sample_params, scaled, terms_for,
};
use blis_actors::experiment::validation::{Experiment, cost_data_for};
use blis_contracts::FieldError;
use blis_costmodel::{CoefficientSample, CostData};

/// The most objective evaluations one fit may spend: at ~0.4 s each on sixteen runs, about 11
/// hours, a hundred times what a converged fit takes; a budget beyond it would never end.
pub const MAX_EVALUATIONS: usize = 100_000;

/// What each held-out fit of a calibration leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HoldOut {
    /// Every run of one model: how the bundle transfers to a model it never saw.
    Model,
    /// One experiment: how it transfers to another workload of models it saw.
    Experiment,
}

/// The held-out fits a calibration makes besides the joint one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Folds {
    /// What each leaves out; by model when the runs serve more than one, else by experiment.
    pub hold_out: Option<HoldOut>,
    /// Each one's evaluation budget; a third of the joint fit's when absent.
    pub evaluations: Option<usize>,
}

/// Fit, leave each model (or experiment) out in turn, write the registry to `out`; the report.
pub fn calibrate(
    dirs: &[PathBuf],
    out: &Path,
    options: &CalibrationOptions,
    folds: &Folds,
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
    let simplex = terms.len() + 1;
    let least = 3 * simplex;
    if options.evaluations < least {
        return Err(FieldError::new(
            "--evaluations",
            options.evaluations,
            format!("must be at least {least} (each leave-one-out fit gets a third, and a simplex over {} terms takes {simplex})", terms.len()),
        )
        .to_string());
    }
    if options.evaluations > MAX_EVALUATIONS {
        return Err(FieldError::new(
            "--evaluations",
            options.evaluations,
            format!("must be at most {MAX_EVALUATIONS} (a converged fit takes about 1,000; each evaluation re-simulates every run)"),
        )
        .to_string());
    }
    if let Some(fold_evaluations) = folds.evaluations
        && fold_evaluations > MAX_EVALUATIONS
    {
        return Err(FieldError::new(
            "--fold-evaluations",
            fold_evaluations,
            format!(
                "must be at most {MAX_EVALUATIONS} (a held-out fit starts at the joint one and needs fewer)"
            ),
        )
        .to_string());
    }
    if let Some(fold_evaluations) = folds.evaluations
        && fold_evaluations < simplex
    {
        return Err(FieldError::new(
            "--fold-evaluations",
            fold_evaluations,
            format!("must be at least {simplex} (a simplex over {} terms)", terms.len()),
        )
        .to_string());
    }
    // Decided before the joint fit, so a fold that cannot be made is refused at once.
    let held_out = held_out_folds(&experiments, folds.hold_out)?;
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
        "fitted on {} experiments ({} evaluations), objective {:.5}; {}",
        experiments.len(),
        full.evaluations,
        full.objective,
        convergence(&full)
    );
    // The identification at the full fit: which terms the runs pin, and which they confuse.
    let mut report_identification = |evaluation: usize| {
        if evaluation.is_multiple_of(10) {
            eprintln!("calibrate: identification: evaluation {evaluation}");
        }
    };
    let identification = if options.identification {
        Some(
            blis_actors::experiment::calibration::identification(
                data,
                &experiments,
                &full,
                options,
                &mut report_identification,
            )
            .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    // Each model left out in turn (each experiment, when all serve one model), starting from the
    // full fit: the spread of these fits is the bundle's uncertainty, and each is the fit a
    // `validate-real --leave-one-out` of the held-out runs uses.
    let leave_out = CalibrationOptions {
        evaluations: folds.evaluations.unwrap_or(options.evaluations / 3),
        ..options.clone()
    };
    let mut samples = Vec::new();
    let mut jackknife: Vec<Fit> = Vec::new();
    for (i, (label, held)) in held_out.iter().enumerate() {
        let rest: Vec<Experiment> = experiments.iter().filter(|e| !held(e)).cloned().collect();
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
        let mut report_fit =
            progress(format!("fit {}/{} {label}", i + 1, held_out.len()), leave_out.evaluations);
        let fit = fit(data, &rest, &rest_terms, Some(&start), &leave_out, &mut report_fit)
            .map_err(|e| e.to_string())?;
        let _ = writeln!(
            report,
            "{label}: {} experiments, objective {:.5}; {}; terms no training run identifies (kept from beneath the bundle): {}",
            rest.len(),
            fit.objective,
            convergence(&fit),
            unidentified(&terms, &rest_terms)
        );
        samples.push(CoefficientSample {
            bundle: BUNDLE.to_owned(),
            label: label.clone(),
            params: sample_params(&data.registry, &terms, &fit.values),
        });
        jackknife.push(fit);
    }
    let _ = writeln!(
        report,
        "{:<38} {:>12} {:>12} {:>26} {:>12} {:>36}",
        "term", "value", "std error", "range over the folds", "literature", "most correlated with"
    );
    for (i, (term, value)) in full.values.iter().enumerate() {
        let others: Vec<f64> = jackknife
            .iter()
            .filter_map(|f| f.values.iter().find(|(t, _)| t.name == term.name).map(|(_, v)| *v))
            .collect();
        let (low, high) =
            others.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(*v), h.max(*v)));
        let literature = term.prior.map_or("-".to_owned(), |p| format!("{:.4}", p.centre));
        let (error, partner) = match &identification {
            None => ("-".to_owned(), "-".to_owned()),
            Some(id) => (
                id.standard_errors[i].map_or_else(|| "not identified".to_owned(), |e| format!("{e:.4}")),
                id.strongest_partner(i).map_or_else(|| "-".to_owned(), |(name, c)| format!("{name} {c:+.2}")),
            ),
        };
        let _ = writeln!(
            report,
            "{:<38} {:>12.4} {:>12} {:>12.4} – {:<12.4} {:>12} {:>36}",
            term.name, value, error, low, high, literature, partner
        );
    }
    let registry = calibrated_registry(&data.registry, &full.values, &experiments)
        .and_then(|r| r.with_uncertainty(samples))
        .map_err(|e| e.to_string())?;
    std::fs::write(out, registry.to_yaml()).map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    let _ = writeln!(report, "wrote {}", out.display());
    Ok(report)
}

/// A held-out fold: its uncertainty sample's label, and which experiments it leaves out.
type Fold = (String, Box<dyn Fn(&Experiment) -> bool>);

/// The held-out folds of a calibration on `experiments`: one per model, labelled
/// `fitted without model M`, when `hold_out` says so or, unsaid, when they serve more than one
/// model; otherwise one per experiment, `fitted without E`. Folds by model over runs of one
/// model (which would leave nothing to fit) are refused.
fn held_out_folds(experiments: &[Experiment], hold_out: Option<HoldOut>) -> Result<Vec<Fold>, String> {
    let mut models: Vec<String> = experiments.iter().map(|e| e.model.clone()).collect();
    models.sort();
    models.dedup();
    let by_model = match hold_out {
        Some(HoldOut::Model) if models.len() < 2 => {
            return Err(FieldError::new(
                "--hold-out",
                "model",
                format!("needs runs of at least two models; every run given serves {}", models.join(", ")),
            )
            .to_string());
        }
        Some(HoldOut::Model) => true,
        Some(HoldOut::Experiment) => false,
        None => models.len() > 1,
    };
    Ok(if by_model {
        models
            .into_iter()
            .map(|model| {
                let label = model_fold_label(&model);
                let held: Box<dyn Fn(&Experiment) -> bool> = Box::new(move |e| e.model == model);
                (label, held)
            })
            .collect()
    } else {
        experiments
            .iter()
            .map(|experiment| {
                let name = experiment.name.clone();
                let label = experiment_fold_label(&name);
                let held: Box<dyn Fn(&Experiment) -> bool> = Box::new(move |e| e.name == name);
                (label, held)
            })
            .collect()
    })
}

/// The uncertainty sample's label of the fit that left out every run of `model`.
pub fn model_fold_label(model: &str) -> String {
    format!("fitted without model {model}")
}

/// The uncertainty sample's label of the fit that left out the one experiment `name`.
pub fn experiment_fold_label(name: &str) -> String {
    format!("fitted without {name}")
}

/// The names of `all`'s terms missing from `fitted`, or `none`.
fn unidentified(
    all: &[blis_actors::experiment::calibration::Term],
    fitted: &[blis_actors::experiment::calibration::Term],
) -> String {
    let missing: Vec<&str> =
        all.iter().filter(|t| !fitted.iter().any(|f| f.name == t.name)).map(|t| t.name).collect();
    if missing.is_empty() { "none".to_owned() } else { missing.join(", ") }
}

/// A fit's convergence, for the report.
fn convergence(fit: &Fit) -> String {
    let c = &fit.convergence;
    format!(
        "{} after {} simplices (last {}; final simplex: objectives within {:.2e}, vertices within {:.2e} of the best in unit-cube coordinates; the objective's roughness {})",
        if c.converged { "converged" } else { "NOT converged" },
        c.simplices,
        c.last_stop.as_str(),
        c.final_spread,
        c.final_diameter,
        c.roughness.map_or_else(
            || "not measured: the first simplex spent the budget".to_owned(),
            |r| format!("{r:.2e}")
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiments(names: &[&str]) -> Vec<Experiment> {
        let data = CostData::embedded();
        let root = format!("{}/../fixtures/reference-data/real-vllm-h100", env!("CARGO_MANIFEST_DIR"));
        names
            .iter()
            .map(|n| Experiment::load(Path::new(&format!("{root}/{n}")), &data, None).unwrap())
            .collect()
    }

    fn labels(experiments: &[Experiment], hold_out: Option<HoldOut>) -> Vec<(String, usize)> {
        held_out_folds(experiments, hold_out)
            .unwrap()
            .iter()
            .map(|(label, held)| (label.clone(), experiments.iter().filter(|e| held(e)).count()))
            .collect()
    }

    #[test]
    fn folds_leave_out_a_model_by_default_and_one_experiment_when_asked() {
        let runs = experiments(&[
            "20260217-155451-llama-2-7b-tp1-codegen",
            "20260217-162547-llama-2-7b-tp1-roleplay",
            "20260218-150304-codellama-34b-tp2-general",
        ]);
        let by_model = vec![
            ("fitted without model codellama/CodeLlama-34b-Instruct-hf".to_owned(), 1),
            ("fitted without model meta-llama/Llama-2-7b-hf".to_owned(), 2),
        ];
        assert_eq!(labels(&runs, None), by_model);
        assert_eq!(labels(&runs, Some(HoldOut::Model)), by_model);
        assert_eq!(
            labels(&runs, Some(HoldOut::Experiment)),
            vec![
                ("fitted without 20260217-155451-llama-2-7b-tp1-codegen".to_owned(), 1),
                ("fitted without 20260217-162547-llama-2-7b-tp1-roleplay".to_owned(), 1),
                ("fitted without 20260218-150304-codellama-34b-tp2-general".to_owned(), 1),
            ]
        );
        // Runs of one model are held out one experiment at a time unless told otherwise.
        assert_eq!(labels(&runs[..2], None).len(), 2);
    }
}

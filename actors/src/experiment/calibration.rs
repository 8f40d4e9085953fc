//! Calibration: a few shared physical terms of the cost model fitted, with the simulator in the
//! loop, to real experiments, written as one `calibrated` bundle of the registry.
//!
//! The terms (`TERMS`) are the sustained shares of the chip's peaks (GEMM compute, GEMM weight
//! streaming, paged-attention KV reads), the all-reduce latency over 2 GPUs and over 4 (each
//! fitted only when a training experiment runs at that degree), the host's CPU time per step,
//! per tensor-parallel worker and per scheduled request, the
//! API server's time per request and, when a training experiment serves an MoE model, the routing
//! time per MoE layer. They are shared by every model and experiment: nothing is fitted per
//! experiment. The objective is the sum over training stages of squared log ratios of simulated to
//! real mean TTFT, mean request latency and per-token time — for an overloaded experiment the
//! per-token time only (its decode runs at full batch; its latencies measure the queue) — each
//! divided by the squared model error expected of a figure (`FIGURE_SIGMA`), plus, for the terms
//! the literature measures (`Prior`), a log-normal penalty around the literature's value. The
//! prior only decides what the training runs cannot: within one model and tensor-parallel degree
//! the host's step time, the all-reduces and the weight streaming are all fixed costs per decode
//! step, and an MoE model's routing time is a fixed cost per layer like its all-reduces; without
//! it the split between them wanders and does not transfer to another model or degree. Each
//! evaluation re-simulates every training experiment (stages shortened, one fixed seed). The
//! minimiser is a bounded Nelder–Mead on the terms scaled to [0, 1], restarted whenever its simplex
//! collapses.

use std::collections::BTreeMap;

use blis_contracts::{FieldError, Rank};
use blis_costmodel::{CostData, Entry, Family, FitRange, Registry};

use super::identification::{Identification, identify};
use super::validation::{Experiment, Simulated, simulate};
use crate::run::RunError;

/// The bundle calibration writes.
pub const BUNDLE: &str = "vllm-0.15.1-h100";

/// The chip the reference experiments ran on.
pub const CHIP: &str = "H100-SXM";

/// The relative error expected of a simulated figure once calibrated (the data term's scale).
pub const FIGURE_SIGMA: f64 = 0.05;

/// A literature value a term is drawn toward: log-normal around `centre` with log-scale
/// standard deviation `sigma`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prior {
    /// The literature's value.
    pub centre: f64,
    /// How far from it, as a standard deviation of the log, the literature leaves the value.
    pub sigma: f64,
    /// Where the value and its spread come from.
    pub source: &'static str,
}

/// One fitted term: a value shared by one or more parameters of a family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Term {
    /// Its name, `family.parameter`.
    pub name: &'static str,
    /// The family.
    pub family: Family,
    /// The family's parameters that take its value, each times a fixed factor (the ratio the
    /// physics fixes between them, e.g. an all-reduce over 4 GPUs against one over 2).
    pub params: &'static [(&'static str, f64)],
    /// Its bounds.
    pub bounds: (f64, f64),
    /// Where the search starts: the previous converged bundle's value (2026-12-04), so a
    /// refit of a changed structure starts from the optimum it extends rather than from scratch.
    pub initial: f64,
    /// Which training experiments identify it; without one it keeps the registry's value.
    pub needs: Needs,
    /// The literature's value for it, if the literature measures it.
    pub prior: Option<Prior>,
}

/// What a term needs among the training experiments to be identified at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Every experiment informs it.
    Any,
    /// An experiment serving an MoE model (routing exists only there).
    Moe,
    /// An experiment at one of these tensor-parallel degrees (the all-reduce it prices runs
    /// only there).
    TensorParallel(&'static [u32]),
}

/// The terms calibration fits.
pub const TERMS: &[Term] = &[
    Term {
        name: "gemm.compute_efficiency",
        family: Family::Gemm,
        params: &[("compute_efficiency", 1.0)],
        bounds: (0.2, 1.0),
        initial: 0.987,
        needs: Needs::Any,
        prior: None,
    },
    Term {
        name: "gemm.memory_efficiency",
        family: Family::Gemm,
        params: &[("memory_efficiency", 1.0)],
        bounds: (0.3, 1.0),
        initial: 0.729,
        needs: Needs::Any,
        prior: None,
    },
    // Paged KV reads: block-table gathers reach a lower share of the bandwidth than streaming
    // weights. Only a model with many KV heads per token makes them a large share of a step,
    // so without one the prior holds the value.
    Term {
        name: "decode_attention.memory_efficiency",
        family: Family::DecodeAttention,
        params: &[("memory_efficiency", 1.0)],
        bounds: (0.15, 1.0),
        initial: 0.793,
        needs: Needs::Any,
        prior: Some(Prior {
            centre: 0.69,
            sigma: 0.25,
            source: "PagedAttention (Kwon et al., SOSP 2023, §7.1): the paged decode kernel runs 20–26% slower than FasterTransformer's contiguous one (block-table lookups, extra branches), applied to streaming's 0.8–0.9 of peak bandwidth (costmodel-facts.md §3.5): 0.85 / 1.23 ≈ 0.69, a quarter either way in log",
        }),
    },
    // The all-reduce's latency over 2 GPUs and over 4 (and 8, which Vidur's H100 profile puts
    // level with 4) are separate terms, each identified only by runs at its degree; a degree no
    // training run has keeps the literature's value.
    Term {
        name: "all_reduce.latency_us_tp2",
        family: Family::AllReduce,
        params: &[("latency_us_tp2", 1.0)],
        bounds: (0.0, 40.0),
        initial: 3.1,
        needs: Needs::TensorParallel(&[2]),
        prior: Some(Prior {
            centre: 7.0,
            sigma: std::f64::consts::LN_2,
            source: "Vidur's NCCL all-reduce of 2 KB on H100 DGX, 7 µs at TP2 (costmodel-facts.md §1); vLLM runs its own all-reduce kernel for small messages, so a factor of 2 either way",
        }),
    },
    Term {
        name: "all_reduce.latency_us_tp4",
        family: Family::AllReduce,
        params: &[("latency_us_tp4", 1.0), ("latency_us_tp8", 1.0)],
        bounds: (0.0, 120.0),
        initial: 27.0,
        needs: Needs::TensorParallel(&[3, 4, 5, 6, 7, 8]),
        prior: Some(Prior {
            centre: 37.0,
            sigma: std::f64::consts::LN_2,
            source: "Vidur's NCCL all-reduce of 2 KB on H100 DGX, ~37 µs at TP4 and TP8 (costmodel-facts.md §1); vLLM runs its own all-reduce kernel for small messages, so a factor of 2 either way",
        }),
    },
    Term {
        name: "host.step_us",
        family: Family::Host,
        params: &[("step_us", 1.0)],
        bounds: (0.0, 6000.0),
        initial: 3840.0,
        needs: Needs::Any,
        prior: Some(Prior {
            centre: 3240.0,
            sigma: 0.77,
            source: "peers.md §9 (inference-sim #480/#482): real vLLM spends 0.5–2 ms scheduling and 1–5 ms preparing inputs per step, i.e. 1.5–7 ms, taken as one standard deviation either side of the geometric mean",
        }),
    },
    // vLLM's multiprocess executor hands every step to each tensor-parallel worker process and
    // waits on them: CPU time that grows with the workers. The literature measured one GPU; only
    // runs at two degrees or more (or one GPU against several) tell it from the step's own time.
    Term {
        name: "host.step_us_per_peer",
        family: Family::Host,
        params: &[("step_us_per_peer", 1.0)],
        bounds: (0.0, 3000.0),
        initial: 190.0,
        needs: Needs::TensorParallel(&[2, 3, 4, 5, 6, 7, 8]),
        prior: None,
    },
    // The engine's CPU work that grows with the batch: scheduling, input preparation and
    // output processing walk every scheduled request each step. Runs whose batches differ in
    // size tell it from the fixed step time; the literature gives no per-request figure.
    Term {
        name: "host.request_us",
        family: Family::Host,
        params: &[("request_us", 1.0)],
        bounds: (0.0, 300.0),
        initial: 0.0,
        needs: Needs::Any,
        prior: None,
    },
    Term {
        name: "frontend.request_us",
        family: Family::Frontend,
        params: &[("request_us", 1.0)],
        bounds: (0.0, 40_000.0),
        initial: 6850.0,
        needs: Needs::Any,
        prior: None,
    },
    Term {
        name: "moe_dispatch.latency_us",
        family: Family::MoeDispatch,
        params: &[("latency_us", 1.0)],
        bounds: (0.0, 400.0),
        initial: 2.0,
        needs: Needs::Moe,
        prior: None,
    },
];

/// How to calibrate.
#[derive(Clone, Debug)]
pub struct CalibrationOptions {
    /// Stages shortened to this many seconds in every evaluation.
    pub stage_cap_s: f64,
    /// Objective evaluations at most.
    pub evaluations: usize,
    /// Whether to measure the terms' identification at the full fit (the objective's curvature;
    /// `2n² + 1` more evaluations over `n` terms).
    pub identification: bool,
}

impl Default for CalibrationOptions {
    fn default() -> CalibrationOptions {
        CalibrationOptions { stage_cap_s: 150.0, evaluations: 220, identification: true }
    }
}

/// A fit: the terms used and their values, the objective reached, evaluations spent.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The terms fitted, with their values.
    pub values: Vec<(Term, f64)>,
    /// The objective at the values.
    pub objective: f64,
    /// Evaluations spent.
    pub evaluations: usize,
    /// How the search ended.
    pub convergence: Convergence,
}

/// Why one Nelder–Mead simplex stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Its vertices' objectives agree to a millionth: converged.
    Collapsed,
    /// Its best gained under a thousandth over the last 10(n + 1) evaluations.
    Stalled,
    /// The evaluation budget ran out first: not converged.
    Budget,
}

impl Stop {
    /// A word for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::Collapsed => "collapsed",
            Stop::Stalled => "stalled",
            Stop::Budget => "budget spent",
        }
    }
}

/// How a restarted Nelder–Mead search ended: the test it met, and its final simplex.
#[derive(Clone, Debug, PartialEq)]
pub struct Convergence {
    /// Simplices run (the first and each restart from the best point).
    pub simplices: usize,
    /// Why the last simplex stopped.
    pub last_stop: Stop,
    /// Whether the search converged: its last restart gained no more than the objective's
    /// roughness (or a millionth of it, if larger) — a fresh simplex around the best point finds
    /// nothing better than the objective can tell apart — and it did not end on the budget.
    pub converged: bool,
    /// The objective's roughness at the first simplex's best point: the root mean square of
    /// half its second differences at a step of [`ROUGHNESS_STEP`] along each coordinate
    /// (`(f(x + h) − 2 f(x) + f(x − h)) / 2`, which the slope does not enter): what a step of a
    /// thousandth changes beyond the slope — the curvature at that scale, plus the steps of an
    /// objective that is piecewise constant at fine scales, as a simulator in the loop is. A
    /// gain below it is below what the fit resolves. `None` when the first simplex spent the
    /// budget, so it was never measured.
    pub roughness: Option<f64>,
    /// The last simplex's spread of objective values, best to worst.
    pub final_spread: f64,
    /// The last simplex's largest distance of a vertex from the best one, in the unit-cube
    /// coordinates the search runs in.
    pub final_diameter: f64,
}

/// The terms that apply to `experiments`: those some experiment identifies.
pub fn terms_for(experiments: &[Experiment], data: &CostData) -> Vec<Term> {
    let moe = experiments
        .iter()
        .any(|e| data.catalog.model(&e.model, "").is_ok_and(|m| m.architecture.moe.is_some()));
    TERMS
        .iter()
        .copied()
        .filter(|t| match t.needs {
            Needs::Any => true,
            Needs::Moe => moe,
            Needs::TensorParallel(degrees) => {
                experiments.iter().any(|e| degrees.contains(&e.tensor_parallel))
            }
        })
        .collect()
}

/// `base` with the calibrated bundle holding `values`, fitted on `experiments` (named in the
/// entries' source and tensor-parallel range).
pub fn calibrated_registry(
    base: &Registry,
    values: &[(Term, f64)],
    experiments: &[Experiment],
) -> Result<Registry, FieldError> {
    // The terms not fitted keep the values beneath any earlier bundle: an earlier fit must not
    // carry what it learnt from runs this fit leaves out.
    let beneath = base.without_bundle(BUNDLE);
    let resolved = beneath.resolve(CHIP);
    let mut entries: Vec<Entry> = beneath.entries().to_vec();
    let tp = experiments.iter().map(|e| e.tensor_parallel);
    let mut models: Vec<String> = experiments.iter().map(|e| e.model.clone()).collect();
    models.sort();
    models.dedup();
    let range = FitRange {
        tokens: None,
        tensor_parallel: Some([tp.clone().min().unwrap_or(1), tp.max().unwrap_or(1)]),
        models: Some(models),
    };
    let names: Vec<&str> = experiments.iter().map(|e| e.name.as_str()).collect();
    let mut families: Vec<Family> = values.iter().map(|(t, _)| t.family).collect();
    families.dedup();
    for family in families {
        let mut entry = resolved.get(family).clone();
        for (term, value) in values.iter().filter(|(t, _)| t.family == family) {
            for (param, factor) in term.params {
                entry.params.insert((*param).to_owned(), value * factor);
            }
        }
        entry.chip = CHIP.to_owned();
        entry.rank = Rank::Calibrated;
        entry.bundle = Some(BUNDLE.to_owned());
        entry.range = Some(range.clone());
        entry.source = format!(
            "blis-actor calibrate (simulator in the loop, shared terms, squared log errors of mean TTFT, mean request latency and per-token time) on reference-data/real-vllm-h100: {}",
            names.join(", ")
        );
        entries.push(entry);
    }
    Registry::from_entries(entries)
}

/// The parameters of an uncertainty sample for a fit of `fitted` among the bundle's `terms`:
/// the fitted values, and for every term the fit could not identify the value beneath the
/// bundle in `base` — the one that fit priced with. A sample replaces the bundle's values, so
/// a term left out of it would keep the joint fit's value, learnt from the held-out runs.
pub fn sample_params(base: &Registry, terms: &[Term], fitted: &[(Term, f64)]) -> BTreeMap<String, f64> {
    let beneath = base.without_bundle(BUNDLE).resolve(CHIP);
    let mut params = BTreeMap::new();
    for term in terms {
        let value = fitted.iter().find(|(t, _)| t.name == term.name).map(|(_, v)| *v);
        for (param, factor) in term.params {
            let name = format!("{}.{param}", term.family.as_str());
            let beneath_value = || beneath.get(term.family).param(param);
            params.insert(name, value.map_or_else(beneath_value, |v| v * factor));
        }
    }
    params
}

/// The priors' part of the objective: squared standardised log distances from the literature.
pub fn prior_penalty(values: &[(Term, f64)]) -> f64 {
    values
        .iter()
        .filter_map(|(term, value)| term.prior.map(|prior| (prior, value)))
        .map(|(prior, value)| {
            // A value of zero sits a thousandfold below the centre, not infinitely far.
            let ratio = value.max(prior.centre * 1e-3) / prior.centre;
            (ratio.ln() / prior.sigma).powi(2)
        })
        .sum()
}

/// The objective of `values` on `experiments`.
fn objective(
    base: &CostData,
    values: &[(Term, f64)],
    experiments: &[Experiment],
    options: &CalibrationOptions,
) -> Result<f64, RunError> {
    let registry = calibrated_registry(&base.registry, values, experiments).map_err(RunError::Input)?;
    let data = base.with_registry(registry);
    let mut total = prior_penalty(values);
    let simulated: Vec<Result<Simulated, RunError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = experiments
            .iter()
            .map(|experiment| {
                scope.spawn(|| simulate(experiment, 1, Some(options.stage_cap_s), &data, &mut |_, _| {}))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a simulation thread does not panic")).collect()
    });
    for (experiment, simulated) in experiments.iter().zip(simulated) {
        let simulated = simulated?;
        for (s, real) in experiment.stages.iter().enumerate() {
            let sim = &simulated.stages[0][s];
            // Mean TTFT, mean request latency, per-token time (indices 0, 4, 8 of METRICS).
            let compared: &[usize] = if experiment.overloaded() { &[8] } else { &[0, 4, 8] };
            for &k in compared {
                // A statistic the results file does not publish is not fitted.
                let Some(real) = real.values[k] else { continue };
                let ratio = sim.values[k].map_or(f64::NAN, |sim| sim / real);
                total +=
                    if ratio.is_finite() && ratio > 0.0 { (ratio.ln() / FIGURE_SIGMA).powi(2) } else { 1e6 };
            }
        }
    }
    Ok(total)
}

/// Fit `terms` on `experiments`, starting from `start` (scaled to [0, 1]; the terms' initial
/// values when absent).
pub fn fit(
    base: &CostData,
    experiments: &[Experiment],
    terms: &[Term],
    start: Option<&[f64]>,
    options: &CalibrationOptions,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<Fit, RunError> {
    let unscale = |x: &[f64]| unscaled(terms, x);
    let initial: Vec<f64> = match start {
        Some(x) => x.to_vec(),
        None => terms.iter().map(|t| (t.initial - t.bounds.0) / (t.bounds.1 - t.bounds.0)).collect(),
    };
    let mut evaluations = 0;
    let mut best = f64::INFINITY;
    let mut error = None;
    let mut f = |x: &[f64]| -> f64 {
        evaluations += 1;
        let value = match objective(base, &unscale(x), experiments, options) {
            Ok(v) => v,
            Err(e) => {
                error.get_or_insert(e);
                f64::INFINITY
            }
        };
        best = best.min(value);
        progress(evaluations, best);
        value
    };
    let (best, value, convergence) = restarted_nelder_mead(&mut f, &initial, 0.15, options.evaluations);
    if let Some(e) = error {
        return Err(e);
    }
    Ok(Fit { values: unscale(&best), objective: value, evaluations, convergence })
}

/// The curvature of the objective at `fit` on `experiments`: which terms the runs identify, how
/// well, and which they cannot tell apart (see [`super::identification`]).
pub fn identification(
    base: &CostData,
    experiments: &[Experiment],
    fit: &Fit,
    options: &CalibrationOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<Identification, RunError> {
    let terms: Vec<Term> = fit.values.iter().map(|(t, _)| *t).collect();
    let mut evaluations = 0;
    let mut error = None;
    let mut f = |x: &[f64]| -> f64 {
        evaluations += 1;
        progress(evaluations);
        match objective(base, &unscaled(&terms, x), experiments, options) {
            Ok(v) => v,
            Err(e) => {
                error.get_or_insert(e);
                f64::NAN
            }
        }
    };
    let identification = identify(fit, &mut f);
    match error {
        Some(e) => Err(e),
        None => Ok(identification),
    }
}

/// The terms' values at unit-cube coordinates `x`.
fn unscaled(terms: &[Term], x: &[f64]) -> Vec<(Term, f64)> {
    terms
        .iter()
        .zip(x)
        .map(|(t, &u)| (*t, t.bounds.0 + u.clamp(0.0, 1.0) * (t.bounds.1 - t.bounds.0)))
        .collect()
}

/// The terms of `fit` scaled to [0, 1], to start another fit from it.
pub fn scaled(fit: &Fit) -> Vec<f64> {
    fit.values.iter().map(|(t, v)| (v - t.bounds.0) / (t.bounds.1 - t.bounds.0)).collect()
}

/// The step, in unit-cube coordinates, at which [`Convergence::roughness`] is measured: a
/// thousandth of each term's range, below any difference a fit is read for.
pub const ROUGHNESS_STEP: f64 = 1e-3;

/// The objective's roughness at `x` (whose value is `value`): the root mean square over the
/// coordinates of half the second difference at [`ROUGHNESS_STEP`] (one-sided at a bound).
/// Costs two evaluations per coordinate.
fn roughness(f: &mut dyn FnMut(&[f64]) -> f64, x: &[f64], value: f64) -> f64 {
    let h = ROUGHNESS_STEP;
    let mut sum = 0.0;
    for i in 0..x.len() {
        let at = |offset: f64| -> Vec<f64> {
            let mut y = x.to_vec();
            y[i] += offset;
            y
        };
        let (near, far) = if x[i] - h < 0.0 {
            (f(&at(h)), f(&at(2.0 * h)))
        } else if x[i] + h > 1.0 {
            (f(&at(-h)), f(&at(-2.0 * h)))
        } else {
            (f(&at(h)), f(&at(-h)))
        };
        // Centred: (f(x + h) + f(x − h) − 2 f(x)) / 2; one-sided: (f(x) − 2 f(x ± h) + f(x ± 2h)) / 2.
        let second = if x[i] - h < 0.0 || x[i] + h > 1.0 {
            value - 2.0 * near + far
        } else {
            near + far - 2.0 * value
        };
        let half = second / 2.0;
        sum += if half.is_finite() { half * half } else { 0.0 };
    }
    (sum / x.len().max(1) as f64).sqrt()
}

/// Nelder–Mead restarted from its best point with a fresh simplex whenever the simplex has
/// collapsed or stalled, until `budget` is spent or a restart gains no more than the objective's
/// roughness: a simplex that has shrunk across a narrow valley (host time against API-server
/// time, say) stops moving along it. The roughness is measured once, at the first simplex's
/// best point (two evaluations per coordinate, within the budget). Converged means the last
/// restart gained no more than that with budget to spare.
fn restarted_nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    start: &[f64],
    step: f64,
    budget: usize,
) -> (Vec<f64>, f64, Convergence) {
    let mut remaining = budget;
    let mut last = nelder_mead(f, start, step, remaining);
    remaining -= last.used.min(remaining);
    let (mut best, mut value) = (last.best.clone(), last.value);
    let mut simplices = 1;
    let mut converged = false;
    let mut rough = None;
    if remaining > 2 * start.len() {
        rough = Some(roughness(f, &best, value));
        remaining -= 2 * start.len();
    }
    while remaining > start.len() + 1 {
        last = nelder_mead(f, &best, step, remaining);
        simplices += 1;
        remaining -= last.used.min(remaining);
        let gained = value - last.value;
        if last.value < value {
            (best, value) = (last.best.clone(), last.value);
        }
        if gained <= rough.unwrap_or(0.0).max(1e-6 * value.abs().max(1e-12)) {
            converged = last.stop != Stop::Budget;
            break;
        }
    }
    let convergence = Convergence {
        simplices,
        last_stop: last.stop,
        converged,
        final_spread: last.spread,
        final_diameter: last.diameter,
        roughness: rough,
    };
    (best, value, convergence)
}

/// What one simplex search ended with.
struct Simplex {
    best: Vec<f64>,
    value: f64,
    used: usize,
    stop: Stop,
    /// Worst minus best objective of the final vertices.
    spread: f64,
    /// Largest Euclidean distance of a final vertex from the best.
    diameter: f64,
}

/// Minimise `f` on the unit cube from `start` (coordinates clamped into it), simplex steps of
/// `step`, at most `budget` evaluations, stopping early once the simplex has collapsed (its values
/// agree to a millionth) or stalled (its best gained under a thousandth in the last 10(n + 1)
/// evaluations); the best point, its value, the evaluations used and why it stopped.
/// Deterministic.
fn nelder_mead(f: &mut dyn FnMut(&[f64]) -> f64, start: &[f64], step: f64, budget: usize) -> Simplex {
    let n = start.len();
    let clamp = |x: Vec<f64>| -> Vec<f64> { x.into_iter().map(|v| v.clamp(0.0, 1.0)).collect() };
    let mut used = 0;
    let mut eval = |x: &[f64], used: &mut usize| -> f64 {
        *used += 1;
        f(x)
    };
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    let first = clamp(start.to_vec());
    let value = eval(&first, &mut used);
    simplex.push((first.clone(), value));
    for i in 0..n {
        let mut x = first.clone();
        x[i] = if x[i] + step <= 1.0 { x[i] + step } else { x[i] - step };
        let value = eval(&x, &mut used);
        simplex.push((x, value));
    }
    // The best value a window of evaluations ago: a simplex that gains under a thousandth over
    // the window has stalled as surely as one that has collapsed.
    let window = 10 * (n + 1);
    let mut checkpoint = (used, f64::INFINITY);
    let mut stop = Stop::Budget;
    while used < budget {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let spread = simplex[n].1 - simplex[0].1;
        if spread.abs() <= 1e-6 * simplex[0].1.abs().max(1e-9) {
            stop = Stop::Collapsed;
            break;
        }
        if used >= checkpoint.0 + window {
            if checkpoint.1 - simplex[0].1 < 1e-3 * simplex[0].1.abs() {
                stop = Stop::Stalled;
                break;
            }
            checkpoint = (used, simplex[0].1);
        }
        let centroid: Vec<f64> =
            (0..n).map(|j| simplex[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64).collect();
        let toward = |t: f64, worst: &[f64]| -> Vec<f64> {
            clamp(centroid.iter().zip(worst).map(|(c, w)| c + t * (c - w)).collect())
        };
        let worst = simplex[n].0.clone();
        let reflected = toward(1.0, &worst);
        let reflected_value = eval(&reflected, &mut used);
        if reflected_value < simplex[0].1 {
            let expanded = toward(2.0, &worst);
            let expanded_value = eval(&expanded, &mut used);
            simplex[n] = if expanded_value < reflected_value {
                (expanded, expanded_value)
            } else {
                (reflected, reflected_value)
            };
        } else if reflected_value < simplex[n - 1].1 {
            simplex[n] = (reflected, reflected_value);
        } else {
            let contracted = toward(-0.5, &worst);
            let contracted_value = eval(&contracted, &mut used);
            if contracted_value < simplex[n].1 {
                simplex[n] = (contracted, contracted_value);
            } else {
                let best = simplex[0].0.clone();
                for point in simplex.iter_mut().skip(1) {
                    let shrunk: Vec<f64> =
                        best.iter().zip(&point.0).map(|(b, x)| b + 0.5 * (x - b)).collect();
                    point.1 = eval(&shrunk, &mut used);
                    point.0 = shrunk;
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    let spread = simplex[n].1 - simplex[0].1;
    let diameter = simplex[1..]
        .iter()
        .map(|(x, _)| x.iter().zip(&simplex[0].0).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    let (best, value) = simplex.swap_remove(0);
    Simplex { best, value, used, stop, spread, diameter }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_sample_carries_the_values_beneath_the_bundle_for_the_terms_it_could_not_fit() {
        let registry = Registry::parse(blis_costmodel::EMBEDDED_REGISTRY).unwrap();
        // A fold with no TP4 run fits every term but the TP4 all-reduce latency.
        let fitted: Vec<(Term, f64)> =
            TERMS.iter().filter(|t| t.name != "all_reduce.latency_us_tp4").map(|t| (*t, t.initial)).collect();
        let params = sample_params(&registry, TERMS, &fitted);
        let beneath = registry.without_bundle(BUNDLE).resolve(CHIP).get(Family::AllReduce).clone();
        let joint = registry.resolve(CHIP).get(Family::AllReduce).clone();
        for tp in ["latency_us_tp4", "latency_us_tp8"] {
            assert_eq!(
                params[&format!("all_reduce.{tp}")],
                beneath.param(tp),
                "{tp} from beneath the bundle"
            );
            assert_ne!(
                beneath.param(tp),
                joint.param(tp),
                "the joint fit's {tp} would leak the held-out runs"
            );
        }
        let tp2 = TERMS.iter().find(|t| t.name == "all_reduce.latency_us_tp2").unwrap();
        assert_eq!(params["all_reduce.latency_us_tp2"], tp2.initial, "a fitted term keeps its fitted value");
        let named: usize = TERMS.iter().map(|t| t.params.len()).sum();
        assert_eq!(params.len(), named, "every parameter of every term is in the sample");
    }

    #[test]
    fn nelder_mead_finds_the_minimum_of_a_bounded_bowl() {
        let mut f = |x: &[f64]| (x[0] - 0.3).powi(2) + 2.0 * (x[1] - 0.8).powi(2) + (x[2] - 1.0).powi(2);
        let Simplex { best, value, stop, .. } = nelder_mead(&mut f, &[0.5, 0.5, 0.5], 0.2, 600);
        assert!((best[0] - 0.3).abs() < 1e-3 && (best[1] - 0.8).abs() < 1e-3, "{best:?}");
        assert!(best[2] > 0.99, "the bound holds: {best:?}");
        assert!(value < 1e-5);
        assert_ne!(stop, Stop::Budget, "it stops on its own test before 600 evaluations");
    }

    #[test]
    fn restarts_after_a_collapse_never_lose_and_reach_the_bottom_of_a_curved_valley() {
        // Rosenbrock's valley, scaled into the unit cube: minimum 0 at (0.75, 0.75).
        let rosenbrock = |x: &[f64]| {
            let (a, b) = (4.0 * x[0] - 2.0, 4.0 * x[1] - 2.0);
            100.0 * (b - a * a).powi(2) + (1.0 - a).powi(2)
        };
        let (mut once, mut restarted) = (rosenbrock, rosenbrock);
        let Simplex { value: single, used, .. } = nelder_mead(&mut once, &[0.2, 0.9], 0.15, 400);
        assert!(used < 400, "one simplex collapses before its budget ({used} evaluations)");
        let (best, value, convergence) = restarted_nelder_mead(&mut restarted, &[0.2, 0.9], 0.15, 400);
        assert!(value <= single, "{value} vs {single}");
        assert!(value < 1e-6 && (best[0] - 0.75).abs() < 1e-3, "{best:?} {value} (one simplex: {single})");
        assert!(convergence.converged && convergence.simplices > 1, "{convergence:?}");
        assert!(convergence.final_diameter < 1e-2, "{convergence:?}");
        // Too small a budget is reported as not converged.
        let (_, _, starved) = restarted_nelder_mead(&mut rosenbrock.clone(), &[0.2, 0.9], 0.15, 12);
        assert!(!starved.converged, "{starved:?}");
    }

    #[test]
    fn a_restart_that_gains_less_than_the_objectives_roughness_ends_the_search_as_converged() {
        // A bowl with steps of 0.004 alternating over a grid of 1/1000: piecewise constant, as a
        // simulator in the loop is; a thousandth either way always crosses one step.
        let stepped = |x: &[f64]| {
            let smooth = (x[0] - 0.3).powi(2) + (x[1] - 0.6).powi(2);
            smooth + 0.004 * ((x[0] * 1000.0).floor() + (x[1] * 1000.0).floor()).rem_euclid(2.0)
        };
        let x = [0.3004, 0.6004];
        let rough = roughness(&mut stepped.clone(), &x, stepped(&x));
        assert!(rough > 1e-3 && rough < 1e-2, "{rough}");
        let smooth = |x: &[f64]| (x[0] - 0.3).powi(2) + (x[1] - 0.6).powi(2);
        assert!(
            roughness(&mut smooth.clone(), &[0.9995, 0.2], smooth(&[0.9995, 0.2])) < 1e-6,
            "one-sided at a bound"
        );
        let (best, _, convergence) = restarted_nelder_mead(&mut stepped.clone(), &[0.7, 0.2], 0.15, 2_000);
        assert!(convergence.converged, "{convergence:?}");
        assert!(convergence.roughness.is_some_and(|r| r > 1e-3), "{convergence:?}");
        assert!((best[0] - 0.3).abs() < 0.1 && (best[1] - 0.6).abs() < 0.1, "{best:?}");
    }

    #[test]
    fn the_prior_penalty_is_zero_at_the_literature_and_one_a_standard_deviation_away() {
        let term = |name: &str| *TERMS.iter().find(|t| t.name == name).unwrap();
        let (all_reduce, host, memory) =
            (term("all_reduce.latency_us_tp2"), term("host.step_us"), term("gemm.memory_efficiency"));
        assert_eq!(prior_penalty(&[(all_reduce, 7.0), (host, 3240.0)]), 0.0);
        // Twice and half the all-reduce latency are each one standard deviation (ln 2) away.
        assert!((prior_penalty(&[(all_reduce, 14.0)]) - 1.0).abs() < 1e-12);
        assert!((prior_penalty(&[(all_reduce, 3.5)]) - 1.0).abs() < 1e-12);
        let host_far = 3240.0 * (2.0 * 0.77f64).exp();
        assert!((prior_penalty(&[(host, host_far), (all_reduce, 7.0)]) - 4.0).abs() < 1e-9);
        // A term the literature does not measure adds nothing, and zero is finitely far.
        assert_eq!(prior_penalty(&[(memory, 0.3)]), 0.0);
        assert!(prior_penalty(&[(all_reduce, 0.0)]).is_finite());
    }
}

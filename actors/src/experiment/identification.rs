//! How well the training runs pin each calibrated term: the objective's curvature at a fit.
//!
//! The objective is a sum of squared standardised log errors plus the priors' penalties, i.e.
//! twice a negative log-likelihood, so near its minimum the terms' covariance is twice the
//! inverse of its Hessian. The Hessian is taken by central differences in the unit-cube
//! coordinates the search runs in (`2n + 1` evaluations for the diagonal, four per pair above
//! it). A term at its bound, or one whose curvature is not positive, is reported as not
//! identified rather than given a standard error. Correlations near ±1 name the terms the runs
//! cannot tell apart; a term whose only curvature is its prior's is held by the literature, not
//! by the runs.

use nalgebra::DMatrix;

use super::calibration::{Fit, scaled};

/// Step of the finite differences, in unit-cube coordinates.
pub const STEP: f64 = 0.02;

/// The curvature-based uncertainty of a fit's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Identification {
    /// The terms' names, in the fit's order.
    pub terms: Vec<&'static str>,
    /// Each term's standard error in its own units; `None` when the curvature does not identify
    /// it (at a bound, or a Hessian that is not positive definite there).
    pub standard_errors: Vec<Option<f64>>,
    /// Correlations between the identified terms (`None` on a row or column not identified).
    pub correlations: Vec<Vec<Option<f64>>>,
    /// Evaluations spent.
    pub evaluations: usize,
}

impl Identification {
    /// The term most correlated with term `i`, and the correlation.
    pub fn strongest_partner(&self, i: usize) -> Option<(&'static str, f64)> {
        self.correlations[i]
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .filter_map(|(j, c)| c.map(|c| (self.terms[j], c)))
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
    }
}

/// The identification of `fit`'s terms under `objective` (a function of the unit-cube
/// coordinates, as the fit's search used).
pub fn identify(fit: &Fit, objective: &mut dyn FnMut(&[f64]) -> f64) -> Identification {
    let centre = scaled(fit);
    let n = centre.len();
    let mut evaluations = 0;
    let mut at = |x: &[f64]| {
        evaluations += 1;
        objective(x)
    };
    let free: Vec<bool> = centre.iter().map(|&u| u - STEP >= 0.0 && u + STEP <= 1.0).collect();
    let shifted = |moves: &[(usize, f64)]| {
        let mut x = centre.clone();
        for &(i, d) in moves {
            x[i] += d;
        }
        x
    };
    let f0 = at(&centre);
    let mut hessian = DMatrix::<f64>::zeros(n, n);
    let mut plus = vec![f64::NAN; n];
    let mut minus = vec![f64::NAN; n];
    for i in (0..n).filter(|&i| free[i]) {
        plus[i] = at(&shifted(&[(i, STEP)]));
        minus[i] = at(&shifted(&[(i, -STEP)]));
        hessian[(i, i)] = (plus[i] - 2.0 * f0 + minus[i]) / (STEP * STEP);
    }
    for i in (0..n).filter(|&i| free[i]) {
        for j in (i + 1..n).filter(|&j| free[j]) {
            let pp = at(&shifted(&[(i, STEP), (j, STEP)]));
            let pm = at(&shifted(&[(i, STEP), (j, -STEP)]));
            let mp = at(&shifted(&[(i, -STEP), (j, STEP)]));
            let mm = at(&shifted(&[(i, -STEP), (j, -STEP)]));
            let value = (pp - pm - mp + mm) / (4.0 * STEP * STEP);
            hessian[(i, j)] = value;
            hessian[(j, i)] = value;
        }
    }
    let kept: Vec<usize> = (0..n).filter(|&i| free[i] && hessian[(i, i)] > 0.0).collect();
    let reduced = DMatrix::from_fn(kept.len(), kept.len(), |a, b| hessian[(kept[a], kept[b])]);
    let mut standard_errors = vec![None; n];
    let mut correlations = vec![vec![None; n]; n];
    if let Some(cholesky) = reduced.cholesky() {
        let covariance = cholesky.inverse() * 2.0;
        for (a, &i) in kept.iter().enumerate() {
            let (low, high) = fit.values[i].0.bounds;
            standard_errors[i] = Some(covariance[(a, a)].sqrt() * (high - low));
            for (b, &j) in kept.iter().enumerate() {
                correlations[i][j] =
                    Some(covariance[(a, b)] / (covariance[(a, a)] * covariance[(b, b)]).sqrt());
            }
        }
    }
    Identification {
        terms: fit.values.iter().map(|(t, _)| t.name).collect(),
        standard_errors,
        correlations,
        evaluations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::calibration::{Convergence, Stop, TERMS};

    fn fit_at(values: &[f64]) -> Fit {
        Fit {
            values: TERMS[..values.len()].iter().copied().zip(values.iter().copied()).collect(),
            objective: 0.0,
            evaluations: 0,
            convergence: Convergence {
                simplices: 1,
                last_stop: Stop::Collapsed,
                converged: true,
                final_spread: 0.0,
                final_diameter: 0.0,
                roughness: Some(0.0),
            },
        }
    }

    #[test]
    fn a_quadratic_objective_gives_back_its_covariance() {
        // Two terms in unit-cube coordinates with covariance [[s1², ρ s1 s2], [ρ s1 s2, s2²]]:
        // the objective 2 × NLL = xᵀ Σ⁻¹ x has Hessian 2 Σ⁻¹, and twice its inverse is Σ.
        let fit = fit_at(&[0.6, 0.6]);
        let centre = scaled(&fit);
        let (s1, s2, rho) = (0.05, 0.1, 0.8);
        let det = s1 * s1 * s2 * s2 * (1.0 - rho * rho);
        let inverse = [[s2 * s2 / det, -rho * s1 * s2 / det], [-rho * s1 * s2 / det, s1 * s1 / det]];
        let mut objective = |x: &[f64]| {
            let d = [x[0] - centre[0], x[1] - centre[1]];
            (0..2).map(|i| (0..2).map(|j| d[i] * inverse[i][j] * d[j]).sum::<f64>()).sum::<f64>()
        };
        let identification = identify(&fit, &mut objective);
        let width = |i: usize| TERMS[i].bounds.1 - TERMS[i].bounds.0;
        let se = identification.standard_errors.clone();
        assert!((se[0].unwrap() - s1 * width(0)).abs() < 1e-9 * width(0), "{se:?}");
        assert!((se[1].unwrap() - s2 * width(1)).abs() < 1e-9 * width(1), "{se:?}");
        assert!((identification.correlations[0][1].unwrap() - rho).abs() < 1e-9);
        assert_eq!(identification.strongest_partner(0).map(|p| p.0), Some(TERMS[1].name));
        assert_eq!(identification.evaluations, 1 + 2 * 2 + 4);
    }

    #[test]
    fn a_flat_direction_or_a_term_at_its_bound_is_not_identified() {
        // The second term does not move the objective; the third sits at its upper bound.
        let upper = TERMS[2].bounds.1;
        let fit = fit_at(&[0.6, 0.6, upper]);
        let centre = scaled(&fit);
        let mut objective = |x: &[f64]| ((x[0] - centre[0]) / 0.05).powi(2) + x[2];
        let identification = identify(&fit, &mut objective);
        assert!(identification.standard_errors[0].is_some());
        assert_eq!(identification.standard_errors[1], None, "no curvature, no standard error");
        assert_eq!(identification.standard_errors[2], None, "a term at its bound");
        assert_eq!(identification.correlations[0][1], None);
    }
}

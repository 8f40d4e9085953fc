//! Special functions the fits need and `libm` lacks: the regularized incomplete gamma function
//! (gamma's CDF, and the likelihood of gaps too short to measure), the normal CDF and the
//! Kolmogorov distribution's tail (the KS test's p-value). All from `libm`'s elementary
//! functions, so the figures do not depend on the platform's math library.

/// P(a, x) = γ(a, x) / Γ(a), the CDF at `x` of a gamma variable of shape `a` and scale 1: the
/// power series below `a + 1`, the continued fraction of 1 − P above (each converges fast there).
pub fn regularized_gamma(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let prefactor = libm::exp(a * libm::log(x) - x - libm::lgamma(a));
    if x < a + 1.0 {
        let (mut term, mut sum) = (1.0 / a, 1.0 / a);
        for n in 1..10_000 {
            term *= x / (a + f64::from(n));
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        (sum * prefactor).min(1.0)
    } else {
        // Lentz's evaluation of the continued fraction for Γ(a, x) e^x x^−a.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut fraction = d;
        for n in 1..10_000 {
            let n = f64::from(n);
            let an = -n * (n - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let step = d * c;
            fraction *= step;
            if (step - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (1.0 - prefactor * fraction).max(0.0)
    }
}

/// Φ(z), the standard normal CDF.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// Q(λ) = P(K > λ) for the Kolmogorov distribution K, the limit of √n·D: the theta-function
/// form below λ = 1.18, the alternating series above (both converge in a few terms there).
pub fn kolmogorov_tail(lambda: f64) -> f64 {
    use std::f64::consts::PI;
    if lambda <= 0.0 {
        return 1.0;
    }
    let q = if lambda < 1.18 {
        let factor = -PI * PI / (8.0 * lambda * lambda);
        let sum: f64 = (1..=6).map(|j| libm::exp(factor * f64::from(2 * j - 1).powi(2))).sum();
        1.0 - libm::sqrt(2.0 * PI) / lambda * sum
    } else {
        let mut sum = 0.0;
        for j in 1..=100 {
            let term = libm::exp(-2.0 * f64::from(j * j) * lambda * lambda);
            sum += if j % 2 == 1 { term } else { -term };
            if term < 1e-17 {
                break;
            }
        }
        2.0 * sum
    };
    q.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn the_incomplete_gamma_is_the_gamma_cdf() {
        // Shape 1 is the exponential; shape 1/2 is a halved chi-square of one degree: P(½, x) = erf(√x).
        for x in [0.01, 0.5, 1.0, 3.0, 20.0] {
            assert!(close(regularized_gamma(1.0, x), 1.0 - libm::exp(-x), 1e-13), "{x}");
            assert!(close(regularized_gamma(0.5, x), libm::erf(libm::sqrt(x)), 1e-13), "{x}");
        }
        // Shape 3: 1 − e^−x (1 + x + x²/2).
        let x: f64 = 2.5;
        assert!(close(regularized_gamma(3.0, x), 1.0 - libm::exp(-x) * (1.0 + x + x * x / 2.0), 1e-13));
    }

    #[test]
    fn the_kolmogorov_tail_has_its_tabulated_quantiles() {
        // The 10%, 5% and 1% critical values of √n·D.
        assert!(close(kolmogorov_tail(1.2238), 0.10, 1e-4));
        assert!(close(kolmogorov_tail(1.3581), 0.05, 1e-4));
        assert!(close(kolmogorov_tail(1.6276), 0.01, 1e-4));
        // Both forms agree where they meet.
        assert!(close(kolmogorov_tail(1.18 - 1e-9), kolmogorov_tail(1.18 + 1e-9), 1e-8));
        assert_eq!(kolmogorov_tail(0.0), 1.0);
        assert!(kolmogorov_tail(0.3) > 0.9999);
        assert!(normal_cdf(1.959_964) > 0.975 - 1e-7 && normal_cdf(1.959_964) < 0.975 + 1e-7);
    }
}

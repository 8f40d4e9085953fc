//! Gaps between arrivals: exponential, gamma and Weibull laws fitted by maximum likelihood,
//! with the trace's time resolution taken into account.
//!
//! A trace records times to some resolution `r` (the greatest common divisor of its gaps: 1 µs
//! for the Azure trace, 1 ms for Mooncake's), so a recorded gap `v` stands for a true gap within
//! `r/2` of it, and requests recorded together have a gap of 0. Gaps of at most one step (`0` or
//! `r`) tell almost nothing about their size, so the likelihood counts them as *censored*, only
//! "shorter than `1.5 r`" (the probability of that), and every longer gap as its value. The
//! likelihood is maximised over the shape by golden-section search on its logarithm, with the
//! scale maximised the same way inside. The test compares recorded gaps with the law rounded to
//! the resolution: `P(recorded ≤ v) = F(v + r/2)`.

use blis_contracts::Arrival;

use super::special::regularized_gamma;
use super::{Candidate, KsTest, QuantityFit, ks_grid, significant, split};
use crate::workload::sampling::{GapLaw, weibull_cv};

/// Gaps as the likelihood sees them.
struct CensoredGaps {
    /// Gaps longer than `bound`, µs.
    exact: Vec<f64>,
    /// How many gaps are at or below `bound`.
    censored: f64,
    /// The censoring bound, µs.
    bound: f64,
    /// Σ exact.
    sum: f64,
    /// Σ ln exact.
    sum_log: f64,
}

impl CensoredGaps {
    /// The gaps `recorded` at `resolution` µs.
    fn new(recorded: &[u64], resolution: u64) -> CensoredGaps {
        let bound = 1.5 * resolution as f64;
        let exact: Vec<f64> = recorded.iter().map(|&g| g as f64).filter(|&g| g > bound).collect();
        CensoredGaps {
            censored: (recorded.len() - exact.len()) as f64,
            bound,
            sum: exact.iter().sum(),
            sum_log: exact.iter().map(|&g| libm::log(g)).sum(),
            exact,
        }
    }

    /// How many gaps have a value.
    fn n(&self) -> f64 {
        self.exact.len() as f64
    }

    /// The mean gap, counting censored gaps at half the bound: where scale searches start.
    fn rough_mean(&self) -> f64 {
        (self.sum + self.censored * self.bound / 2.0) / (self.n() + self.censored)
    }
}

/// The argument in `[low, high]` where the unimodal `f` is largest, by golden-section search.
fn maximise(low: f64, high: f64, f: impl Fn(f64) -> f64) -> f64 {
    let ratio = (libm::sqrt(5.0) - 1.0) / 2.0;
    let (mut low, mut high) = (low, high);
    let mut left = high - ratio * (high - low);
    let mut right = low + ratio * (high - low);
    let (mut f_left, mut f_right) = (f(left), f(right));
    for _ in 0..80 {
        if f_left < f_right {
            low = left;
            left = right;
            f_left = f_right;
            right = low + ratio * (high - low);
            f_right = f(right);
        } else {
            high = right;
            right = left;
            f_right = f_left;
            left = high - ratio * (high - low);
            f_left = f(left);
        }
    }
    0.5 * (low + high)
}

/// `ln(1 − e^−t)` for `t > 0`, the log-probability of a censored gap under exponential-type tails.
fn log_one_minus_exp_neg(t: f64) -> f64 {
    libm::log(-libm::expm1(-t))
}

/// The exponential law of greatest likelihood.
fn fit_exponential(gaps: &CensoredGaps) -> GapLaw {
    let log_likelihood = |log_mean: f64| {
        let mean = libm::exp(log_mean);
        -gaps.n() * log_mean - gaps.sum / mean + gaps.censored * log_one_minus_exp_neg(gaps.bound / mean)
    };
    let center = libm::log(gaps.rough_mean());
    GapLaw::Exponential { mean_us: libm::exp(maximise(center - 10.0, center + 10.0, log_likelihood)) }
}

/// The gamma law of greatest likelihood (its log-likelihood needs only Σ x and Σ ln x).
fn fit_gamma(gaps: &CensoredGaps) -> GapLaw {
    let log_likelihood = |shape: f64, log_scale: f64| {
        let scale = libm::exp(log_scale);
        let exact = (shape - 1.0) * gaps.sum_log
            - gaps.sum / scale
            - gaps.n() * (shape * log_scale + libm::lgamma(shape));
        let censored = if gaps.censored > 0.0 {
            gaps.censored * libm::log(regularized_gamma(shape, gaps.bound / scale))
        } else {
            0.0
        };
        exact + censored
    };
    let mean = libm::log(gaps.rough_mean());
    let best_log_scale = |shape: f64| {
        let center = mean - libm::log(shape);
        maximise(center - 10.0, center + 10.0, |s| log_likelihood(shape, s))
    };
    let log_shape = maximise(libm::log(1e-4), libm::log(1e4), |log_shape| {
        let shape = libm::exp(log_shape);
        log_likelihood(shape, best_log_scale(shape))
    });
    let shape = libm::exp(log_shape);
    GapLaw::Gamma { shape, scale_us: libm::exp(best_log_scale(shape)) }
}

/// The Weibull law of greatest likelihood (powers of the gaps taken over the largest, so they
/// cannot overflow).
fn fit_weibull(gaps: &CensoredGaps) -> GapLaw {
    let largest = gaps.exact.iter().copied().fold(0.0, f64::max);
    let log_largest = libm::log(largest);
    let relative: Vec<f64> = gaps.exact.iter().map(|&g| libm::log(g) - log_largest).collect();
    // ln Σ xᵏ for a shape k.
    let log_power_sum = |shape: f64| {
        log_largest * shape + libm::log(relative.iter().map(|&l| libm::exp(shape * l)).sum::<f64>())
    };
    let log_likelihood = |shape: f64, log_power_sum: f64, log_scale: f64| {
        let exact = gaps.n() * (libm::log(shape) - shape * log_scale) + (shape - 1.0) * gaps.sum_log
            - libm::exp(log_power_sum - shape * log_scale);
        let censored = if gaps.censored > 0.0 {
            gaps.censored * log_one_minus_exp_neg(libm::exp(shape * (libm::log(gaps.bound) - log_scale)))
        } else {
            0.0
        };
        exact + censored
    };
    let mean = libm::log(gaps.rough_mean());
    let best_log_scale = |shape: f64, power_sum: f64| {
        let center = mean - libm::lgamma(1.0 + 1.0 / shape);
        maximise(center - 10.0, center + 10.0, |s| log_likelihood(shape, power_sum, s))
    };
    let log_shape = maximise(libm::log(0.02), libm::log(50.0), |log_shape| {
        let shape = libm::exp(log_shape);
        let power_sum = log_power_sum(shape);
        log_likelihood(shape, power_sum, best_log_scale(shape, power_sum))
    });
    let shape = libm::exp(log_shape);
    GapLaw::Weibull { shape, scale_us: libm::exp(best_log_scale(shape, log_power_sum(shape))) }
}

/// P(gap ≤ x) under `law`.
fn gap_cdf(law: &GapLaw, x: f64) -> f64 {
    match *law {
        GapLaw::Exponential { mean_us } => 1.0 - libm::exp(-x / mean_us),
        GapLaw::Gamma { shape, scale_us } => regularized_gamma(shape, x / scale_us),
        GapLaw::Weibull { shape, scale_us } => 1.0 - libm::exp(-libm::pow(x / scale_us, shape)),
        GapLaw::Constant { gap_us } => f64::from(u8::from(x >= gap_us)),
    }
}

/// The arrival process of a gap law (rate and CV to six significant digits), or why the
/// scenario cannot express it.
pub fn arrival_of(law: &GapLaw) -> Result<Arrival, String> {
    let in_range = |family: &str, cv: f64, low: f64, high: f64| {
        if (low..=high).contains(&cv) {
            Ok(cv)
        } else {
            Err(format!("cv {cv} outside [{low}, {high}], the range {family} arrivals accept"))
        }
    };
    let rate = |mean_us: f64| Some(significant(1e6 / mean_us));
    Ok(match *law {
        GapLaw::Exponential { mean_us } => {
            Arrival::Poisson { rate_per_s: rate(mean_us), rate_fraction: None }
        }
        GapLaw::Gamma { shape, scale_us } => Arrival::Gamma {
            rate_per_s: rate(shape * scale_us),
            rate_fraction: None,
            cv: in_range("gamma", significant(1.0 / libm::sqrt(shape)), 0.01, 100.0)?,
        },
        GapLaw::Weibull { shape, scale_us } => Arrival::Weibull {
            rate_per_s: rate(scale_us * libm::tgamma(1.0 + 1.0 / shape)),
            rate_fraction: None,
            cv: in_range("Weibull", significant(weibull_cv(shape)), 0.05, 20.0)?,
        },
        GapLaw::Constant { gap_us } => Arrival::Constant { rate_per_s: rate(gap_us), rate_fraction: None },
    })
}

/// The candidates for gaps `recorded` at `resolution` µs (> 0), tested and chosen; `None` when
/// every kept gap is within one step of the resolution, so no law can be fitted.
pub fn fit_gaps(recorded: &[u64], resolution: u64) -> Option<QuantityFit<GapLaw>> {
    if recorded.iter().all(|&g| g == recorded[0]) {
        let law = GapLaw::Constant { gap_us: recorded[0] as f64 };
        return Some(QuantityFit { candidates: Vec::new(), chosen: "constant", law });
    }
    let (kept, mut held) = split(recorded);
    held.sort_unstable();
    let gaps = CensoredGaps::new(&kept, resolution);
    if gaps.exact.is_empty() {
        return None;
    }
    let half_step = resolution as f64 / 2.0;
    let candidates: Vec<Candidate<GapLaw>> = [
        ("exponential", fit_exponential(&gaps)),
        ("gamma", fit_gamma(&gaps)),
        ("weibull", fit_weibull(&gaps)),
    ]
    .into_iter()
    .map(|(family, law)| {
        let d = ks_grid(&held, resolution, |v| gap_cdf(&law, v as f64 + half_step));
        Candidate {
            family,
            test: Some(KsTest::new(d, held.len())),
            unusable: arrival_of(&law).err(),
            law: Ok(law),
        }
    })
    .collect();
    let (chosen, law) = candidates
        .iter()
        .filter(|c| c.unusable.is_none())
        .filter_map(|c| Some((c.family, *c.law.as_ref().ok()?, c.test?.d)))
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(family, law, _)| (family, law))?;
    Some(QuantityFit { candidates, chosen, law })
}

#[cfg(test)]
mod tests {
    use blis_kernel::Streams;

    use super::*;

    #[test]
    fn the_cdf_is_that_of_the_simulators_draws() {
        let laws = [GapLaw::poisson(10.0), GapLaw::gamma(10.0, 2.5), GapLaw::weibull(10.0, 0.4)];
        for (i, law) in laws.iter().enumerate() {
            let mut stream = Streams::new(9).stream("fit-test", "gap-cdf", &i.to_string());
            let draws: Vec<f64> = (0..400_000).map(|_| law.draw(&mut stream)).collect();
            for x in [10.0, 1_000.0, 30_000.0, 100_000.0, 300_000.0] {
                let share = draws.iter().filter(|&&d| d <= x).count() as f64 / draws.len() as f64;
                let cdf = gap_cdf(law, x);
                assert!((share - cdf).abs() < 0.004, "{law:?} at {x}: drawn {share}, cdf {cdf}");
            }
        }
    }

    #[test]
    fn censored_gaps_are_counted_only_below_their_bound() {
        let gaps = CensoredGaps::new(&[0, 1_000, 1_000, 2_000, 5_000], 1_000);
        assert_eq!(
            (gaps.exact.as_slice(), gaps.censored, gaps.bound),
            (&[2_000.0, 5_000.0][..], 3.0, 1_500.0)
        );
        assert!((maximise(-3.0, 5.0, |x| -(x - 1.25) * (x - 1.25)) - 1.25).abs() < 1e-9);
    }
}

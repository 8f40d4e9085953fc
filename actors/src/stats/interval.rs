//! Confidence intervals for a mean from independent observations.
//!
//! Given the values of one output measure from `n` independent replications (or `n` nearly
//! independent batch means), the interval is `mean ± t(1 − α/2, n − 1) · s / √n` with `s` the
//! sample standard deviation (Law & Kelton, *Simulation Modeling and Analysis*, §9.4.1), the t
//! quantile from [`t_quantile`]. The interval is exact for normal observations and approximately
//! right for means of many sub-observations (replication averages, batch means). One
//! observation gives a mean but no interval, and this is said rather than hidden behind an
//! infinite number.

use std::fmt;

use super::student_t::t_quantile;

/// The confidence level used unless a caller has a reason for another: 95 %.
pub const DEFAULT_LEVEL: f64 = 0.95;

/// A mean with its confidence interval, from independent observations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The sample mean.
    pub mean: f64,
    /// Half the interval's width; `None` when one observation leaves the spread unknown.
    pub half_width: Option<f64>,
    /// How many observations the estimate rests on.
    pub n: usize,
    /// The confidence level of the interval, e.g. 0.95.
    pub level: f64,
}

impl Estimate {
    /// The interval's lower end; `None` when the interval is unbounded.
    pub fn lower(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean - h)
    }

    /// The interval's upper end; `None` when the interval is unbounded.
    pub fn upper(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean + h)
    }

    /// Whether `value` lies in the closed interval (always, when the interval is unbounded).
    pub fn contains(&self, value: f64) -> bool {
        self.half_width.is_none_or(|h| (value - self.mean).abs() <= h)
    }
}

/// Why no estimate could be formed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IntervalError {
    /// There were no observations.
    Empty,
    /// An observation was NaN or infinite.
    NonFinite {
        /// Its position in the input.
        index: usize,
    },
    /// The confidence level was not strictly between 0 and 1.
    InvalidLevel(f64),
}

impl fmt::Display for IntervalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntervalError::Empty => write!(f, "no observations to estimate from"),
            IntervalError::NonFinite { index } => write!(f, "observation {index} is not a finite number"),
            IntervalError::InvalidLevel(level) => {
                write!(f, "confidence level {level} is not strictly between 0 and 1")
            }
        }
    }
}

impl std::error::Error for IntervalError {}

/// The mean of independent `values` with its two-sided t interval at confidence `level`.
pub fn estimate(values: &[f64], level: f64) -> Result<Estimate, IntervalError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(IntervalError::InvalidLevel(level));
    }
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(IntervalError::NonFinite { index });
    }
    let n = values.len();
    if n == 0 {
        return Err(IntervalError::Empty);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let half_width = (n >= 2).then(|| {
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
        let t = t_quantile(0.5 + level / 2.0, (n - 1) as f64);
        t * libm::sqrt(variance / n as f64)
    });
    Ok(Estimate { mean, half_width, n, level })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_draws::standard_normal;
    use blis_kernel::Streams;

    fn assert_relative(actual: f64, expected: f64, tolerance: f64) {
        let error = ((actual - expected) / expected).abs();
        assert!(error <= tolerance, "{actual} vs {expected}: relative error {error:e}");
    }

    #[test]
    fn estimate_uses_the_t_interval() {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0];
        let e = estimate(&values, DEFAULT_LEVEL).unwrap();
        // s = √2.5, so the half-width is t(0.975, 4)·√(2.5/5).
        assert_eq!((e.mean, e.n, e.level), (3.0, 5, 0.95));
        assert_relative(e.half_width.unwrap(), 2.77644510519779 * libm::sqrt(0.5), 1e-12);
        assert!(e.contains(4.9) && !e.contains(5.0));
        assert_relative(e.lower().unwrap(), 3.0 - 2.77644510519779 * libm::sqrt(0.5), 1e-12);
    }

    #[test]
    fn one_observation_gives_a_mean_without_an_interval() {
        let e = estimate(&[7.5], DEFAULT_LEVEL).unwrap();
        assert_eq!((e.mean, e.half_width, e.lower(), e.upper()), (7.5, None, None, None));
        assert!(e.contains(1e300));
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert_eq!(estimate(&[], DEFAULT_LEVEL), Err(IntervalError::Empty));
        assert_eq!(estimate(&[1.0, f64::NAN], DEFAULT_LEVEL), Err(IntervalError::NonFinite { index: 1 }));
        assert_eq!(estimate(&[1.0, 2.0], 1.0), Err(IntervalError::InvalidLevel(1.0)));
        assert!(matches!(estimate(&[1.0, 2.0], f64::NAN), Err(IntervalError::InvalidLevel(_))));
    }

    #[test]
    fn the_95_percent_interval_covers_the_true_mean_about_95_percent_of_the_time() {
        let mut stream = Streams::new(2024).stream("test", "x", "");
        let experiments = 2_000;
        let mut covered = 0;
        for _ in 0..experiments {
            let sample: Vec<f64> = (0..5).map(|_| 10.0 + 3.0 * standard_normal(&mut stream)).collect();
            if estimate(&sample, DEFAULT_LEVEL).unwrap().contains(10.0) {
                covered += 1;
            }
        }
        let coverage = f64::from(covered) / f64::from(experiments);
        assert!((0.93..=0.97).contains(&coverage), "coverage {coverage}");
    }

    #[test]
    fn a_normal_quantile_in_place_of_t_would_undercover_with_five_samples() {
        // Guards the coverage test's power: with z = 1.96 instead of t(0.975, 4) = 2.78 the
        // coverage of 5-sample intervals drops to about 88 %, outside the accepted band.
        let mut stream = Streams::new(2024).stream("test", "x", "");
        let mut covered = 0;
        for _ in 0..2_000 {
            let sample: Vec<f64> = (0..5).map(|_| standard_normal(&mut stream)).collect();
            let e = estimate(&sample, DEFAULT_LEVEL).unwrap();
            let z_half_width = e.half_width.unwrap() * 1.959964 / t_quantile(0.975, 4.0);
            if e.mean.abs() <= z_half_width {
                covered += 1;
            }
        }
        assert!(covered < 1_860, "z-interval covered {covered} of 2000");
    }
}

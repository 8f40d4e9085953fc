//! A confidence interval from one long steady-state run: the method of batch means.
//!
//! Observations inside one run are correlated, so the t interval of the raw observations is far
//! too narrow. Cut the (post-warm-up) series into `k` consecutive batches of equal size `b`;
//! when `b` is long compared with the series' correlation time, the batch means are nearly
//! independent and nearly normal, and the t interval with `k − 1` degrees of freedom applies to
//! them (Law & Kelton §9.5.3). `k` is at least [`MIN_BATCHES`]; [`DEFAULT_BATCHES`] is the usual
//! choice. Observations that do not fill a batch are dropped from the start of the series,
//! where any remaining warm-up bias lives. Whether `b` was long enough shows in the lag-1
//! autocorrelation of the batch means, reported for the caller to warn on.

use std::fmt;

use super::interval::{Estimate, IntervalError, estimate};

/// Fewest batches allowed: below this, t's degrees of freedom make the interval needlessly wide
/// and the autocorrelation check meaningless.
pub const MIN_BATCHES: usize = 10;

/// The usual number of batches.
pub const DEFAULT_BATCHES: usize = 20;

/// The batch-means estimate of a steady-state mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchMeans {
    /// The mean of the batch means with its t interval on `k − 1` degrees of freedom.
    pub estimate: Estimate,
    /// Observations per batch.
    pub batch_size: usize,
    /// Observations dropped from the start because they did not fill a batch.
    pub dropped: usize,
    /// Lag-1 autocorrelation of the batch means; `None` when they are all equal.
    pub lag1_autocorrelation: Option<f64>,
}

impl BatchMeans {
    /// Whether the batch means look correlated, so that the batches are too short and the
    /// interval too narrow: their lag-1 autocorrelation exceeds `2/√k`, about the 2.5 % one-sided
    /// critical value for `k` independent means.
    pub fn batches_look_correlated(&self) -> bool {
        let threshold = 2.0 / libm::sqrt(self.estimate.n as f64);
        self.lag1_autocorrelation.is_some_and(|r| r > threshold)
    }
}

/// Why no batch-means estimate could be formed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BatchMeansError {
    /// Fewer than [`MIN_BATCHES`] batches were asked for.
    TooFewBatches {
        /// The number asked for.
        batches: usize,
    },
    /// The series has fewer observations than batches.
    TooShort {
        /// Observations in the series.
        observations: usize,
        /// Batches asked for.
        batches: usize,
    },
    /// An observation was NaN or infinite.
    NonFinite {
        /// Its position in the series.
        index: usize,
    },
    /// The batch means could not be turned into an interval (the level was invalid).
    Interval(IntervalError),
}

impl fmt::Display for BatchMeansError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchMeansError::TooFewBatches { batches } => {
                write!(f, "{batches} batches are too few; at least {MIN_BATCHES} are needed")
            }
            BatchMeansError::TooShort { observations, batches } => {
                write!(f, "{observations} observations cannot fill {batches} batches")
            }
            BatchMeansError::NonFinite { index } => write!(f, "observation {index} is not a finite number"),
            BatchMeansError::Interval(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BatchMeansError {}

/// The steady-state mean of one run's `series` by `batches` batch means, at confidence `level`.
pub fn batch_means(series: &[f64], batches: usize, level: f64) -> Result<BatchMeans, BatchMeansError> {
    if batches < MIN_BATCHES {
        return Err(BatchMeansError::TooFewBatches { batches });
    }
    if let Some(index) = series.iter().position(|v| !v.is_finite()) {
        return Err(BatchMeansError::NonFinite { index });
    }
    let batch_size = series.len() / batches;
    if batch_size == 0 {
        return Err(BatchMeansError::TooShort { observations: series.len(), batches });
    }
    let dropped = series.len() - batches * batch_size;
    let means: Vec<f64> = series[dropped..]
        .chunks_exact(batch_size)
        .map(|batch| batch.iter().sum::<f64>() / batch_size as f64)
        .collect();
    let estimate = estimate(&means, level).map_err(BatchMeansError::Interval)?;
    Ok(BatchMeans { estimate, batch_size, dropped, lag1_autocorrelation: lag1_autocorrelation(&means) })
}

/// `Σ (Z_j − Z̄)(Z_{j+1} − Z̄) / Σ (Z_j − Z̄)²`; `None` when the values do not vary.
fn lag1_autocorrelation(values: &[f64]) -> Option<f64> {
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let deviations: Vec<f64> = values.iter().map(|v| v - mean).collect();
    let variance: f64 = deviations.iter().map(|d| d * d).sum();
    let covariance: f64 = deviations.windows(2).map(|pair| pair[0] * pair[1]).sum();
    (variance > 0.0).then(|| covariance / variance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::interval::DEFAULT_LEVEL;
    use crate::stats::test_draws::standard_normal;
    use blis_kernel::Streams;

    /// `X_t = μ + φ(X_{t−1} − μ) + ε_t` with standard normal `ε`, started at `μ`.
    fn ar1(seed: u64, mean: f64, phi: f64, n: usize) -> Vec<f64> {
        let mut stream = Streams::new(seed).stream("test", "x", "");
        let mut x = mean;
        (0..n)
            .map(|_| {
                x = mean + phi * (x - mean) + standard_normal(&mut stream);
                x
            })
            .collect()
    }

    #[test]
    fn batch_means_cover_the_mean_of_a_correlated_series() {
        // φ = 0.9: the variance of a long-run mean is 19× the naive one, so only long batches
        // (500 observations here) give honest intervals.
        let runs = 200;
        let mut covered = 0;
        let mut flagged = 0;
        for seed in 0..runs {
            let result = batch_means(&ar1(seed, 10.0, 0.9, 10_000), DEFAULT_BATCHES, DEFAULT_LEVEL).unwrap();
            assert_eq!((result.batch_size, result.dropped, result.estimate.n), (500, 0, 20));
            covered += u32::from(result.estimate.contains(10.0));
            flagged += u32::from(result.batches_look_correlated());
        }
        let coverage = f64::from(covered) / f64::from(runs as u32);
        assert!((0.91..=0.99).contains(&coverage), "coverage {coverage}");
        assert!(flagged <= 15, "{flagged} of {runs} runs flagged as correlated");
    }

    #[test]
    fn batches_of_one_observation_undercover_and_are_flagged() {
        let runs = 100;
        let mut covered = 0;
        for seed in 0..runs {
            let series = ar1(seed, 10.0, 0.9, 2_000);
            let result = batch_means(&series, series.len(), DEFAULT_LEVEL).unwrap();
            assert!(result.batches_look_correlated(), "{result:?}");
            covered += u32::from(result.estimate.contains(10.0));
        }
        assert!(covered < 60, "naive intervals covered {covered} of {runs}");
    }

    #[test]
    fn leftover_observations_are_dropped_from_the_start() {
        // 23 values in 10 batches of 2: the first 3 go; the rest are 0,0, 1,1, …, 9,9.
        let mut series = vec![100.0; 3];
        series.extend((0..20).map(|i| f64::from(i / 2)));
        let result = batch_means(&series, 10, DEFAULT_LEVEL).unwrap();
        assert_eq!((result.batch_size, result.dropped, result.estimate.mean), (2, 3, 4.5));
        // Means 0..9: the lag-1 cross-product sum 57.75 over the sum of squares 82.5.
        assert!((result.lag1_autocorrelation.unwrap() - 0.7).abs() < 1e-12, "{result:?}");
    }

    #[test]
    fn equal_batch_means_have_no_autocorrelation() {
        let result = batch_means(&[2.0; 40], 20, DEFAULT_LEVEL).unwrap();
        assert_eq!((result.lag1_autocorrelation, result.estimate.half_width), (None, Some(0.0)));
        assert!(!result.batches_look_correlated());
    }

    #[test]
    fn unusable_requests_are_refused() {
        assert_eq!(batch_means(&[1.0; 100], 9, 0.95), Err(BatchMeansError::TooFewBatches { batches: 9 }));
        assert_eq!(
            batch_means(&[1.0; 19], 20, 0.95),
            Err(BatchMeansError::TooShort { observations: 19, batches: 20 })
        );
        let mut series = vec![1.0; 45];
        series[17] = f64::NAN;
        assert_eq!(batch_means(&series, 20, 0.95), Err(BatchMeansError::NonFinite { index: 17 }));
        assert_eq!(
            batch_means(&[1.0; 40], 20, 0.0),
            Err(BatchMeansError::Interval(IntervalError::InvalidLevel(0.0)))
        );
    }
}

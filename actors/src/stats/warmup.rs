//! Where a run's initial transient ends: the MSER-5 truncation rule.
//!
//! A simulation started empty spends its first stretch in states the steady state rarely
//! visits; averaging over them biases steady-state estimates. MSER-5 (White 1997; White, Cobb &
//! Spratt 2000) chooses how much of a time-ordered output series to discard. The series is cut
//! into `k = ⌊n/5⌋` consecutive batches of 5 (a trailing partial batch is ignored) with means
//! `Z₁ … Z_k`; for each candidate truncation `d` the statistic is
//!
//! ```text
//! MSER(d) = Σ_{j=d+1..k} (Z_j − Z̄(d))² / (k − d)²,   Z̄(d) the mean of Z_{d+1} … Z_k,
//! ```
//!
//! the squared standard error of the truncated mean, which falls while discarding removes bias
//! and rises once it only removes data. The truncation is the smallest `d` minimizing it over
//! `0 ≤ d ≤ ⌊k/2⌋`; `5d` raw observations are discarded. A minimum at the edge of that range
//! means the series never settled within its first half, and the run is too short to tell.

use std::fmt;

/// Observations per batch in MSER-5.
pub const MSER5_BATCH_SIZE: usize = 5;

/// Fewest batches MSER is applied to; with fewer, its statistic is noise.
pub const MIN_MSER_BATCHES: usize = 10;

/// The warm-up truncation chosen by MSER.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Truncation {
    /// Raw observations to discard from the start of the series.
    pub discard: usize,
    /// Batches the statistic was computed over.
    pub batches: usize,
    /// The MSER statistic at the chosen truncation.
    pub statistic: f64,
    /// Whether the minimum fell on the last truncation searched (half the batches), so the
    /// transient may not have ended: the run should be longer.
    pub at_search_limit: bool,
}

/// Why no truncation could be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmupError {
    /// The series has fewer than [`MIN_MSER_BATCHES`] whole batches.
    TooShort {
        /// Observations in the series.
        observations: usize,
        /// Observations needed.
        needed: usize,
    },
    /// The batch size was zero.
    EmptyBatches,
    /// An observation was NaN or infinite.
    NonFinite {
        /// Its position in the series.
        index: usize,
    },
}

impl fmt::Display for WarmupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WarmupError::TooShort { observations, needed } => {
                write!(f, "{observations} observations are too few to detect a warm-up; {needed} are needed")
            }
            WarmupError::EmptyBatches => write!(f, "the batch size must be positive"),
            WarmupError::NonFinite { index } => write!(f, "observation {index} is not a finite number"),
        }
    }
}

impl std::error::Error for WarmupError {}

/// The MSER-5 truncation of a time-ordered output series.
pub fn mser5(series: &[f64]) -> Result<Truncation, WarmupError> {
    mser(series, MSER5_BATCH_SIZE)
}

/// The MSER truncation of a time-ordered output series, with batches of `batch_size`.
pub fn mser(series: &[f64], batch_size: usize) -> Result<Truncation, WarmupError> {
    if batch_size == 0 {
        return Err(WarmupError::EmptyBatches);
    }
    if let Some(index) = series.iter().position(|v| !v.is_finite()) {
        return Err(WarmupError::NonFinite { index });
    }
    let batches = series.len() / batch_size;
    if batches < MIN_MSER_BATCHES {
        return Err(WarmupError::TooShort {
            observations: series.len(),
            needed: MIN_MSER_BATCHES * batch_size,
        });
    }
    let means: Vec<f64> =
        series.chunks_exact(batch_size).map(|batch| batch.iter().sum::<f64>() / batch_size as f64).collect();
    let last_candidate = batches / 2;
    // Sum of squared deviations of each suffix Z_{d+1..k}, by Welford's update with the batches
    // taken from the last backwards, so no large sums are subtracted.
    let mut statistics = vec![0.0; last_candidate + 1];
    let (mut count, mut mean, mut squares) = (0.0, 0.0, 0.0);
    for (d, &z) in means.iter().enumerate().rev() {
        count += 1.0;
        let delta = z - mean;
        mean += delta / count;
        squares += delta * (z - mean);
        if d <= last_candidate {
            statistics[d] = squares / (count * count);
        }
    }
    let (best, statistic) = statistics
        .iter()
        .copied()
        .enumerate()
        .fold((0, f64::INFINITY), |best, (d, s)| if s < best.1 { (d, s) } else { best });
    Ok(Truncation { discard: best * batch_size, batches, statistic, at_search_limit: best == last_candidate })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_draws::standard_normal;
    use blis_kernel::Streams;

    fn noise(seed: u64, n: usize) -> Vec<f64> {
        let mut stream = Streams::new(seed).stream("test", "x", "");
        (0..n).map(|_| standard_normal(&mut stream)).collect()
    }

    #[test]
    fn an_exponential_transient_is_cut_after_it_fades() {
        // 100·e^(−t/50) falls below the noise's standard error of a batch mean (0.45) near
        // t = 270, and below 1 % of its start by t = 230.
        for seed in 1..=10 {
            let series: Vec<f64> = noise(seed, 2_000)
                .iter()
                .enumerate()
                .map(|(t, e)| 100.0 * libm::exp(-(t as f64) / 50.0) + e)
                .collect();
            let cut = mser5(&series).unwrap();
            assert!((200..=400).contains(&cut.discard), "seed {seed}: {cut:?}");
            assert!(!cut.at_search_limit);
        }
    }

    #[test]
    fn a_stationary_series_is_barely_truncated() {
        let discards: Vec<usize> = (1..=20).map(|seed| mser5(&noise(seed, 2_000)).unwrap().discard).collect();
        let mean_discard = discards.iter().sum::<usize>() as f64 / discards.len() as f64;
        assert!(mean_discard < 50.0, "{discards:?}");
        assert!(discards.iter().all(|&d| d < 200), "{discards:?}");
    }

    #[test]
    fn a_step_is_cut_at_the_step() {
        let series: Vec<f64> =
            noise(3, 3_000).iter().enumerate().map(|(t, e)| if t < 500 { 10.0 + e } else { *e }).collect();
        assert_eq!(mser5(&series).unwrap().discard, 500);
    }

    #[test]
    fn a_constant_series_is_not_truncated() {
        let cut = mser5(&[4.0; 100]).unwrap();
        assert_eq!((cut.discard, cut.batches, cut.statistic, cut.at_search_limit), (0, 20, 0.0, false));
    }

    #[test]
    fn a_series_that_never_settles_hits_the_search_limit() {
        let trend: Vec<f64> = (0..1_000).map(f64::from).collect();
        let cut = mser5(&trend).unwrap();
        assert_eq!((cut.discard, cut.at_search_limit), (500, true));
    }

    #[test]
    fn the_statistic_is_the_squared_standard_error_of_the_truncated_mean() {
        // Batch means 0 ×9, then 1 and 3: at d = 0 the 11 means have mean 4/11, and discarding
        // zeros only raises the statistic (10 − 16/c) / c² of the c batches kept.
        let mut series = vec![0.0; 45];
        series.extend([1.0; 5]);
        series.extend([3.0; 5]);
        let cut = mser(&series, 5).unwrap();
        let mean = 4.0 / 11.0;
        let squares = 9.0 * mean * mean + (1.0 - mean) * (1.0 - mean) + (3.0 - mean) * (3.0 - mean);
        assert_eq!(cut.discard, 0);
        assert!((cut.statistic - squares / 121.0).abs() < 1e-15, "{cut:?}");
    }

    #[test]
    fn short_or_broken_series_are_refused() {
        assert_eq!(mser5(&[1.0; 49]), Err(WarmupError::TooShort { observations: 49, needed: 50 }));
        assert_eq!(mser(&[1.0; 100], 0), Err(WarmupError::EmptyBatches));
        let mut series = vec![1.0; 60];
        series[7] = f64::INFINITY;
        assert_eq!(mser5(&series), Err(WarmupError::NonFinite { index: 7 }));
    }
}

//! Whether a run is overloaded: its backlog keeps growing instead of settling.
//!
//! An overloaded system has no steady state, so its "steady-state" means are artefacts of the
//! run length; this check belongs before any interval is reported. The input is a backlog (the
//! Result uses calls waiting for their first token) sampled over simulated time as
//! `(time, backlog)` pairs, time strictly increasing, covering only the period in which load is
//! offered (a final drain after arrivals stop would hide growth). Beside the growth rule below, a
//! run is overloaded when its clients abandon at least [`ABANDONED_SHARE`] of the calls (client
//! timeouts cap a backlog), and [`OverloadWatch`] is the stop rule that ends a run judged
//! overloaded once its backlog reaches [`STOP_BACKLOG`]; `docs/RELIABILITY.md` states all three.
//!
//! # The rule
//!
//! Split the samples at the midpoint in time `t_mid = (t_first + t_last) / 2`: the first half is
//! the samples with `t < t_mid`, the second half the `m` samples with `t ≥ t_mid`
//! (`m ≥` [`MIN_TREND_SAMPLES`]). Cut the second half into [`TREND_BATCHES`] = 10 consecutive
//! batches of `⌊m/10⌋` samples (the earliest `m mod 10` samples are left out) and reduce each
//! batch to one point, its mean time and mean backlog. Fit `backlog = a + b·t` to the 10 points
//! by least squares; the slope's standard error is `se = √(SSE / 8 / Σ(t − t̄)²)` over them.
//! The run is **overloaded** when all three hold
//!
//! 1. the slope is positive and significant: `b / se > t(0.99, 8) = 2.896`, a one-sided t-test
//!    at level [`SIGNIFICANCE`] = 1 % (a perfect fit, `se = 0`, counts as significant when
//!    `b > 0`);
//! 2. the backlog has more than doubled: the fitted backlog at the last sample,
//!    `a + b·t_last`, exceeds [`GROWTH_FACTOR`] = 2 × the mean backlog of the first half's
//!    samples;
//! 3. the fitted backlog at the last sample is at least [`MIN_OVERLOADED_BACKLOG`] = 1 call: a
//!    backlog that grows from 0.1 to 0.3 calls is noise on an idle queue, not overload.
//!
//! Why batches: a backlog is strongly autocorrelated, and a slope t-test on the raw samples
//! treats them as independent, so its standard error is far too small and it finds
//! "significant" trends in stable queues about half the time. Batch means whose batches span
//! several relaxation times of the backlog are nearly independent (as in the method of batch
//! means), which makes the test honest. Why the fitted value rather than the last sample: so
//! that one spike cannot decide. Why the first half's mean rather than its median: a backlog's
//! distribution is skewed (geometric for M/M/1), and at utilisation 0.7 its mean 2.33 is already
//! more than twice its median 1, so a median-based doubling would flag stable queues whose
//! backlog merely sits at its mean. A backlog growing linearly from empty ends at four times its
//! first-half mean, so sustained overload is caught once it is significant. Near saturation a
//! stable system wanders for long stretches (its relaxation time grows like `1/(1 − √ρ)²` for
//! M/M/1), and a run shorter than a few dozen relaxation times per batch can still be flagged;
//! such a run could not give trustworthy steady-state estimates either.

use std::fmt;

use super::student_t::t_quantile;

/// Outstanding calls from which a run is watched for overload while it runs: once its backlog
/// reaches this (and at every doubling after), the rule is applied to the backlog sampled so
/// far, and a run judged overloaded is stopped there. At about 17 KB per queued call this keeps
/// an overloaded run within a few hundred MB.
pub const STOP_BACKLOG: u64 = 10_000;

/// Most backlog samples the watch keeps; beyond it every other one is dropped.
const WATCH_SAMPLES: usize = 4_096;

/// The smallest fitted final backlog that can mean overload, calls: below one call waiting,
/// calls mostly find no queue at all.
pub const MIN_OVERLOADED_BACKLOG: f64 = 1.0;

/// The share of settled calls that time out, over the second half of the offered load, from
/// which a run whose backlog is capped by client timeouts counts as overloaded: the cluster
/// abandons at least as many calls as it serves.
pub const ABANDONED_SHARE: f64 = 0.5;

/// The stop rule: watches a run's outstanding calls as it runs and says when to stop it.
#[derive(Clone, Debug, Default)]
pub struct OverloadWatch {
    samples: Vec<(f64, f64)>,
    stride: usize,
    seen: usize,
    next_check: u64,
}

impl OverloadWatch {
    /// A watch that has seen nothing.
    pub fn new() -> OverloadWatch {
        OverloadWatch { samples: Vec::new(), stride: 1, seen: 0, next_check: STOP_BACKLOG }
    }

    /// Take the backlog `backlog` at `time_s` (times increasing); true when the run should stop:
    /// the backlog has reached [`STOP_BACKLOG`] (or the next doubling since the last check) and
    /// the rule judges the samples so far overloaded.
    pub fn observe(&mut self, time_s: f64, backlog: u64) -> bool {
        if self.samples.last().is_some_and(|&(t, _)| t >= time_s) {
            return false;
        }
        self.seen += 1;
        if self.seen.is_multiple_of(self.stride) {
            self.samples.push((time_s, backlog as f64));
            if self.samples.len() >= WATCH_SAMPLES {
                self.samples = self.samples.iter().copied().step_by(2).collect();
                self.stride *= 2;
            }
        }
        if backlog < self.next_check {
            return false;
        }
        self.next_check = backlog.saturating_mul(2);
        assess_overload(&self.samples).is_ok_and(|a| a.overloaded)
    }
}

/// The one-sided level of the test that the second-half slope is positive.
pub const SIGNIFICANCE: f64 = 0.01;

/// How many times the first-half mean backlog the fitted final backlog must exceed.
pub const GROWTH_FACTOR: f64 = 2.0;

/// Batches the second half is cut into for the trend's fit.
pub const TREND_BATCHES: usize = 10;

/// Fewest samples in the second half for the trend to be assessed: one per batch.
pub const MIN_TREND_SAMPLES: usize = TREND_BATCHES;

/// The evidence for and the verdict on overload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverloadAssessment {
    /// Least-squares slope of the second half's batch means, backlog per unit of time.
    pub slope: f64,
    /// The slope's standard error.
    pub slope_std_error: f64,
    /// `slope / slope_std_error`; infinite when a nonzero slope fits perfectly, 0 for a flat one.
    pub t_statistic: f64,
    /// The critical value `t(1 − SIGNIFICANCE, TREND_BATCHES − 2)` it is compared with.
    pub critical_t: f64,
    /// Whether the slope is positive and significant (condition 1 of the rule).
    pub slope_significant: bool,
    /// The fitted backlog at the last sample time.
    pub final_backlog: f64,
    /// The mean backlog of the first half's samples.
    pub first_half_mean: f64,
    /// The verdict: both conditions of the rule hold.
    pub overloaded: bool,
}

/// Why the backlog could not be assessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverloadError {
    /// The second half has fewer than [`MIN_TREND_SAMPLES`] samples.
    TooFewSamples {
        /// Samples in the second half.
        second_half: usize,
    },
    /// A sample's time is not after the previous one's.
    NotTimeOrdered {
        /// The sample's position.
        index: usize,
    },
    /// A time or backlog was NaN or infinite.
    NonFinite {
        /// The sample's position.
        index: usize,
    },
}

impl fmt::Display for OverloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverloadError::TooFewSamples { second_half } => write!(
                f,
                "{second_half} backlog samples in the second half of the run; at least {MIN_TREND_SAMPLES} are needed"
            ),
            OverloadError::NotTimeOrdered { index } => {
                write!(f, "backlog sample {index} is not later than the one before it")
            }
            OverloadError::NonFinite { index } => write!(f, "backlog sample {index} is not a finite number"),
        }
    }
}

impl std::error::Error for OverloadError {}

/// Whether the backlog sampled as `(time, backlog)` pairs keeps growing, by the module's rule.
pub fn assess_overload(samples: &[(f64, f64)]) -> Result<OverloadAssessment, OverloadError> {
    if let Some(index) = samples.iter().position(|(t, v)| !t.is_finite() || !v.is_finite()) {
        return Err(OverloadError::NonFinite { index });
    }
    if let Some(index) = samples.windows(2).position(|pair| pair[1].0 <= pair[0].0) {
        return Err(OverloadError::NotTimeOrdered { index: index + 1 });
    }
    let (Some(&(first_time, _)), Some(&(last_time, _))) = (samples.first(), samples.last()) else {
        return Err(OverloadError::TooFewSamples { second_half: 0 });
    };
    let midpoint = 0.5 * (first_time + last_time);
    let split = samples.partition_point(|&(t, _)| t < midpoint);
    let (first_half, second_half) = samples.split_at(split);
    if second_half.len() < MIN_TREND_SAMPLES {
        return Err(OverloadError::TooFewSamples { second_half: second_half.len() });
    }
    let batch_size = second_half.len() / TREND_BATCHES;
    let batch_means: Vec<(f64, f64)> = second_half[second_half.len() % TREND_BATCHES..]
        .chunks_exact(batch_size)
        .map(|batch| {
            let n = batch.len() as f64;
            (batch.iter().map(|p| p.0).sum::<f64>() / n, batch.iter().map(|p| p.1).sum::<f64>() / n)
        })
        .collect();
    let fit = LinearFit::of(&batch_means);
    let critical_t = t_quantile(1.0 - SIGNIFICANCE, (TREND_BATCHES - 2) as f64);
    let t_statistic = if fit.slope == 0.0 { 0.0 } else { fit.slope / fit.slope_std_error };
    let slope_significant = fit.slope > 0.0 && t_statistic > critical_t;
    let final_backlog = fit.at(last_time);
    let first_half_mean = first_half.iter().map(|&(_, v)| v).sum::<f64>() / first_half.len() as f64;
    Ok(OverloadAssessment {
        slope: fit.slope,
        slope_std_error: fit.slope_std_error,
        t_statistic,
        critical_t,
        slope_significant,
        final_backlog,
        first_half_mean,
        overloaded: slope_significant
            && final_backlog > GROWTH_FACTOR * first_half_mean
            && final_backlog >= MIN_OVERLOADED_BACKLOG,
    })
}

/// A least-squares line `value = mean_value + slope·(t − mean_time)`.
struct LinearFit {
    mean_time: f64,
    mean_value: f64,
    slope: f64,
    slope_std_error: f64,
}

impl LinearFit {
    /// The fit to at least three points with distinct times, in centred form for accuracy.
    fn of(points: &[(f64, f64)]) -> LinearFit {
        let n = points.len() as f64;
        let mean_time = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_value = points.iter().map(|p| p.1).sum::<f64>() / n;
        let spread: f64 = points.iter().map(|p| (p.0 - mean_time) * (p.0 - mean_time)).sum();
        let co_spread: f64 = points.iter().map(|p| (p.0 - mean_time) * (p.1 - mean_value)).sum();
        let slope = co_spread / spread;
        let residual_squares: f64 = points
            .iter()
            .map(|p| {
                let residual = p.1 - mean_value - slope * (p.0 - mean_time);
                residual * residual
            })
            .sum();
        let slope_std_error = libm::sqrt(residual_squares / (n - 2.0) / spread);
        LinearFit { mean_time, mean_value, slope, slope_std_error }
    }

    /// The fitted value at time `t`.
    fn at(&self, t: f64) -> f64 {
        self.mean_value + self.slope * (t - self.mean_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_draws::standard_normal;
    use blis_kernel::Streams;

    /// The number in an M/M/1 queue (arrival rate `arrival_rate`, service rate 1), started empty
    /// and sampled at times 0, 1, …, `horizon − 1`.
    fn mm1_backlog(seed: u64, arrival_rate: f64, horizon: u32) -> Vec<(f64, f64)> {
        let mut stream = Streams::new(seed).stream("test", "x", "");
        let mut samples = Vec::new();
        let (mut now, mut in_system) = (0.0, 0u32);
        for tick in 0..horizon {
            let tick = f64::from(tick);
            loop {
                let rate = arrival_rate + if in_system > 0 { 1.0 } else { 0.0 };
                let next = now + stream.exponential(1.0 / rate);
                if next > tick {
                    // Memorylessness: restarting the clock at the sample time changes nothing.
                    now = tick;
                    break;
                }
                now = next;
                if stream.unit() * rate < arrival_rate {
                    in_system += 1;
                } else {
                    in_system -= 1;
                }
            }
            samples.push((tick, f64::from(in_system)));
        }
        samples
    }

    #[test]
    fn stable_queues_are_not_overloaded() {
        for rho in [0.5, 0.7, 0.9] {
            for seed in 1..=10 {
                let verdict = assess_overload(&mm1_backlog(seed, rho, 20_000)).unwrap();
                assert!(!verdict.overloaded, "ρ {rho}, seed {seed}: {verdict:?}");
            }
        }
    }

    #[test]
    fn overloaded_queues_are_overloaded() {
        for seed in 1..=10 {
            let verdict = assess_overload(&mm1_backlog(seed, 1.2, 20_000)).unwrap();
            assert!(verdict.overloaded, "seed {seed}: {verdict:?}");
            // The backlog grows at λ − μ = 0.2 per unit of time; the fitted slope of its random walk
            // (variance 2.2 per unit) over 10,000 units has a standard deviation of about 0.016.
            assert!((verdict.slope - 0.2).abs() < 0.065, "seed {seed}: {verdict:?}");
            let mild = assess_overload(&mm1_backlog(seed, 1.05, 20_000)).unwrap();
            assert!(mild.overloaded, "ρ 1.05, seed {seed}: {mild:?}");
        }
    }

    #[test]
    fn a_slope_test_on_raw_samples_would_see_trends_in_stable_queues() {
        // Why the rule batches: unbatched, the nominal 1 % test fires far more often than 1 %.
        let mut significant = 0;
        for rho in [0.8, 0.9] {
            for seed in 1..=10 {
                let samples = mm1_backlog(seed, rho, 20_000);
                let second_half = &samples[10_000..];
                let fit = LinearFit::of(second_half);
                let critical = t_quantile(1.0 - SIGNIFICANCE, (second_half.len() - 2) as f64);
                significant += u32::from(fit.slope / fit.slope_std_error > critical);
            }
        }
        assert!(significant >= 5, "{significant} of 20 raw slope tests significant");
    }

    #[test]
    fn a_linearly_growing_noisy_backlog_is_overloaded() {
        let mut stream = Streams::new(5).stream("test", "x", "");
        let samples: Vec<(f64, f64)> = (0..2_000)
            .map(|t| (f64::from(t), 5.0 + 0.01 * f64::from(t) + standard_normal(&mut stream)))
            .collect();
        let verdict = assess_overload(&samples).unwrap();
        assert!(verdict.overloaded && verdict.slope_significant, "{verdict:?}");
        assert!((verdict.slope - 0.01).abs() < 4.0 * verdict.slope_std_error, "{verdict:?}");
        assert!((verdict.final_backlog - 25.0).abs() < 0.5, "{verdict:?}");
    }

    #[test]
    fn a_significant_but_small_drift_is_not_overload() {
        // From 100 to 110 over the run: clearly upward, far from doubling.
        let mut stream = Streams::new(6).stream("test", "x", "");
        let samples: Vec<(f64, f64)> = (0..10_000)
            .map(|t| (f64::from(t), 100.0 + 0.001 * f64::from(t) + standard_normal(&mut stream)))
            .collect();
        let verdict = assess_overload(&samples).unwrap();
        assert!(verdict.slope_significant && !verdict.overloaded, "{verdict:?}");
    }

    #[test]
    fn a_draining_backlog_is_not_overloaded() {
        let samples: Vec<(f64, f64)> = (0..100).map(|t| (f64::from(t), f64::from(1_000 - 10 * t))).collect();
        let verdict = assess_overload(&samples).unwrap();
        assert!(verdict.slope < 0.0 && !verdict.slope_significant && !verdict.overloaded, "{verdict:?}");
    }

    #[test]
    fn the_rule_uses_the_first_half_mean_and_the_fitted_end() {
        // Times 0..=19 split at 9.5: the first half is 0..=9 with backlogs 0..=9 (mean 4.5),
        // the second a line from 10 to 19 with slope 1. Doubling needs 19 > 9: overloaded.
        let samples: Vec<(f64, f64)> = (0..20).map(|t| (f64::from(t), f64::from(t))).collect();
        let verdict = assess_overload(&samples).unwrap();
        assert_eq!((verdict.first_half_mean, verdict.final_backlog, verdict.slope), (4.5, 19.0, 1.0));
        assert!(verdict.t_statistic > 1e6 && verdict.overloaded, "{verdict:?}");
        assert!((verdict.critical_t - 2.896459447709622).abs() < 1e-12, "t(0.99, 8): {verdict:?}");
        // The same line started at a backlog of 20: the end, 39, is under twice 24.5.
        let shifted: Vec<(f64, f64)> = samples.iter().map(|&(t, v)| (t, v + 20.0)).collect();
        let verdict = assess_overload(&shifted).unwrap();
        assert!(verdict.slope_significant && !verdict.overloaded, "{verdict:?}");
    }

    #[test]
    fn a_tiny_backlog_that_doubles_is_not_overload() {
        // A queue that is almost always empty, its occupancy creeping up from 0.05 to 0.3:
        // significant and more than doubled, but never a call waiting on average.
        let samples: Vec<(f64, f64)> =
            (0..200).map(|t| (f64::from(t), 0.05 + 0.25 * f64::from(t) / 200.0)).collect();
        let verdict = assess_overload(&samples).unwrap();
        assert!(verdict.slope_significant && verdict.final_backlog < 1.0, "{verdict:?}");
        assert!(!verdict.overloaded, "{verdict:?}");
    }

    #[test]
    fn the_watch_stops_a_growing_backlog_once_it_is_large_and_only_then() {
        let mut watch = OverloadWatch::new();
        // Stable at 12,000 outstanding calls for a long while: checked, never stopped.
        for t in 0..10_000 {
            assert!(!watch.observe(f64::from(t), 12_000 + (t % 7) as u64), "stopped at {t}");
        }
        // Then growing by 10 calls a second: not before the next doubling (24,000, at 11,200 s),
        // and soon after it.
        let mut stopped = None;
        for t in 10_000..20_000u32 {
            if watch.observe(f64::from(t), 12_000 + 10 * u64::from(t - 10_000)) {
                stopped = Some(t);
                break;
            }
        }
        let at = stopped.expect("a growing backlog is stopped");
        assert!((11_200..=14_000).contains(&at), "stopped at {at}");
        assert!(watch.samples.len() < WATCH_SAMPLES, "{} samples kept", watch.samples.len());
    }

    #[test]
    fn unusable_series_are_refused() {
        let line: Vec<(f64, f64)> = (0..18).map(|t| (f64::from(t), 1.0)).collect();
        assert_eq!(assess_overload(&line), Err(OverloadError::TooFewSamples { second_half: 9 }));
        assert_eq!(assess_overload(&[]), Err(OverloadError::TooFewSamples { second_half: 0 }));
        let mut unordered: Vec<(f64, f64)> = (0..40).map(|t| (f64::from(t), 1.0)).collect();
        unordered[12].0 = 11.0;
        assert_eq!(assess_overload(&unordered), Err(OverloadError::NotTimeOrdered { index: 12 }));
        unordered[3].1 = f64::NAN;
        assert_eq!(assess_overload(&unordered), Err(OverloadError::NonFinite { index: 3 }));
    }
}

//! Comparing two configurations on paired replications (common random numbers).
//!
//! Replication `i` of configuration A and replication `i` of configuration B are run with the
//! same seed, so they see the same arrivals and request sizes and differ only by the
//! configuration. The per-pair differences `d_i = B_i − A_i` then cancel much of the noise
//! both share, and the paired-t interval on their mean (Law & Kelton §10.2.1) needs only that
//! pairs be independent of one another, not that A and B be independent or equally variable.
//! The verdict says whether B is better than A, worse, or not distinguished from it at the
//! chosen level: not distinguished exactly when the interval on the mean difference contains
//! zero. Several comparisons made at once each need a higher level (Bonferroni: `1 − α/c` for
//! `c` comparisons) for the whole set to hold at `1 − α`.

use std::fmt;

use super::interval::{Estimate, IntervalError, estimate};

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Smaller is better, as for latencies.
    LowerIsBetter,
    /// Larger is better, as for throughput.
    HigherIsBetter,
}

/// How configuration B compares with configuration A on one metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// B is better than A: the interval on the mean difference lies wholly on B's good side.
    Better,
    /// B is worse than A: the interval lies wholly on B's bad side.
    Worse,
    /// The interval contains zero (or is unbounded): the replications cannot tell them apart.
    NotDistinguished,
}

/// The paired comparison of B with A.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// The mean of `B_i − A_i` with its confidence interval.
    pub difference: Estimate,
    /// What the interval says.
    pub verdict: Verdict,
}

/// Why two configurations could not be compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CompareError {
    /// A and B have different numbers of replications, so they cannot be paired.
    LengthMismatch {
        /// Replications of A.
        a: usize,
        /// Replications of B.
        b: usize,
    },
    /// The differences could not be turned into an interval (no pairs, a non-finite value at a
    /// pair's index, or an invalid level).
    Interval(IntervalError),
}

impl fmt::Display for CompareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompareError::LengthMismatch { a, b } => {
                write!(f, "cannot pair {a} replications of A with {b} of B")
            }
            CompareError::Interval(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CompareError {}

/// Compare B with A on one metric from replications paired by seed (`a[i]` and `b[i]` share
/// seed `i`), at confidence `level`.
pub fn compare_paired(
    a: &[f64],
    b: &[f64],
    direction: Direction,
    level: f64,
) -> Result<Comparison, CompareError> {
    if a.len() != b.len() {
        return Err(CompareError::LengthMismatch { a: a.len(), b: b.len() });
    }
    let differences: Vec<f64> = a.iter().zip(b).map(|(a, b)| b - a).collect();
    let difference = estimate(&differences, level).map_err(CompareError::Interval)?;
    let verdict = if difference.contains(0.0) {
        Verdict::NotDistinguished
    } else if (difference.mean < 0.0) == (direction == Direction::LowerIsBetter) {
        Verdict::Better
    } else {
        Verdict::Worse
    };
    Ok(Comparison { difference, verdict })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::interval::DEFAULT_LEVEL;
    use crate::stats::test_draws::standard_normal;
    use blis_kernel::{Streams, Substream};

    /// Ten paired replications whose shared part varies a lot between seeds (sd 20) and whose
    /// B-only part little (sd 0.2); B is `shift` above A on average.
    fn pairs(stream: &mut Substream, shift: f64) -> (Vec<f64>, Vec<f64>) {
        let a: Vec<f64> = (0..10).map(|_| 100.0 + 20.0 * standard_normal(stream)).collect();
        let b = a.iter().map(|a| a + shift + 0.2 * standard_normal(stream)).collect();
        (a, b)
    }

    #[test]
    fn a_small_shift_is_detected_through_common_random_numbers() {
        let mut stream = Streams::new(11).stream("test", "x", "");
        let (a, b) = pairs(&mut stream, 0.5);
        let lower = compare_paired(&a, &b, Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!(lower.verdict, Verdict::Worse, "{lower:?}");
        assert!(lower.difference.contains(0.5), "{lower:?}");
        let higher = compare_paired(&a, &b, Direction::HigherIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!(higher.verdict, Verdict::Better);
        let swapped = compare_paired(&b, &a, Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!(swapped.verdict, Verdict::Better);
        // Unpaired, the two intervals overlap widely: the shift is lost in the shared noise.
        let (ea, eb) = (estimate(&a, DEFAULT_LEVEL).unwrap(), estimate(&b, DEFAULT_LEVEL).unwrap());
        assert!(eb.mean - ea.mean < 0.1 * (ea.half_width.unwrap() + eb.half_width.unwrap()));
    }

    #[test]
    fn equal_configurations_are_told_apart_about_five_percent_of_the_time() {
        let mut stream = Streams::new(12).stream("test", "x", "");
        let experiments = 1_000;
        let mut distinguished = 0;
        for _ in 0..experiments {
            let (a, b) = pairs(&mut stream, 0.0);
            let comparison = compare_paired(&a, &b, Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
            distinguished += u32::from(comparison.verdict != Verdict::NotDistinguished);
        }
        assert!((25..=75).contains(&distinguished), "{distinguished} of {experiments}");
    }

    #[test]
    fn identical_and_constant_differences_are_judged_exactly() {
        let a = [3.0, 5.0, 4.0];
        let same = compare_paired(&a, &a, Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!((same.verdict, same.difference.half_width), (Verdict::NotDistinguished, Some(0.0)));
        let faster = compare_paired(&a, &[2.0, 4.0, 3.0], Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!((faster.verdict, faster.difference.mean), (Verdict::Better, -1.0));
    }

    #[test]
    fn one_pair_cannot_distinguish() {
        let comparison = compare_paired(&[1.0], &[100.0], Direction::LowerIsBetter, DEFAULT_LEVEL).unwrap();
        assert_eq!((comparison.verdict, comparison.difference.half_width), (Verdict::NotDistinguished, None));
    }

    #[test]
    fn unpairable_inputs_are_refused() {
        assert_eq!(
            compare_paired(&[1.0, 2.0], &[1.0], Direction::LowerIsBetter, DEFAULT_LEVEL),
            Err(CompareError::LengthMismatch { a: 2, b: 1 })
        );
        assert_eq!(
            compare_paired(&[], &[], Direction::HigherIsBetter, DEFAULT_LEVEL),
            Err(CompareError::Interval(IntervalError::Empty))
        );
        assert_eq!(
            compare_paired(&[1.0, 2.0], &[1.0, f64::INFINITY], Direction::HigherIsBetter, DEFAULT_LEVEL),
            Err(CompareError::Interval(IntervalError::NonFinite { index: 1 }))
        );
    }
}

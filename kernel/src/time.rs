//! Simulated time: integer microseconds, one rounding rule, super-dense instants.
//!
//! `SimTime` counts microseconds from the start of a run. A duration that comes out of a
//! computation in floating point (a priced engine step, a sampled service time) becomes a
//! `SimDuration` through exactly one rule, [`SimDuration::from_micros_ceil`]: round **up** to the
//! next whole microsecond, so no positive duration becomes zero and no event can happen before
//! the work that causes it has taken some time.
//!
//! An [`Instant`] is super-dense: `(time, round)`. Several rounds can happen at one simulated
//! time; a message sent with zero delay in round `r` is delivered in round `r + 1` of the same
//! time (see the coordinator).

use std::fmt;

/// A point in simulated time, in whole microseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

/// A length of simulated time, in whole microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(u64);

/// A floating-point duration that cannot become a `SimDuration`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeError {
    /// The value was NaN.
    NotANumber,
    /// The value was negative (a duration cannot run backwards).
    Negative(f64),
    /// The value was infinite or beyond `u64::MAX` microseconds.
    TooLarge(f64),
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeError::NotANumber => write!(f, "duration is not a number"),
            TimeError::Negative(v) => write!(f, "duration {v} µs is negative"),
            TimeError::TooLarge(v) => write!(f, "duration {v} µs is too large"),
        }
    }
}

impl std::error::Error for TimeError {}

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time; used as "never" by callers that need a sentinel.
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// The time `micros` microseconds after the start.
    pub const fn from_micros(micros: u64) -> SimTime {
        SimTime(micros)
    }

    /// Microseconds since the start.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Seconds since the start, for display and statistics only.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// This time plus `d`, or `None` if it would overflow.
    pub const fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        match self.0.checked_add(d.0) {
            Some(t) => Some(SimTime(t)),
            None => None,
        }
    }

    /// This time plus `d`, saturating at [`SimTime::MAX`].
    pub const fn saturating_add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }

    /// The first multiple of `period` (positive) after this time, saturating at
    /// [`SimTime::MAX`]: a grid's next line.
    pub const fn next_multiple_of(self, period: SimDuration) -> SimTime {
        SimTime((self.0 / period.0).saturating_add(1).saturating_mul(period.0))
    }

    /// The duration from `earlier` to this time, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// No time at all.
    pub const ZERO: SimDuration = SimDuration(0);

    /// A duration of `micros` microseconds.
    pub const fn from_micros(micros: u64) -> SimDuration {
        SimDuration(micros)
    }

    /// A duration of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> SimDuration {
        SimDuration(millis * 1_000)
    }

    /// A duration of `secs` seconds.
    pub const fn from_secs(secs: u64) -> SimDuration {
        SimDuration(secs * 1_000_000)
    }

    /// The one rounding rule: a floating-point number of microseconds, rounded **up** to the
    /// next whole microsecond. Zero stays zero; any positive value becomes at least 1 µs.
    pub fn from_micros_ceil(micros: f64) -> Result<SimDuration, TimeError> {
        if micros.is_nan() {
            return Err(TimeError::NotANumber);
        }
        if micros < 0.0 {
            return Err(TimeError::Negative(micros));
        }
        // 2^64 as f64; anything at or above it does not fit. Below it, a value that is not a
        // whole number is below 2^53, so its truncation is exact as f64 and the ceiling is one
        // more; a whole one truncates to itself. That is `f64::ceil`, which is a library call
        // on the baseline x86-64 target, and every priced step rounds two times.
        if micros >= 18_446_744_073_709_551_616.0 {
            return Err(TimeError::TooLarge(micros));
        }
        let truncated = micros as u64;
        Ok(SimDuration(if (truncated as f64) < micros { truncated + 1 } else { truncated }))
    }

    /// [`SimDuration::from_micros_ceil`] for a value in seconds.
    pub fn from_secs_ceil(secs: f64) -> Result<SimDuration, TimeError> {
        SimDuration::from_micros_ceil(secs * 1e6)
    }

    /// Whole microseconds.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Seconds, for display and statistics only.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Whether this is the zero duration.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl fmt::Display for SimDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.0)
    }
}

/// A super-dense instant: a simulated time and the round within it.
///
/// Ordered lexicographically: every round of time `t` comes before time `t + 1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    /// The simulated time.
    pub time: SimTime,
    /// The round within that time, from 0.
    pub round: u32,
}

impl Instant {
    /// Round 0 of `time`.
    pub const fn at(time: SimTime) -> Instant {
        Instant { time, round: 0 }
    }

    /// The instant at which something scheduled `delay` after this instant happens: the next
    /// round of the same time for a zero delay, round 0 of a later time otherwise. `None` if
    /// the time would overflow.
    pub fn after(self, delay: SimDuration) -> Option<Instant> {
        if delay.is_zero() {
            self.round.checked_add(1).map(|round| Instant { time: self.time, round })
        } else {
            self.time.checked_add(delay).map(Instant::at)
        }
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.time, self.round)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_up_and_never_loses_a_positive_duration() {
        assert_eq!(SimDuration::from_micros_ceil(0.0).unwrap(), SimDuration::ZERO);
        assert_eq!(SimDuration::from_micros_ceil(1e-9).unwrap().as_micros(), 1);
        assert_eq!(SimDuration::from_micros_ceil(4480.0).unwrap().as_micros(), 4480);
        assert_eq!(SimDuration::from_micros_ceil(4480.2).unwrap().as_micros(), 4481);
        assert_eq!(SimDuration::from_secs_ceil(0.5).unwrap().as_micros(), 500_000);
    }

    proptest::proptest! {
        #[test]
        fn rounding_up_is_the_ceiling_of_any_duration_the_clock_holds(bits in 0u64..0x43F0_0000_0000_0000) {
            // Every non-negative f64 below 2^64, by its bits: tiny, fractional, past 2^53.
            let micros = f64::from_bits(bits);
            let expected = micros.ceil();
            proptest::prop_assert_eq!(SimDuration::from_micros_ceil(micros).unwrap().as_micros(), expected as u64);
            proptest::prop_assert_eq!(SimDuration::from_micros_ceil(expected).unwrap().as_micros(), expected as u64);
        }
    }

    #[test]
    fn rounding_at_the_edges_is_the_ceiling() {
        for micros in
            [-0.0, f64::MIN_POSITIVE, 0.5, 1.0, 2f64.powi(52) + 0.5, 2f64.powi(53), 2f64.powi(64) - 2048.0]
        {
            assert_eq!(
                SimDuration::from_micros_ceil(micros).unwrap().as_micros(),
                micros.ceil() as u64,
                "{micros}"
            );
        }
        assert!(matches!(SimDuration::from_micros_ceil(2f64.powi(64)), Err(TimeError::TooLarge(_))));
    }

    #[test]
    fn rounding_refuses_what_is_not_a_duration() {
        assert_eq!(SimDuration::from_micros_ceil(f64::NAN), Err(TimeError::NotANumber));
        assert_eq!(SimDuration::from_micros_ceil(-1.0), Err(TimeError::Negative(-1.0)));
        assert!(matches!(SimDuration::from_micros_ceil(f64::INFINITY), Err(TimeError::TooLarge(_))));
        assert!(matches!(SimDuration::from_micros_ceil(2e19), Err(TimeError::TooLarge(_))));
    }

    #[test]
    fn zero_delay_advances_the_round_and_positive_delay_the_time() {
        let i = Instant { time: SimTime::from_micros(10), round: 3 };
        assert_eq!(i.after(SimDuration::ZERO), Some(Instant { time: i.time, round: 4 }));
        assert_eq!(i.after(SimDuration::from_micros(5)), Some(Instant::at(SimTime::from_micros(15))));
        assert_eq!(Instant::at(SimTime::MAX).after(SimDuration::from_micros(1)), None);
    }

    #[test]
    fn the_next_multiple_is_strictly_later_and_saturates() {
        let period = SimDuration::from_micros(100);
        assert_eq!(SimTime::from_micros(0).next_multiple_of(period), SimTime::from_micros(100));
        assert_eq!(SimTime::from_micros(99).next_multiple_of(period), SimTime::from_micros(100));
        assert_eq!(SimTime::from_micros(100).next_multiple_of(period), SimTime::from_micros(200));
        assert_eq!(SimTime::MAX.next_multiple_of(period), SimTime::MAX);
    }

    #[test]
    fn instants_order_rounds_within_a_time() {
        let a = Instant { time: SimTime::from_micros(1), round: 7 };
        let b = Instant::at(SimTime::from_micros(2));
        assert!(a < b);
        assert!(Instant::at(SimTime::from_micros(1)) < a);
    }

    #[test]
    fn display_is_seconds_with_microseconds() {
        assert_eq!(SimTime::from_micros(1_234_567).to_string(), "1.234567s");
    }
}

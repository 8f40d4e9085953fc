//! What every engine host shares, whatever engine it adapts: the API server a request passes
//! before the engine sees it, the meter of the KV cache's usage over time, and the one rounding
//! rule of priced times.

use std::collections::BTreeMap;
use std::fmt;

use blis_contracts::StepPrice;
use blis_kernel::{SimDuration, SimTime, TimeAdvance};

use crate::message::CallRequest;

/// A priced time in whole microseconds, rounded up (the one rounding rule); a negative one is
/// zero. A price that is not a number, or that no simulated clock holds, is an error that stops
/// the run rather than count as zero or wrap: each of the cost model's inputs is bounded, though
/// their product at the bounds' extremes can still exceed the clock.
pub(crate) fn ceil_micros(micros: f64) -> Result<SimDuration, Unpriceable> {
    let clamped = if micros < 0.0 { 0.0 } else { micros };
    SimDuration::from_micros_ceil(clamped).map_err(|_| Unpriceable(micros))
}

/// A step's host (CPU) and device times by the one rounding rule.
pub(crate) fn step_times(price: &StepPrice) -> Result<(SimDuration, SimDuration), Unpriceable> {
    Ok((ceil_micros(price.host_micros)?, ceil_micros(price.micros - price.host_micros)?))
}

/// A time the cost model priced beyond what the simulated clock holds, or not as a number, µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Unpriceable(pub(crate) f64);

impl fmt::Display for Unpriceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a time priced at {:e} µs is beyond the simulated clock (2^64 µs, about 584,000 years): the \
             model, the chip's facts and the coefficients, each within its bounds, multiply past it",
            self.0
        )
    }
}

/// The API server (HTTP, tokenization): requests in it by the time they leave, in the order
/// they entered.
#[derive(Default)]
pub(crate) struct ApiServer {
    queue: BTreeMap<(SimTime, u64), Box<CallRequest>>,
    sequence: u64,
}

impl ApiServer {
    /// `call` is in the server until `ready`.
    pub(crate) fn enter(&mut self, call: Box<CallRequest>, ready: SimTime) {
        self.queue.insert((ready, self.sequence), call);
        self.sequence += 1;
    }

    /// When the next request leaves.
    pub(crate) fn next_exit(&self) -> Option<SimTime> {
        self.queue.keys().next().map(|&(at, _)| at)
    }

    /// The next request leaving by `now`, if any.
    pub(crate) fn leave(&mut self, now: SimTime) -> Option<Box<CallRequest>> {
        let entry = self.queue.first_entry()?;
        (entry.key().0 <= now).then(|| entry.remove())
    }

    /// Drop the request `key` if it is still inside; whether it was.
    pub(crate) fn cancel(&mut self, key: u64) -> bool {
        let Some(at) = self.queue.iter().find(|(_, c)| c.request.key == key).map(|(k, _)| *k) else {
            return false;
        };
        self.queue.remove(&at);
        true
    }
}

/// ∫ KV usage dt from the start, and the highest usage seen, sampled at every transition.
#[derive(Default)]
pub(crate) struct UsageMeter {
    integral: f64,
    peak: f64,
    last: SimTime,
}

impl UsageMeter {
    /// The usage held since the last observation was `usage`; the clock is now `now`.
    pub(crate) fn observe(&mut self, usage: f64, now: SimTime) {
        self.integral += usage * (now.as_micros() - self.last.as_micros()) as f64;
        self.peak = self.peak.max(usage);
        self.last = now;
    }

    /// Time average from the start to `end` with `usage` held since the last observation, and
    /// the peak.
    pub(crate) fn mean_and_peak(&self, usage: f64, end: SimTime) -> (f64, f64) {
        let integral = self.integral + usage * (end.as_micros() - self.last.as_micros()) as f64;
        let mean = if end.as_micros() == 0 { 0.0 } else { integral / end.as_micros() as f64 };
        (mean, self.peak.max(usage))
    }
}

/// When a host next acts: at the engine loop's time or the API server's next exit, whichever
/// comes first, if either is pending.
pub(crate) fn next_act(engine: Option<SimTime>, frontend: Option<SimTime>) -> Option<SimTime> {
    match (engine, frontend) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (at, None) | (None, at) => at,
    }
}

/// The time advance to [`next_act`], measured from the host's last transition at `last`.
pub(crate) fn next_event(last: SimTime, engine: Option<SimTime>, frontend: Option<SimTime>) -> TimeAdvance {
    next_act(engine, frontend).map_or(TimeAdvance::Passive, |at| TimeAdvance::until(last, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priced_times_round_up_and_a_time_no_clock_holds_is_an_error() {
        let micros = |m: f64| ceil_micros(m).map(SimDuration::as_micros);
        assert_eq!(micros(0.0), Ok(0));
        assert_eq!(micros(-3.0), Ok(0), "a negative price is zero");
        assert_eq!(micros(1.2), Ok(2));
        assert_eq!(micros(1e19), Ok(10_000_000_000_000_000_000));
        for beyond in [2e19, f64::INFINITY, f64::NAN] {
            let error = ceil_micros(beyond).expect_err("no clock holds it");
            assert!(error.to_string().contains("beyond the simulated clock"), "{error}");
        }
        assert!(ceil_micros(4.7e21).unwrap_err().to_string().starts_with("a time priced at 4.7e21 µs"));
    }
}

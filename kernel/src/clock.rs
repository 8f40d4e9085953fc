//! The simulated time of the round being run, for logs.
//!
//! The coordinator publishes the instant of each round here, on its own thread, so a log line
//! written inside an actor can carry the simulated time (a `tracing` timer reads it). Nothing
//! that decides anything reads it.

use std::cell::Cell;

use crate::time::{Instant, SimTime};

thread_local! {
    /// The round's time in µs and its round number plus one (zero: no simulation running), as
    /// two plain words: a round publishes them with two stores and no reload.
    static NOW: (Cell<u64>, Cell<u32>) = const { (Cell::new(0), Cell::new(0)) };
}

/// The instant of the round running on this thread, if a simulation is running here.
pub fn simulated_now() -> Option<Instant> {
    NOW.with(|(time, round)| {
        let round = round.get().checked_sub(1)?;
        Some(Instant { time: SimTime::from_micros(time.get()), round })
    })
}

#[inline]
pub(crate) fn publish(now: Option<Instant>) {
    NOW.with(|(time, round)| match now {
        Some(now) => {
            time.set(now.time.as_micros());
            round.set(now.round.saturating_add(1));
        }
        None => round.set(0),
    });
}

//! The simulated time of the round being run, for logs.
//!
//! The coordinator publishes the instant of each round here, on its own thread, so a log line
//! written inside an actor can carry the simulated time (a `tracing` timer reads it). Nothing
//! that decides anything reads it.

use std::cell::Cell;

use crate::time::Instant;

thread_local! {
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The instant of the round running on this thread, if a simulation is running here.
pub fn simulated_now() -> Option<Instant> {
    NOW.with(Cell::get)
}

pub(crate) fn publish(now: Option<Instant>) {
    NOW.with(|cell| cell.set(now));
}

//! Timelines: a Perfetto-loadable trace of a run, in simulated time.
//!
//! [`TimelineWriter`] is an observer that streams Chrome trace-event JSON (the format
//! `ui.perfetto.dev` opens) as the run goes: `ts` and `dur` are microseconds of **simulated**
//! time. It draws what actors note about their transitions (spans, decisions, phases of
//! long-lived items, counters; see [`crate::Notes`]) and, on its own, one flow arrow per
//! delivered message, from a zero-length slice on the sender's `messages` lane at the send to one
//! on the receiver's at the delivery. Memory stays bounded: only track tables, open phases and
//! the last value of each counter are kept. [`check`] validates a trace file against what
//! Perfetto needs.

mod check;
mod writer;

pub use check::{Violation, check};
pub use writer::{TimelineFilter, TimelineWriter};

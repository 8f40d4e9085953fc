//! Observers: watching a run without the actors knowing.
//!
//! The coordinator feeds every delivered message and every transition to the observers attached
//! to it, in a deterministic order (rounds in time order; within a round, deliveries in bag
//! order, then transitions, both by the actors' name ranks). Timeline writers and message logs
//! are observers. An actor contributes only through [`crate::Actor::describe`], which the
//! coordinator calls after a transition when an observer asks for descriptions. With no
//! observer attached none of this runs.

use std::any::Any;

use crate::actor::ActorId;
use crate::message::Envelope;
use crate::notes::Notes;
use crate::time::{Instant, SimDuration};

/// Which transition an actor made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransitionKind {
    /// Its time advance expired, no messages (DEVS `δint`).
    Internal,
    /// Messages arrived before its time advance expired (DEVS `δext`).
    External,
    /// Both at once (DEVS `δconf`).
    Confluent,
}

/// One transition as an observer sees it.
#[derive(Debug)]
pub struct TransitionRecord<'a> {
    /// When it happened.
    pub now: Instant,
    /// The actor.
    pub actor: ActorId,
    /// The actor's stable name.
    pub name: &'a str,
    /// Internal, external or confluent.
    pub kind: TransitionKind,
    /// Time since the actor's previous transition.
    pub elapsed: SimDuration,
    /// How many messages were in its bag.
    pub bag_len: usize,
    /// How many messages it emitted (output and transition together).
    pub emitted: usize,
    /// Its next internal event, if any.
    pub next_internal: Option<Instant>,
    /// What the actor said about itself, when the observer asked.
    pub description: Option<&'a Description>,
    /// What the actor noted about this transition, when the observer asked.
    pub notes: Option<&'a Notes>,
}

/// A value in an actor's description.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An unsigned integer.
    U64(u64),
    /// A signed integer.
    I64(i64),
    /// A real number.
    F64(f64),
    /// Text.
    Text(String),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::U64(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::U64(v as u64)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::I64(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::F64(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

/// Named values an actor reports about its state, in the order it reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Description {
    entries: Vec<(&'static str, Value)>,
}

impl Description {
    /// Add one named value.
    pub fn arg(&mut self, key: &'static str, value: impl Into<Value>) {
        self.entries.push((key, value.into()));
    }

    /// The values, in the order they were added.
    pub fn entries(&self) -> &[(&'static str, Value)] {
        &self.entries
    }

    /// Forget all values, keeping the allocation.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Something that watches a run: a timeline writer, a message log, a test probe.
pub trait Observer<M>: Any {
    /// Whether this observer wants each transition's [`Description`] and [`Notes`].
    fn wants_descriptions(&self) -> bool {
        false
    }

    /// Whether this observer wants every actor's [`crate::Actor::check`] run after each of its
    /// transitions (a checked run); what they find arrives in [`Observer::on_violation`].
    fn wants_checks(&self) -> bool {
        false
    }

    /// Whether this observer can do without the deliveries to and transitions of detached
    /// actors, which it then does not see, so that they may run in lanes (see [`crate::LaneSpec`])
    /// or run ahead ([`crate::Outbox::run_ahead_to`]; a run ahead shows as one transition, at
    /// its last instant).
    fn blind_to_detached(&self) -> bool {
        false
    }

    /// An actor's own check found a broken invariant after its transition at `now`.
    fn on_violation(&mut self, _now: Instant, _actor: &str, _violation: &str) {}

    /// The run starts; `actors` holds every actor's name, indexed by [`ActorId`].
    fn on_start(&mut self, _actors: &[&str]) {}

    /// A message was delivered (called before the receiver's transition).
    fn on_delivery(&mut self, _envelope: &Envelope<M>) {}

    /// An actor made a transition.
    fn on_transition(&mut self, _record: &TransitionRecord<'_>) {}

    /// Asked after every round: a reason to stop the run now, if the observer wants it stopped
    /// (a replay that diverged, say).
    fn halt(&self) -> Option<String> {
        None
    }
}

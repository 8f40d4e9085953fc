//! Notes: what an actor tells a timeline about one transition.
//!
//! A transition may note spans of work (an engine step), decisions (a routing choice), phases of
//! long-lived items that cross actors (a request: queued, prefill, decode) and counters (queue
//! lengths, cache usage). Notes exist only while an observer asks for them:
//! [`Outbox::notes`](crate::Outbox::notes) returns `None` otherwise, so an actor that checks it
//! pays nothing when no timeline is being written.

use std::borrow::Cow;

use crate::observer::Value;
use crate::time::SimTime;

/// One thing noted.
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    /// A span of work on one of the actor's lanes.
    Span {
        /// The lane (track) within the actor, e.g. `"steps"`.
        lane: &'static str,
        /// What the span is.
        name: Cow<'static, str>,
        /// When it starts.
        start: SimTime,
        /// When it ends (not before `start`).
        end: SimTime,
        /// Details.
        args: Vec<(&'static str, Value)>,
    },
    /// A decision made now, on one of the actor's lanes.
    Decision {
        /// The lane.
        lane: &'static str,
        /// What was decided.
        name: Cow<'static, str>,
        /// Details (e.g. each candidate's score).
        args: Vec<(&'static str, Value)>,
    },
    /// A phase of a long-lived item begins now; phases of one item nest.
    PhaseBegin {
        /// The kind of item, e.g. `"request"`.
        category: &'static str,
        /// The item's id within its category.
        id: u64,
        /// The phase, e.g. `"queued"`.
        name: Cow<'static, str>,
        /// Details.
        args: Vec<(&'static str, Value)>,
    },
    /// The innermost open phase of an item ends now.
    PhaseEnd {
        /// The kind of item.
        category: &'static str,
        /// The item's id.
        id: u64,
    },
    /// A counter's value from now on.
    Counter {
        /// The counter group, e.g. `"engine"`.
        group: &'static str,
        /// The counter, e.g. `"waiting"`.
        name: &'static str,
        /// Its value.
        value: f64,
    },
}

/// The marks of one transition, in the order the actor noted them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Notes {
    marks: Vec<Mark>,
}

/// Adds details to the mark just noted.
pub struct Args<'a> {
    args: &'a mut Vec<(&'static str, Value)>,
}

impl Args<'_> {
    /// Add one detail.
    pub fn arg(self, key: &'static str, value: impl Into<Value>) -> Self {
        self.args.push((key, value.into()));
        self
    }
}

impl Notes {
    /// Note a span of work on `lane`.
    pub fn span(
        &mut self,
        lane: &'static str,
        name: impl Into<Cow<'static, str>>,
        start: SimTime,
        end: SimTime,
    ) -> Args<'_> {
        self.push_with_args(Mark::Span { lane, name: name.into(), start, end, args: Vec::new() })
    }

    /// Note a decision made now on `lane`.
    pub fn decision(&mut self, lane: &'static str, name: impl Into<Cow<'static, str>>) -> Args<'_> {
        self.push_with_args(Mark::Decision { lane, name: name.into(), args: Vec::new() })
    }

    /// Begin a phase of item `id` of `category`.
    pub fn phase_begin(
        &mut self,
        category: &'static str,
        id: u64,
        name: impl Into<Cow<'static, str>>,
    ) -> Args<'_> {
        self.push_with_args(Mark::PhaseBegin { category, id, name: name.into(), args: Vec::new() })
    }

    /// End the innermost open phase of item `id` of `category`.
    pub fn phase_end(&mut self, category: &'static str, id: u64) {
        self.marks.push(Mark::PhaseEnd { category, id });
    }

    /// Set a counter.
    pub fn counter(&mut self, group: &'static str, name: &'static str, value: f64) {
        self.marks.push(Mark::Counter { group, name, value });
    }

    /// The marks, in order.
    pub fn marks(&self) -> &[Mark] {
        &self.marks
    }

    /// Forget all marks, keeping the allocation.
    pub fn clear(&mut self) {
        self.marks.clear();
    }

    fn push_with_args(&mut self, mark: Mark) -> Args<'_> {
        self.marks.push(mark);
        let args = match self.marks.last_mut() {
            Some(Mark::Span { args, .. } | Mark::Decision { args, .. } | Mark::PhaseBegin { args, .. }) => {
                args
            }
            _ => unreachable!("the mark just pushed carries arguments"),
        };
        Args { args }
    }
}

//! The `Actor` trait: a synchronous DEVS atomic model.
//!
//! An actor owns its state and talks to the rest of the simulation only through messages. The
//! coordinator calls it in rounds (see [`crate::coordinator`]):
//!
//! - [`Actor::time_advance`] says how long until its next internal event (DEVS `ta`),
//!   measured from its last transition;
//! - [`Actor::output`] runs when that time advance expires, before the transition, and may
//!   emit messages computed from the state as it stands (DEVS `λ`);
//! - [`Actor::transition`] runs exactly once per round in which the actor is *affected*
//!   (imminent, or with a non-empty bag): internal, external with the elapsed time, or
//!   confluent. It may emit messages too.
//!
//! Every message emitted in round `r` of time `t` with zero delay is delivered in round `r + 1`
//! of `t`; with a positive delay `d`, in round 0 of `t + d`. Because nothing emitted in a round
//! is delivered in that same round, every actor's work in a round is independent of every other
//! actor's, which is what lets the parity host run each actor as its own task with one handshake
//! per round.

use std::any::Any;

use crate::message::{Envelope, Message};
use crate::notes::Notes;
use crate::observer::Description;
use crate::time::{Instant, SimDuration, SimTime};

/// An actor's address, fixed at assembly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct ActorId(pub u32);

impl ActorId {
    /// The index of this actor in assembly order.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// How long until an actor's next internal event, measured from its last transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeAdvance {
    /// No internal event is pending; only a message can wake the actor.
    Passive,
    /// An internal event after this duration. Zero makes a transient state: the actor is
    /// imminent again in the next round of the same time.
    After(SimDuration),
}

impl TimeAdvance {
    /// The time advance that makes the next internal event fall at `deadline`, seen from `now`
    /// (zero if the deadline has passed).
    pub fn until(now: SimTime, deadline: SimTime) -> TimeAdvance {
        TimeAdvance::After(deadline.saturating_since(now))
    }
}

/// What the coordinator tells an actor about the current call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// The current super-dense instant.
    pub now: Instant,
    /// Simulated time since this actor's previous transition (DEVS `e`).
    pub elapsed: SimDuration,
}

/// Which transition the actor makes this round.
pub enum Event<'a, M> {
    /// Its time advance expired and nothing arrived (DEVS `δint`).
    Internal,
    /// Messages arrived before its time advance expired (DEVS `δext`); `Context::elapsed` says
    /// how long since its last transition.
    External(Bag<'a, M>),
    /// Its time advance expired and messages arrived at the same instant (DEVS `δconf`). Each
    /// actor decides what that means for it, e.g. whether a request that arrives exactly when
    /// a step ends joins the next step.
    Confluent(Bag<'a, M>),
}

/// The messages delivered to one actor at one instant, in [`crate::OrderKey`] order.
pub struct Bag<'a, M> {
    pub(crate) messages: std::vec::Drain<'a, Envelope<M>>,
}

impl<M> Bag<'_, M> {
    /// How many messages are left in the bag.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the bag is empty.
    pub fn is_empty(&self) -> bool {
        self.messages.len() == 0
    }
}

impl<M> Iterator for Bag<'_, M> {
    type Item = Envelope<M>;

    fn next(&mut self) -> Option<Envelope<M>> {
        self.messages.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.messages.size_hint()
    }
}

/// A message an actor has emitted, before the coordinator stamps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing<M> {
    /// The receiver.
    pub to: ActorId,
    /// Delay from now until delivery.
    pub delay: SimDuration,
    /// The message.
    pub payload: M,
}

/// Where an actor puts the messages it emits during one call.
#[derive(Debug)]
pub struct Outbox<M> {
    pub(crate) messages: Vec<Outgoing<M>>,
    pub(crate) halt: Option<String>,
    pub(crate) notes: Option<Notes>,
    /// How far this transition may run ahead, when the coordinator offers it.
    pub(crate) offer: Option<RunAhead>,
}

/// The coordinator's offer to a lone transition: the actor may go on through its own internal
/// events before `until` (no other actor's event and no message falls before it), at most
/// `rounds` of them, each after `last`; each taken counts as the round it would have been.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunAhead {
    pub(crate) until: SimTime,
    pub(crate) rounds: u64,
    pub(crate) last: SimTime,
    pub(crate) taken: u64,
}

impl<M> Default for Outbox<M> {
    fn default() -> Self {
        Outbox { messages: Vec::new(), halt: None, notes: None, offer: None }
    }
}

impl<M: Message> Outbox<M> {
    /// Send `payload` to `to`, delivered `delay` from now (zero: the next round).
    pub fn send(&mut self, to: ActorId, delay: SimDuration, payload: M) {
        self.messages.push(Outgoing { to, delay, payload });
    }

    /// Ask the coordinator to stop the run after this round, with a reason it reports.
    pub fn halt(&mut self, reason: impl Into<String>) {
        self.halt.get_or_insert_with(|| reason.into());
    }

    /// The messages emitted so far in this call.
    pub fn messages(&self) -> &[Outgoing<M>] {
        &self.messages
    }

    /// Whether the coordinator offers this transition a run ahead at all (see
    /// [`Outbox::run_ahead_to`]), before the actor works out its next event.
    #[inline]
    pub fn run_ahead_offered(&self) -> bool {
        self.offer.is_some()
    }

    /// Whether this transition may go on to the actor's own next internal event at `at` now:
    /// only when the coordinator offered it (a round with this actor alone, no observer that
    /// must see every transition), `at` is later than the last, nothing else happens before
    /// it, and nothing was emitted or halted so far. If so, the actor makes that internal
    /// transition at once, with `at` as its time, exactly as its own round would run it; the
    /// coordinator counts that round and moves the clock there. An actor that never asks
    /// runs one round at a time.
    #[inline]
    pub fn run_ahead_to(&mut self, at: SimTime) -> bool {
        let Some(offer) = self.offer.as_mut() else { return false };
        if offer.taken == offer.rounds
            || at <= offer.last
            || at >= offer.until
            || !self.messages.is_empty()
            || self.halt.is_some()
        {
            return false;
        }
        offer.taken += 1;
        offer.last = at;
        crate::clock::publish(Some(Instant::at(at)));
        true
    }

    /// Where to note what this transition did for a timeline; `None` when no observer asks,
    /// so building notes costs nothing then.
    pub fn notes(&mut self) -> Option<&mut Notes> {
        self.notes.as_mut()
    }
}

/// A synchronous DEVS atomic model; see the module documentation for when each method runs.
///
/// An actor holds no handle to any other actor, no clock and no unnamed random source. It is
/// `'static` so a finished run can hand it back (as `Box<dyn Any>`) for its results.
pub trait Actor<M: Message>: Any {
    /// Time until the next internal event, measured from the last transition.
    fn time_advance(&self) -> TimeAdvance;

    /// Output at the expiry of the time advance, from the state before the transition.
    fn output(&self, _ctx: &Context, _out: &mut Outbox<M>) {}

    /// The one transition of this round.
    fn transition(&mut self, ctx: &Context, event: Event<'_, M>, out: &mut Outbox<M>);

    /// Describe the current state for observers (timelines); called only when one asks.
    fn describe(&self, _description: &mut Description) {}

    /// Check the actor's own invariants after its transition, appending one line per broken
    /// rule; called only in checked runs (an observer's [`Observer::wants_checks`]).
    ///
    /// [`Observer::wants_checks`]: crate::Observer::wants_checks
    fn check(&self, _violations: &mut Vec<String>) {}
}

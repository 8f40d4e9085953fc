//! Hosts: where actors live and how the coordinator reaches them.
//!
//! Both hosts run the same per-actor round ([`perform`]); they differ only in how the call
//! reaches the actor. The coordinator hands a host the round's [`Work`] items, one per affected
//! actor in name order, and gets them back with each actor's emitted messages and new time
//! advance.
//!
//! - [`HostKind::Inline`]: direct calls on actors held in a vector. The default and the fast
//!   path.
//! - [`HostKind::Tasks`]: each actor is a tokio task on a paused current-thread runtime, reached
//!   by one handshake per round. It exists to prove that actors share no hidden state: a run
//!   gives byte-identical results on both hosts.

mod inline;
mod tasks;

pub(crate) use inline::InlineHost;
pub(crate) use tasks::TaskHost;

use crate::actor::{Actor, ActorId, Bag, Context, Event, Outbox, TimeAdvance};
use crate::message::{Envelope, Message};
use crate::observer::Description;

/// Which host runs the actors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostKind {
    /// Direct calls (default, fastest).
    #[default]
    Inline,
    /// One tokio task per actor on a paused current-thread runtime (parity proof).
    Tasks,
}

/// One actor's share of a round. Each actor has one, kept between rounds so its buffers are
/// reused.
pub(crate) struct Work<M> {
    pub(crate) actor: ActorId,
    pub(crate) ctx: Context,
    pub(crate) imminent: bool,
    pub(crate) bag_len: usize,
    pub(crate) bag: Vec<Envelope<M>>,
    pub(crate) outbox: Outbox<M>,
    pub(crate) next: TimeAdvance,
    pub(crate) description: Option<Description>,
    /// Whether to run the actor's [`Actor::check`] after its transition (checked runs only).
    pub(crate) check: bool,
    /// What the check found, until the coordinator reports it.
    pub(crate) violations: Vec<String>,
}

impl<M> Work<M> {
    pub(crate) fn new(actor: ActorId) -> Work<M> {
        Work {
            actor,
            ctx: Context { now: crate::Instant::default(), elapsed: crate::SimDuration::ZERO },
            imminent: false,
            bag_len: 0,
            bag: Vec::new(),
            outbox: Outbox::default(),
            next: TimeAdvance::Passive,
            description: None,
            check: false,
            violations: Vec::new(),
        }
    }
}

/// The per-actor round: output if imminent, then the one transition, then the new time
/// advance and, when asked, a description.
pub(crate) fn perform<M: Message>(actor: &mut dyn Actor<M>, work: &mut Work<M>) {
    let ctx = work.ctx;
    if work.imminent {
        actor.output(&ctx, &mut work.outbox);
    }
    let event = match (work.imminent, work.bag.is_empty()) {
        (true, true) => Event::Internal,
        (false, _) => Event::External(Bag { messages: work.bag.drain(..) }),
        (true, false) => Event::Confluent(Bag { messages: work.bag.drain(..) }),
    };
    actor.transition(&ctx, event, &mut work.outbox);
    work.next = actor.time_advance();
    if let Some(description) = work.description.as_mut() {
        description.clear();
        actor.describe(description);
    }
    if work.check {
        actor.check(&mut work.violations);
    }
}

/// The host of a built simulation.
pub(crate) enum Host<M: Message> {
    Inline(InlineHost<M>),
    Tasks(TaskHost<M>),
}

impl<M: Message> Host<M> {
    pub(crate) fn new(kind: HostKind, actors: Vec<Box<dyn Actor<M>>>) -> Host<M> {
        match kind {
            HostKind::Inline => Host::Inline(InlineHost::new(actors)),
            HostKind::Tasks => Host::Tasks(TaskHost::new(actors)),
        }
    }

    /// Run the round of each actor in `affected` (in that order) on its `works` entry.
    pub(crate) fn run_round(&mut self, affected: &[ActorId], works: &mut [Work<M>]) {
        match self {
            Host::Inline(host) => host.run_round(affected, works),
            Host::Tasks(host) => host.run_round(affected, works),
        }
    }

    pub(crate) fn into_actors(self) -> Vec<Box<dyn Actor<M>>> {
        match self {
            Host::Inline(host) => host.into_actors(),
            Host::Tasks(host) => host.into_actors(),
        }
    }
}

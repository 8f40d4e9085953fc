//! The coordinator: owns simulated time and runs the DEVS rounds.
//!
//! At the earliest pending super-dense instant `(t, r)` one round runs:
//!
//! 1. **Output.** Each *imminent* actor (its time advance expires at `(t, r)`) runs
//!    [`Actor::output`](crate::Actor::output).
//! 2. **Delivery.** The messages due at `(t, r)` are gathered into per-receiver bags, each
//!    sorted by [`OrderKey`] `(time, class, sender, send_count)`.
//! 3. **Transition.** Each actor that is imminent or has a bag makes exactly one transition —
//!    internal, external (with the elapsed time) or confluent — and reports its new time
//!    advance.
//!
//! Steps 1–3 happen inside one call per affected actor (the hosts' `perform`), because nothing
//! emitted in a round is delivered in that round: a message emitted with zero delay in round `r`
//! arrives in round `r + 1` of the same time, one with delay `d > 0` in round 0 of `t + d`. A
//! time advance of zero (a transient state) makes the actor imminent in round `r + 1`. Rounds
//! at one time are bounded; exceeding the bound fails with the names of the actors involved.
//! Affected actors are processed, and observers told, in the order of their name ranks.
//!
//! A detached actor alone in its round (no message, no other actor imminent) may *run ahead*:
//! make the internal transitions of its next rounds at once, while no other event is pending
//! before them ([`Outbox::run_ahead_to`]). Each is counted as the round it would have been, a
//! slice of rounds still ends at the same round, and nothing is run past a horizon; an
//! observer that must see every transition turns it off. An engine's steps between two
//! arrivals run this way.

use std::any::Any;

use crate::actor::{Actor, ActorId, Context, Outbox, RunAhead, TimeAdvance};
use crate::agenda::{Agenda, BagKey, MessageQueue, Pending};
use crate::error::KernelError;
use crate::host::{Host, HostKind, Work};
use crate::lanes::Lanes;
use crate::message::{Envelope, Message, OrderKey, SenderOrder};
use crate::observer::{Description, Observer, TransitionKind, TransitionRecord};
use crate::time::{Instant, SimDuration, SimTime};

/// The earlier of two optional instants.
#[inline]
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Nothing is pending: every actor is passive and no message is in flight.
    Quiescent {
        /// The time of the last round.
        at: SimTime,
    },
    /// The next event lies beyond the horizon; it and everything after it did not happen.
    Horizon {
        /// The horizon.
        at: SimTime,
    },
    /// An actor asked to stop.
    Halted {
        /// When.
        at: SimTime,
        /// Which actor.
        actor: String,
        /// Its reason.
        reason: String,
    },
}

/// Counts of what a run did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Rounds run.
    pub rounds: u64,
    /// Transitions made (one per affected actor per round).
    pub transitions: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Windows of detached actors' events shared among threads (a run in lanes only).
    pub shared_windows: u64,
}

const IMMINENT: u8 = 1;
const HAS_BAG: u8 = 2;

/// Per-actor bookkeeping the coordinator keeps outside the actor.
struct Bookkeeping {
    name: String,
    rank: u32,
    last_transition: SimTime,
    send_count: u64,
    flags: u8,
}

/// A running simulation; built by [`crate::Assembly::build`].
pub struct Simulation<M: Message> {
    book: Vec<Bookkeeping>,
    agenda: Agenda,
    queue: MessageQueue<M>,
    host: Host<M>,
    observers: Vec<Box<dyn Observer<M>>>,
    describe: bool,
    now: Instant,
    max_rounds: u32,
    affected: Vec<(u32, ActorId)>,
    affected_ids: Vec<ActorId>,
    works: Vec<Work<M>>,
    stats: RunStats,
    halted: Option<(String, String)>,
    /// Which actors may run ahead through their own internal events when a round has them
    /// alone (the detached ones, on the inline host without lanes).
    may_run_ahead: Vec<bool>,
    /// Whether an observer must see every transition (one not blind to detached actors, or
    /// one that wants descriptions or checks), so that no actor may run ahead.
    every_transition_seen: bool,
    /// The detached actors, when they run in lanes.
    lanes: Option<Lanes<M>>,
    /// Why the lanes cannot run, found before the first round.
    lane_error: Option<KernelError>,
}

/// A finished simulation: its actors and observers handed back for their results.
pub struct Finished<M: Message> {
    /// Each actor with its name, in assembly order.
    pub actors: Vec<(String, Box<dyn Actor<M>>)>,
    /// The observers, in the order they were attached.
    pub observers: Vec<Box<dyn Observer<M>>>,
    /// The time of the last round.
    pub now: SimTime,
    /// What the run did.
    pub stats: RunStats,
}

impl<M: Message> Finished<M> {
    /// Take the actor at `id` back as its concrete type, if it has that type.
    pub fn take_actor<T: Actor<M>>(&mut self, id: ActorId) -> Option<T> {
        let (_, slot) = self.actors.get_mut(id.index())?;
        if !(slot.as_ref() as &dyn Any).is::<T>() {
            return None;
        }
        let placeholder: Box<dyn Actor<M>> = Box::new(Taken);
        let actor: Box<dyn Actor<M>> = std::mem::replace(slot, placeholder);
        let actor: Box<dyn Any> = actor;
        actor.downcast::<T>().ok().map(|b| *b)
    }

    /// Take the observer at `index` back as its concrete type, if it has that type.
    pub fn take_observer<T: Observer<M>>(&mut self, index: usize) -> Option<T> {
        let slot = self.observers.get_mut(index)?;
        if !(slot.as_ref() as &dyn Any).is::<T>() {
            return None;
        }
        let placeholder: Box<dyn Observer<M>> = Box::new(Taken);
        let observer: Box<dyn Observer<M>> = std::mem::replace(slot, placeholder);
        let observer: Box<dyn Any> = observer;
        observer.downcast::<T>().ok().map(|b| *b)
    }
}

/// What is left in a slot after its actor or observer was taken back (or while it runs in a
/// lane).
pub(crate) struct Taken;

/// Each name's rank among all names, indexed like `names`.
pub(crate) fn name_ranks(names: &[String]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(&names[b]));
    let mut ranks = vec![0u32; names.len()];
    for (rank, &index) in order.iter().enumerate() {
        ranks[index] = rank as u32;
    }
    ranks
}

impl<M: Message> Actor<M> for Taken {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, _: &Context, _: crate::Event<'_, M>, _: &mut Outbox<M>) {}
}

impl<M: 'static> Observer<M> for Taken {}

impl<M: Message> Simulation<M> {
    pub(crate) fn start(
        names: Vec<String>,
        actors: Vec<Box<dyn Actor<M>>>,
        max_rounds: u32,
        host: HostKind,
        lanes: Option<Lanes<M>>,
        detached: Vec<bool>,
    ) -> Simulation<M> {
        let may_run_ahead = match (host, &lanes) {
            (HostKind::Inline, None) => detached,
            _ => vec![false; names.len()],
        };
        let ranks = name_ranks(&names);
        let mut agenda = Agenda::new(&ranks);
        let mut lanes = lanes;
        for (index, actor) in actors.iter().enumerate() {
            let first = match actor.time_advance() {
                TimeAdvance::Passive => None,
                TimeAdvance::After(d) => SimTime::ZERO.checked_add(d).map(Instant::at),
            };
            agenda.set(ActorId(index as u32), first);
            if let (Some(lanes), Some(first)) = (&mut lanes, first) {
                lanes.note_timer(ActorId(index as u32), first);
            }
        }
        let works = (0..names.len()).map(|i| Work::new(ActorId(i as u32))).collect();
        let book = names
            .into_iter()
            .zip(ranks)
            .map(|(name, rank)| Bookkeeping {
                name,
                rank,
                last_transition: SimTime::ZERO,
                send_count: 0,
                flags: 0,
            })
            .collect();
        Simulation {
            book,
            agenda,
            queue: MessageQueue::default(),
            host: Host::new(host, actors),
            observers: Vec::new(),
            describe: false,
            now: Instant::default(),
            max_rounds,
            affected: Vec::new(),
            affected_ids: Vec::new(),
            works,
            stats: RunStats::default(),
            halted: None,
            may_run_ahead,
            every_transition_seen: false,
            lanes,
            lane_error: None,
        }
    }

    /// Attach an observer; it sees everything from the next round on.
    pub fn observe(&mut self, observer: impl Observer<M> + 'static) {
        self.observe_boxed(Box::new(observer));
    }

    /// [`Simulation::observe`] for an already boxed observer.
    pub fn observe_boxed(&mut self, mut observer: Box<dyn Observer<M>>) {
        if self.lanes.is_some() && !observer.blind_to_detached() {
            self.lane_error.get_or_insert(KernelError::ObserverSeesDetached);
        }
        self.describe |= observer.wants_descriptions();
        self.every_transition_seen |=
            !observer.blind_to_detached() || observer.wants_descriptions() || observer.wants_checks();
        if observer.wants_checks() {
            self.works.iter_mut().for_each(|work| work.check = true);
        }
        let names: Vec<&str> = self.book.iter().map(|b| b.name.as_str()).collect();
        observer.on_start(&names);
        self.observers.push(observer);
    }

    /// The instant of the last round run (round 0 of time 0 before any).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Whether detached actors run in lanes ([`crate::Assembly::build_in_lanes`]).
    pub fn in_lanes(&self) -> bool {
        self.lanes.is_some()
    }

    /// What the run did so far.
    pub fn stats(&self) -> RunStats {
        self.stats
    }

    /// The name given to `id` at assembly.
    pub fn name(&self, id: ActorId) -> Option<&str> {
        self.book.get(id.index()).map(|b| b.name.as_str())
    }

    /// How many messages are sent but not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.queue.len() + self.lanes.as_ref().map_or(0, Lanes::in_flight)
    }

    /// When `id`'s next internal event is scheduled, if it has one.
    pub fn next_internal(&self, id: ActorId) -> Option<Instant> {
        match self.lanes.as_ref().and_then(|lanes| lanes.next_internal(id)) {
            Some(next) => next,
            None => self.agenda.get(id),
        }
    }

    /// The earliest pending instant, if anything is pending.
    pub fn next_instant(&mut self) -> Option<Instant> {
        let attached = earliest(self.agenda.peek(), self.queue.peek());
        match &self.lanes {
            Some(lanes) => earliest(attached, earliest(lanes.uncounted.front().copied(), lanes.earliest())),
            None => attached,
        }
    }

    /// Run every round up to and including simulated time `horizon`.
    pub fn run_until(&mut self, horizon: SimTime) -> Result<RunEnd, KernelError> {
        loop {
            if let Some(end) = self.run_rounds(horizon, u64::MAX)? {
                return Ok(end);
            }
        }
    }

    /// Run at most `rounds` rounds up to and including simulated time `horizon`, jumping
    /// straight to each next event however far it lies; `None` when rounds remain. A caller
    /// that reports progress between calls pays for work done, never for simulated idle time.
    pub fn run_rounds(&mut self, horizon: SimTime, rounds: u64) -> Result<Option<RunEnd>, KernelError> {
        if self.lanes.is_some() {
            if let Some(error) = self.lane_error.clone() {
                return Err(error);
            }
            for _ in 0..rounds {
                if let Some(end) = self.lane_round(horizon)? {
                    return Ok(Some(end));
                }
            }
            return Ok(None);
        }
        // Nothing may be run ahead to this time or later.
        let past_horizon = horizon.checked_add(SimDuration::from_micros(1)).unwrap_or(SimTime::MAX);
        let mut left = rounds;
        while left > 0 {
            let (timers, messages) = (self.agenda.peek(), self.queue.peek());
            let Some(next) = earliest(timers, messages) else {
                return Ok(Some(RunEnd::Quiescent { at: self.now.time }));
            };
            if next.time > horizon {
                return Ok(Some(RunEnd::Horizon { at: horizon }));
            }
            left -= match self.agenda.lone_at(next) {
                Some(id) if messages != Some(next) => {
                    self.lone_round(next, id, messages, past_horizon, left - 1)?
                }
                _ => {
                    self.round(next)?;
                    1
                }
            };
            if let Some((actor, reason)) = self.halted.take() {
                return Ok(Some(RunEnd::Halted { at: self.now.time, actor, reason }));
            }
        }
        Ok(None)
    }

    /// Run until nothing is pending or an actor halts.
    pub fn run(&mut self) -> Result<RunEnd, KernelError> {
        self.run_until(SimTime::MAX)
    }

    /// Run exactly one round, if anything is pending; returns its instant.
    pub fn step(&mut self) -> Result<Option<Instant>, KernelError> {
        if self.lanes.is_some() {
            let Some(next) = self.next_instant() else { return Ok(None) };
            // A halt stays pending for the next run, as on the sequential path.
            if let Some(RunEnd::Halted { actor, reason, .. }) = self.run_rounds(SimTime::MAX, 1)? {
                self.halted = Some((actor, reason));
            }
            return Ok(Some(next));
        }
        let Some(next) = self.next_instant() else { return Ok(None) };
        self.round(next)?;
        Ok(Some(next))
    }

    /// Hand back the actors and observers for their results.
    pub fn finish(self) -> Finished<M> {
        crate::clock::publish(None);
        let names = self.book.into_iter().map(|b| b.name);
        let mut actors = self.host.into_actors();
        if let Some(lanes) = self.lanes {
            for (id, actor) in lanes.into_actors() {
                actors[id.index()] = actor;
            }
        }
        Finished {
            actors: names.zip(actors).collect(),
            observers: self.observers,
            now: self.now.time,
            stats: self.stats,
        }
    }

    /// One round of a run whose detached actors run in lanes: the attached actors' round at
    /// the earliest pending instant, or a detached actors' instant counted as a round, after
    /// running the lanes through the next window when nothing attached is left before it.
    fn lane_round(&mut self, horizon: SimTime) -> Result<Option<RunEnd>, KernelError> {
        loop {
            let attached = earliest(self.agenda.peek(), self.queue.peek());
            let lanes = self.lanes.as_mut().expect("a run in lanes");
            let detached = lanes.uncounted.front().copied();
            if let Some(next) = earliest(attached, detached)
                && next.time < lanes.frontier
            {
                if next.time > horizon {
                    return Ok(Some(RunEnd::Horizon { at: horizon }));
                }
                if detached == Some(next) {
                    lanes.uncounted.pop_front();
                }
                let lane_halt = lanes.halt.as_ref().is_some_and(|h| h.at == next);
                if attached == Some(next) {
                    self.round(next)?;
                } else {
                    self.now = next;
                    crate::clock::publish(Some(next));
                    self.stats.rounds += 1;
                }
                if lane_halt && self.halted.is_none() {
                    let halt = self.lanes.as_mut().and_then(|l| l.halt.take()).expect("checked above");
                    self.halted = Some((halt.name, halt.reason));
                }
                if let Some((actor, reason)) = self.halted.take() {
                    return Ok(Some(RunEnd::Halted { at: self.now.time, actor, reason }));
                }
                return Ok(None);
            }
            let Some(next) = earliest(attached, lanes.earliest()) else {
                return Ok(Some(RunEnd::Quiescent { at: self.now.time }));
            };
            if next.time > horizon {
                return Ok(Some(RunEnd::Horizon { at: horizon }));
            }
            let cap = horizon.checked_add(SimDuration::from_micros(1)).unwrap_or(SimTime::MAX);
            // Every attached event before the frontier has run, so the window moves it on.
            let agenda = &self.agenda;
            let end = lanes.window_end(|id| agenda.get(id), cap);
            debug_assert!(end > lanes.frontier);
            let queue = &mut self.queue;
            let (transitions, messages) = lanes.run_window(end, |pending| queue.push(pending))?;
            self.stats.transitions += transitions;
            self.stats.messages += messages;
            self.stats.shared_windows = lanes.shared_windows;
        }
    }

    fn round(&mut self, at: Instant) -> Result<(), KernelError> {
        self.gather(at);
        if at.round >= self.max_rounds {
            let mut actors: Vec<String> =
                self.affected.iter().map(|&(_, id)| self.book[id.index()].name.clone()).collect();
            actors.sort();
            return Err(KernelError::RoundLimit { time: at.time, bound: self.max_rounds, actors });
        }
        self.begin_round(at);
        self.affected_ids.clear();
        for i in 0..self.affected.len() {
            let id = self.affected[i].1;
            self.prepare(at, id);
            self.affected_ids.push(id);
        }
        self.affected.clear();
        self.host.run_round(&self.affected_ids, &mut self.works);
        let affected = std::mem::take(&mut self.affected_ids);
        for &id in &affected {
            // On error the run is over; the buffers need no restoring.
            self.settle(at, id)?;
        }
        self.affected_ids = affected;
        self.ask_observers_to_halt();
        Ok(())
    }

    /// Move the clock to `at` and count the round.
    #[inline]
    fn begin_round(&mut self, at: Instant) {
        self.now = at;
        crate::clock::publish(Some(at));
        self.stats.rounds += 1;
    }

    /// Ready `id`'s work for its transition at `at` (imminent if its flags say so, with the bag
    /// gathered for it), count the transition and its messages, and show observers the bag.
    #[inline]
    fn prepare(&mut self, at: Instant, id: ActorId) {
        let book = &mut self.book[id.index()];
        let work = &mut self.works[id.index()];
        work.imminent = book.flags & IMMINENT != 0;
        book.flags = 0;
        work.ctx = Context { now: at, elapsed: at.time.saturating_since(book.last_transition) };
        work.bag_len = work.bag.len();
        if self.describe {
            work.description.get_or_insert_with(Description::default);
            work.outbox.notes.get_or_insert_with(Default::default).clear();
        }
        self.stats.transitions += 1;
        self.stats.messages += work.bag_len as u64;
        if !self.observers.is_empty() {
            for envelope in &work.bag {
                for observer in &mut self.observers {
                    observer.on_delivery(envelope);
                }
            }
        }
    }

    /// Stop the run if an observer asks to, unless something already did.
    #[inline]
    fn ask_observers_to_halt(&mut self) {
        if self.halted.is_none()
            && let Some(reason) = self.observers.iter().find_map(|o| o.halt())
        {
            self.halted = Some(("observer".to_owned(), reason));
        }
    }

    /// A round whose only affected actor is `id`, imminent with no bag (most of a run's
    /// rounds: an engine's next step): the same work and counts as [`Simulation::round`]
    /// without gathering and sorting. Runs take it; [`Simulation::step`] always takes the full
    /// round, and a test holds the two to the same transitions.
    ///
    /// An actor that may run ahead is offered the rounds it would have alone next: its own
    /// internal events before any other actor's and before the first message pending
    /// (`next_message`, later than `at`), before `past_horizon`, at most `spare` more rounds.
    /// Returns the rounds run, this one and those run ahead.
    fn lone_round(
        &mut self,
        at: Instant,
        id: ActorId,
        next_message: Option<Instant>,
        past_horizon: SimTime,
        spare: u64,
    ) -> Result<u64, KernelError> {
        if at.round >= self.max_rounds {
            let actors = vec![self.book[id.index()].name.clone()];
            return Err(KernelError::RoundLimit { time: at.time, bound: self.max_rounds, actors });
        }
        self.queue.pass(at);
        self.begin_round(at);
        debug_assert!(self.book[id.index()].flags == 0 && self.works[id.index()].bag.is_empty());
        self.book[id.index()].flags = IMMINENT;
        self.prepare(at, id);
        if spare > 0 && self.may_run_ahead[id.index()] && !self.every_transition_seen {
            // Nothing else happens before the next pending instant of anything else.
            let others = earliest(self.agenda.second(), next_message).map_or(SimTime::MAX, |i| i.time);
            let until = others.min(past_horizon);
            // Offered only with room for a gap as long as the actor's last: an engine stepping
            // beside others would rarely take it, and asking costs it a look at its next event.
            let work = &mut self.works[id.index()];
            if until.saturating_since(at.time) > work.ctx.elapsed {
                work.outbox.offer = Some(RunAhead { until, rounds: spare, last: at.time, taken: 0 });
            }
        }
        self.host.run_round(std::slice::from_ref(&id), &mut self.works);
        let mut at = at;
        let mut ran = 1;
        if let Some(offer) = self.works[id.index()].outbox.offer.take()
            && offer.taken > 0
        {
            // The rounds run ahead are counted as the rounds they were; the transition settles
            // at the last of them, where the actor now is.
            at = Instant::at(offer.last);
            self.now = at;
            self.stats.rounds += offer.taken;
            self.stats.transitions += offer.taken;
            ran += offer.taken;
        }
        self.settle(at, id)?;
        self.ask_observers_to_halt();
        Ok(ran)
    }

    /// Collect the imminent actors and the bags due at `at` into `affected`, in rank order.
    fn gather(&mut self, at: Instant) {
        let (book, works, affected) = (&mut self.book, &mut self.works, &mut self.affected);
        self.agenda.for_each_at(at, |id| {
            let actor = &mut book[id.index()];
            actor.flags |= IMMINENT;
            affected.push((actor.rank, id));
        });
        self.queue.drain_due(at, |envelope| {
            let to = envelope.to;
            let receiver = &mut book[to.index()];
            if receiver.flags == 0 {
                affected.push((receiver.rank, to));
            }
            receiver.flags |= HAS_BAG;
            works[to.index()].bag.push(envelope);
        });
        self.affected.sort_unstable_by_key(|&(rank, _)| rank);
    }

    /// Stamp and queue the messages `id` emitted at `at`, in emission order.
    fn queue_emitted(&mut self, at: Instant, id: ActorId) -> Result<(), KernelError> {
        let work = &mut self.works[id.index()];
        let sender_order = SenderOrder(self.book[id.index()].rank);
        for outgoing in work.outbox.messages.drain(..) {
            let Some(receiver_rank) = self.book.get(outgoing.to.index()).map(|r| r.rank) else {
                return Err(KernelError::UnknownReceiver {
                    sender: self.book[id.index()].name.clone(),
                    to: outgoing.to,
                });
            };
            let Some(deliver_at) = at.after(outgoing.delay) else {
                return Err(KernelError::TimeOverflow { actor: self.book[id.index()].name.clone() });
            };
            let class = outgoing.payload.class();
            let send_count = self.book[id.index()].send_count;
            self.book[id.index()].send_count += 1;
            let pending = Pending {
                bag_key: BagKey::new(receiver_rank, class, sender_order, send_count),
                envelope: Envelope {
                    key: OrderKey { time: deliver_at.time, class, sender: sender_order, send_count },
                    round: deliver_at.round,
                    sent_at: at,
                    sender: id,
                    to: outgoing.to,
                    payload: outgoing.payload,
                },
            };
            match &mut self.lanes {
                Some(lanes) if lanes.is_detached(outgoing.to) => {
                    lanes.send_to_detached(
                        &self.book[id.index()].name,
                        outgoing.delay,
                        deliver_at,
                        pending,
                    )?;
                }
                Some(lanes) => {
                    lanes.note_attached_delivery(class, outgoing.to, deliver_at);
                    self.queue.push(pending);
                }
                None => self.queue.push(pending),
            }
        }
        Ok(())
    }

    /// Stamp and queue what one actor emitted, schedule its next internal event, tell observers.
    fn settle(&mut self, at: Instant, id: ActorId) -> Result<(), KernelError> {
        let emitted = self.works[id.index()].outbox.messages.len();
        // Most transitions emit nothing (an engine's steps), and a drain is not free.
        if emitted > 0 {
            self.queue_emitted(at, id)?;
        }
        let work = &mut self.works[id.index()];
        // The transition took its bag, and the queue every message it emitted.
        debug_assert!(work.bag.is_empty() && work.outbox.messages.is_empty());
        let book = &mut self.book[id.index()];
        let elapsed = at.time.saturating_since(book.last_transition);
        book.last_transition = at.time;
        let next = match work.next {
            TimeAdvance::Passive => None,
            TimeAdvance::After(d) => match at.after(d) {
                Some(next) => Some(next),
                None => return Err(KernelError::TimeOverflow { actor: book.name.clone() }),
            },
        };
        if let (Some(lanes), Some(next)) = (&mut self.lanes, next)
            && self.agenda.get(id) != Some(next)
        {
            lanes.note_timer(id, next);
        }
        self.agenda.set(id, next);
        if let Some(reason) = work.outbox.halt.take()
            && self.halted.is_none()
        {
            self.halted = Some((book.name.clone(), reason));
        }
        if !self.observers.is_empty() {
            let kind = match (work.imminent, work.bag_len > 0) {
                (true, false) => TransitionKind::Internal,
                (false, _) => TransitionKind::External,
                (true, true) => TransitionKind::Confluent,
            };
            let record = TransitionRecord {
                now: at,
                actor: id,
                name: &book.name,
                kind,
                elapsed,
                bag_len: work.bag_len,
                emitted,
                next_internal: next,
                description: work.description.as_ref(),
                notes: work.outbox.notes.as_ref(),
            };
            for observer in &mut self.observers {
                observer.on_transition(&record);
            }
            if !work.violations.is_empty() {
                for violation in work.violations.drain(..) {
                    for observer in &mut self.observers {
                        observer.on_violation(at, &book.name, &violation);
                    }
                }
            }
        }
        Ok(())
    }
}

//! Lanes: detached actors advanced on several threads between the other actors' events.
//!
//! Some actors — a cluster's engines — hear from the rest only through messages that cross a
//! positive delay, never hear from each other, and send back only messages of *quiet* classes:
//! classes whose delivery never leads, however indirectly, to a message to a detached actor
//! before the attached actors' next own event. Say the attached actors' earliest pending event
//! that is not a quiet message is at `u`: then nothing can reach a detached actor before
//! `u + lookahead`, and every detached actor can run all of its events before that time on its
//! own, in any order and on any thread, with exactly the inputs a sequential run would give it.
//! The coordinator computes that horizon (a *window*), the lanes run their actors to it — lane
//! 0 on the calling thread, the others on worker threads — and the coordinator then runs the
//! attached actors' rounds up to it, counting the detached actors' instants among its rounds
//! so that the round count (and every slice cut by it) is a sequential run's. A message that
//! would break the promise — one to a detached actor earlier than a window already run, or
//! between detached actors — stops the run with an error instead of changing its outcome.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use crate::actor::{Actor, ActorId, Context, TimeAdvance};
use crate::agenda::{BagKey, Pending};
use crate::coordinator::Taken;
use crate::error::KernelError;
use crate::host::{Work, perform};
use crate::message::{Envelope, Message, MessageClass, OrderKey, SenderOrder};
use crate::time::{Instant, SimDuration, SimTime};

/// How detached actors may run ahead of the others, and on how many threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaneSpec {
    /// Threads the detached actors share (the calling thread is one of them), at least 1.
    pub threads: usize,
    /// The least delay of any message to a detached actor (positive).
    pub lookahead: SimDuration,
    /// Classes whose delivery to an attached actor never leads to a message to a detached
    /// actor earlier than the attached actors' next event of another kind plus its reach.
    pub quiet: Vec<MessageClass>,
    /// Attached actors whose events reach a detached actor later than `lookahead` after them
    /// (a client whose requests pass through a router), with that least time.
    pub reach: Vec<(ActorId, SimDuration)>,
    /// The average number of detached transitions per window from which a window with more
    /// than one busy actor is shared with the other threads (0: always); below it, waking a
    /// thread and waiting for the slower one cost more than the work moved.
    pub handoff_grain: u32,
    /// Windows end at the latest at the next multiple of this period (zero: no such bound), so
    /// a caller that decides between slices to stop at the next multiple finds the detached
    /// actors no further on than a sequential run's.
    pub grid: SimDuration,
}

/// A detached actor, the bookkeeping the coordinator would otherwise keep for it, and what it
/// did in the current window.
pub(crate) struct Member<M> {
    id: ActorId,
    actor: Box<dyn Actor<M> + Send>,
    rank: u32,
    name: String,
    last_transition: SimTime,
    send_count: u64,
    /// Its next internal event.
    next: Option<Instant>,
    /// Messages sent to it and not yet delivered, the latest first.
    inbox: Vec<(Instant, Pending<M>)>,
    work: Work<M>,
    halted: bool,
    /// What it sent in the window, for the coordinator to queue.
    sent: Vec<Pending<M>>,
    /// The instants of its transitions in the window, in order.
    instants: Vec<Instant>,
    halt: Option<LaneHalt>,
    error: Option<KernelError>,
    transitions: u64,
    messages: u64,
}

impl<M: Message> Member<M> {
    pub(crate) fn new(id: ActorId, actor: Box<dyn Actor<M> + Send>, rank: u32, name: String) -> Member<M> {
        let next = match actor.time_advance() {
            TimeAdvance::Passive => None,
            TimeAdvance::After(d) => SimTime::ZERO.checked_add(d).map(Instant::at),
        };
        Member {
            id,
            actor,
            rank,
            name,
            last_transition: SimTime::ZERO,
            send_count: 0,
            next,
            inbox: Vec::new(),
            work: Work::new(id),
            halted: false,
            sent: Vec::new(),
            instants: Vec::new(),
            halt: None,
            error: None,
            transitions: 0,
            messages: 0,
        }
    }

    /// Queue a message for delivery at `at`.
    fn deliver_later(&mut self, at: Instant, pending: Pending<M>) {
        let key = (at, pending.bag_key);
        let position = self.inbox.partition_point(|(a, p)| (*a, p.bag_key) > key);
        self.inbox.insert(position, (at, pending));
    }

    /// Its earliest pending event.
    fn earliest(&self) -> Option<Instant> {
        if self.halted {
            return None;
        }
        let message = self.inbox.last().map(|(at, _)| *at);
        match (self.next, message) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run its events before `end`.
    fn run(&mut self, end: SimTime, world: &World) {
        while let Some(at) = self.earliest().filter(|at| at.time < end) {
            if let Err(e) = self.advance(at, world) {
                self.error = Some(e);
                self.halted = true;
                break;
            }
            self.instants.push(at);
            self.transitions += 1;
            self.messages += self.work.bag_len as u64;
            if let Some(reason) = self.work.outbox.halt.take() {
                self.halted = true;
                self.halt = Some(LaneHalt { at, rank: self.rank, name: self.name.clone(), reason });
            }
        }
        crate::clock::publish(None);
    }

    /// One transition at `at`, its outputs stamped into `sent`.
    fn advance(&mut self, at: Instant, world: &World) -> Result<(), KernelError> {
        if at.round >= world.max_rounds {
            return Err(KernelError::RoundLimit {
                time: at.time,
                bound: world.max_rounds,
                actors: vec![self.name.clone()],
            });
        }
        crate::clock::publish(Some(at));
        let work = &mut self.work;
        work.imminent = self.next == Some(at);
        while self.inbox.last().is_some_and(|(when, _)| *when == at) {
            let (_, pending) = self.inbox.pop().expect("checked above");
            work.bag.push(pending.envelope);
        }
        work.bag_len = work.bag.len();
        work.ctx = Context { now: at, elapsed: at.time.saturating_since(self.last_transition) };
        perform(self.actor.as_mut(), work);
        let sender = SenderOrder(self.rank);
        for outgoing in work.outbox.messages.drain(..) {
            let to = outgoing.to.index();
            let Some(&receiver_rank) = world.ranks.get(to) else {
                return Err(KernelError::UnknownReceiver { sender: self.name.clone(), to: outgoing.to });
            };
            if world.detached[to] {
                return Err(KernelError::DetachedToDetached { sender: self.name.clone(), to: outgoing.to });
            }
            if outgoing.delay.is_zero() {
                return Err(KernelError::DetachedWithoutDelay { sender: self.name.clone() });
            }
            let Some(deliver_at) = at.after(outgoing.delay) else {
                return Err(KernelError::TimeOverflow { actor: self.name.clone() });
            };
            let class = outgoing.payload.class();
            let send_count = self.send_count;
            self.send_count += 1;
            self.sent.push(Pending {
                bag_key: BagKey::new(receiver_rank, class, sender, send_count),
                envelope: Envelope {
                    key: OrderKey { time: deliver_at.time, class, sender, send_count },
                    round: deliver_at.round,
                    sent_at: at,
                    sender: self.id,
                    to: outgoing.to,
                    payload: outgoing.payload,
                },
            });
        }
        self.next = match work.next {
            TimeAdvance::Passive => None,
            TimeAdvance::After(d) => match at.after(d) {
                Some(next) => Some(next),
                None => return Err(KernelError::TimeOverflow { actor: self.name.clone() }),
            },
        };
        self.last_transition = at.time;
        Ok(())
    }
}

/// A detached actor's halt.
pub(crate) struct LaneHalt {
    pub(crate) at: Instant,
    pub(crate) rank: u32,
    pub(crate) name: String,
    pub(crate) reason: String,
}

/// What every member reads of the rest of the simulation.
struct World {
    /// Every actor's name rank, indexed by id.
    ranks: Vec<u32>,
    /// Whether each actor is detached, indexed by id.
    detached: Vec<bool>,
    max_rounds: u32,
}

/// What the threads share: the members, and the window being run.
struct Shared<M> {
    members: Vec<Mutex<Member<M>>>,
    world: World,
    /// The members with events in the window, by index, and how many of them.
    busy: Vec<AtomicU32>,
    busy_len: AtomicUsize,
    /// How many of `busy` the threads have taken.
    claimed: AtomicUsize,
    /// The window's end, µs.
    end: AtomicU64,
}

impl<M: Message> Shared<M> {
    fn member(&self, index: usize) -> MutexGuard<'_, Member<M>> {
        self.members[index].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take busy members one at a time and run each to the window's end, until none is left.
    fn work(&self) {
        let end = SimTime::from_micros(self.end.load(Ordering::Acquire));
        let len = self.busy_len.load(Ordering::Acquire);
        loop {
            let claim = self.claimed.fetch_add(1, Ordering::AcqRel);
            if claim >= len {
                return;
            }
            let index = self.busy[claim].load(Ordering::Acquire) as usize;
            self.member(index).run(end, &self.world);
        }
    }
}

const IDLE: u8 = 0;
const RUN: u8 = 1;
const DONE: u8 = 2;
const STOP: u8 = 3;

/// Busy-wait rounds before a waiting thread yields its core: a window is a few microseconds of
/// work.
const SPINS: u32 = 64;

/// Yields before a waiting worker parks: its core may be wanted by the accounting and draws.
const YIELDS: u32 = 2_000;

/// A thread that joins in each window with more than one busy member.
struct Worker {
    state: Arc<AtomicU8>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.state.store(STOP, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // A worker's panic was handed to the coordinator when it happened.
            let _ = thread.join();
        }
    }
}

/// Wait until `state` leaves `from`, spinning, then yielding, then (if `park`) parking.
fn wait_while(state: &AtomicU8, from: u8, park: bool) -> u8 {
    let mut rounds = 0u32;
    loop {
        let now = state.load(Ordering::Acquire);
        if now != from {
            return now;
        }
        rounds = rounds.saturating_add(1);
        if rounds < SPINS {
            std::hint::spin_loop();
        } else if !park || rounds < SPINS + YIELDS {
            thread::yield_now();
        } else {
            thread::park();
        }
    }
}

/// A worker's life: share each window it is woken for, until it is stopped.
fn worker_loop<M: Message>(shared: &Shared<M>, state: &AtomicU8, panic: &Mutex<Option<Box<dyn Any + Send>>>) {
    loop {
        match wait_while(state, IDLE, true) {
            STOP => return,
            RUN => {}
            _ => {
                // Our last window's DONE, not yet seen by the coordinator.
                wait_while(state, DONE, true);
                continue;
            }
        }
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| shared.work())) {
            *panic.lock().unwrap_or_else(PoisonError::into_inner) = Some(payload);
        }
        // The coordinator resets the state to IDLE when it has seen DONE (or stops us).
        let _ = state.compare_exchange(RUN, DONE, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The detached actors, the threads that run them and the state of the current window.
pub(crate) struct Lanes<M> {
    shared: Arc<Shared<M>>,
    workers: Vec<Worker>,
    panic: Arc<Mutex<Option<Box<dyn Any + Send>>>>,
    /// Per actor: its place among the members, or `None` when attached.
    place: Vec<Option<u32>>,
    lookahead: SimDuration,
    quiet: Vec<MessageClass>,
    grid: SimDuration,
    /// Every detached event before this time has run.
    pub(crate) frontier: SimTime,
    /// Instants of detached transitions not yet counted as rounds, in order, each once.
    pub(crate) uncounted: VecDeque<Instant>,
    /// Per actor, the least time from its event to a message reaching a detached actor.
    reach: Vec<SimDuration>,
    /// Loud messages queued for attached actors: the earliest time each could reach a
    /// detached actor, and its delivery (past once the frontier passes it).
    loud: BinaryHeap<Reverse<(SimTime, Instant)>>,
    /// Attached actors' internal events: the earliest time each could reach a detached actor,
    /// the actor and the event (stale once the actor's agenda says otherwise).
    timers: BinaryHeap<Reverse<(SimTime, u32, Instant)>>,
    /// The earliest halt of a detached actor, once one halted.
    pub(crate) halt: Option<LaneHalt>,
    merged: Vec<Instant>,
    busy: Vec<u32>,
    /// Transitions per window, a moving average in sixteenths.
    grain: u64,
    /// The average from which windows are shared with the workers, in sixteenths.
    handoff_grain: u64,
    /// Windows shared with the workers so far.
    pub(crate) shared_windows: u64,
}

impl<M: Message + Send> Lanes<M> {
    /// Lanes for `members` (detached actors, in assembly order) on `spec.threads` threads.
    pub(crate) fn start(
        spec: &LaneSpec,
        members: Vec<Member<M>>,
        ranks: Vec<u32>,
        detached: Vec<bool>,
        max_rounds: u32,
    ) -> Lanes<M> {
        let threads = spec.threads.clamp(1, members.len().max(1));
        let mut reach = vec![spec.lookahead; ranks.len()];
        for &(id, time) in &spec.reach {
            if let Some(slot) = reach.get_mut(id.index()) {
                *slot = time.max(spec.lookahead);
            }
        }
        let mut place = vec![None; ranks.len()];
        for (i, member) in members.iter().enumerate() {
            place[member.id.index()] = Some(i as u32);
        }
        let shared = Arc::new(Shared {
            busy: (0..members.len()).map(|_| AtomicU32::new(0)).collect(),
            members: members.into_iter().map(Mutex::new).collect(),
            world: World { ranks, detached, max_rounds },
            busy_len: AtomicUsize::new(0),
            claimed: AtomicUsize::new(0),
            end: AtomicU64::new(0),
        });
        let panic = Arc::new(Mutex::new(None));
        let workers = (1..threads)
            .map(|i| {
                let state = Arc::new(AtomicU8::new(IDLE));
                let (shared, own, panic) = (shared.clone(), state.clone(), panic.clone());
                let thread = thread::Builder::new()
                    .name(format!("lane-{i}"))
                    .spawn(move || worker_loop(&shared, &own, &panic))
                    .expect("spawning a lane's thread");
                Worker { state, thread: Some(thread) }
            })
            .collect();
        Lanes {
            shared,
            workers,
            panic,
            place,
            lookahead: spec.lookahead,
            quiet: spec.quiet.clone(),
            grid: spec.grid,
            frontier: SimTime::ZERO,
            uncounted: VecDeque::new(),
            reach,
            loud: BinaryHeap::new(),
            timers: BinaryHeap::new(),
            halt: None,
            merged: Vec::new(),
            busy: Vec::new(),
            grain: 16 * u64::from(spec.handoff_grain),
            handoff_grain: 16 * u64::from(spec.handoff_grain),
            shared_windows: 0,
        }
    }
}

impl<M: Message> Lanes<M> {
    /// Whether `id` is detached.
    pub(crate) fn is_detached(&self, id: ActorId) -> bool {
        self.place.get(id.index()).is_some_and(Option::is_some)
    }

    /// When detached actor `id`'s next internal event is (`None` when `id` is attached).
    pub(crate) fn next_internal(&self, id: ActorId) -> Option<Option<Instant>> {
        let index = (*self.place.get(id.index())?)?;
        Some(self.shared.member(index as usize).next)
    }

    /// Queue `pending`, sent by an attached actor, for the detached actor it is addressed to.
    pub(crate) fn send_to_detached(
        &mut self,
        sender: &str,
        delay: SimDuration,
        deliver_at: Instant,
        pending: Pending<M>,
    ) -> Result<(), KernelError> {
        if delay < self.lookahead || deliver_at.time < self.frontier {
            return Err(KernelError::LookaheadBroken {
                sender: sender.to_owned(),
                at: deliver_at.time,
                frontier: self.frontier,
            });
        }
        let index = self.place[pending.envelope.to.index()].expect("a detached receiver");
        self.shared.member(index as usize).deliver_later(deliver_at, pending);
        Ok(())
    }

    /// Note a message queued for attached actor `to` at `at`; only loud ones bound a window.
    pub(crate) fn note_attached_delivery(&mut self, class: MessageClass, to: ActorId, at: Instant) {
        if !self.quiet.contains(&class) {
            self.loud.push(Reverse((at.time.saturating_add(self.reach[to.index()]), at)));
        }
    }

    /// Note attached actor `actor`'s next internal event.
    pub(crate) fn note_timer(&mut self, actor: ActorId, at: Instant) {
        self.timers.push(Reverse((at.time.saturating_add(self.reach[actor.index()]), actor.0, at)));
    }

    /// The earliest pending detached event.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        (0..self.shared.members.len()).filter_map(|i| self.shared.member(i).earliest()).min()
    }

    /// Messages waiting for detached actors.
    pub(crate) fn in_flight(&self) -> usize {
        (0..self.shared.members.len()).map(|i| self.shared.member(i).inbox.len()).sum()
    }

    /// The end of the next window, when every attached event before the frontier has run:
    /// the earliest time a pending loud delivery or internal event of an attached actor could
    /// reach a detached actor, and no later than `cap`. `scheduled` says when an attached
    /// actor's next internal event is.
    pub(crate) fn window_end(
        &mut self,
        scheduled: impl Fn(ActorId) -> Option<Instant>,
        cap: SimTime,
    ) -> SimTime {
        let frontier = self.frontier;
        while self.loud.peek().is_some_and(|Reverse((_, at))| at.time < frontier) {
            self.loud.pop();
        }
        while let Some(&Reverse((_, actor, at))) = self.timers.peek()
            && scheduled(ActorId(actor)) != Some(at)
        {
            self.timers.pop();
        }
        let loud = self.loud.peek().map(|Reverse((effect, _))| *effect);
        let timer = self.timers.peek().map(|Reverse((effect, _, _))| *effect);
        let grid = (!self.grid.is_zero()).then(|| frontier.next_multiple_of(self.grid));
        [loud, timer, grid].into_iter().flatten().fold(cap, SimTime::min)
    }

    /// Run every detached event before `end` — on the workers too when more than one member
    /// has some — then hand what the members sent to `queue` in member order, count their
    /// instants and keep their earliest halt; the window's transitions and messages.
    pub(crate) fn run_window(
        &mut self,
        end: SimTime,
        mut queue: impl FnMut(Pending<M>),
    ) -> Result<(u64, u64), KernelError> {
        let shared = Arc::clone(&self.shared);
        self.busy.clear();
        for index in 0..shared.members.len() {
            if shared.member(index).earliest().is_some_and(|at| at.time < end) {
                self.busy.push(index as u32);
            }
        }
        if self.busy.len() < 2 || self.grain < self.handoff_grain || self.workers.is_empty() {
            // One member at work, or windows too small: a handoff would cost more than it saves.
            for &index in &self.busy {
                shared.member(index as usize).run(end, &shared.world);
            }
        } else {
            for (slot, &index) in shared.busy.iter().zip(&self.busy) {
                slot.store(index, Ordering::Relaxed);
            }
            self.shared_windows += 1;
            shared.busy_len.store(self.busy.len(), Ordering::Relaxed);
            shared.claimed.store(0, Ordering::Relaxed);
            shared.end.store(end.as_micros(), Ordering::Relaxed);
            for worker in &self.workers {
                worker.state.store(RUN, Ordering::Release);
                if let Some(thread) = &worker.thread {
                    thread.thread().unpark();
                }
            }
            shared.work();
            for worker in &self.workers {
                wait_while(&worker.state, RUN, false);
                worker.state.store(IDLE, Ordering::Release);
            }
            if let Some(payload) = self.panic.lock().unwrap_or_else(PoisonError::into_inner).take() {
                resume_unwind(payload);
            }
        }
        self.frontier = end;
        let (mut transitions, mut messages) = (0, 0);
        for position in 0..self.busy.len() {
            let mut member = shared.member(self.busy[position] as usize);
            if let Some(error) = member.error.take() {
                return Err(error);
            }
            for pending in member.sent.drain(..) {
                let at = Instant { time: pending.envelope.key.time, round: pending.envelope.round };
                self.note_attached_delivery(pending.envelope.key.class, pending.envelope.to, at);
                queue(pending);
            }
            self.merged.append(&mut member.instants);
            transitions += std::mem::take(&mut member.transitions);
            messages += std::mem::take(&mut member.messages);
            if let Some(halt) = member.halt.take() {
                let earlier = self.halt.as_ref().is_none_or(|h| (halt.at, halt.rank) < (h.at, h.rank));
                if earlier {
                    self.halt = Some(halt);
                }
            }
        }
        self.grain = (7 * self.grain + 16 * transitions) / 8;
        self.merged.sort_unstable();
        self.merged.dedup();
        self.uncounted.extend(self.merged.drain(..));
        Ok((transitions, messages))
    }

    /// Stop the workers and hand back every detached actor with its id.
    pub(crate) fn into_actors(mut self) -> Vec<(ActorId, Box<dyn Actor<M>>)> {
        self.workers.clear();
        (0..self.shared.members.len())
            .map(|i| {
                let mut member = self.shared.member(i);
                let actor = std::mem::replace(&mut member.actor, Box::new(Taken));
                (member.id, actor as Box<dyn Actor<M>>)
            })
            .collect()
    }
}

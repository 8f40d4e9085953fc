//! The two pending-event structures of the coordinator.
//!
//! - [`Agenda`]: each actor's next internal event, an indexed binary min-heap with one entry per
//!   actor at most, so rescheduling is `O(log actors)` and leaves nothing stale behind.
//! - [`MessageQueue`]: messages not yet delivered. Messages with a positive delay are always due
//!   in round 0 of their time; those due within a timing wheel's span of the current time wait
//!   in its slot for their time, later ones in a slab indexed by a monotone radix heap on their
//!   delivery time. Zero-delay messages are all due in the very next round, so they skip the heap
//!   and wait in a plain vector, sorted once when that round starts. Either way, draining
//!   everything due at one instant yields the bags receiver by receiver, each sorted by
//!   [`crate::OrderKey`].

use crate::actor::ActorId;
use crate::message::{Envelope, MessageClass, SenderOrder};
use crate::radix::RadixQueue;
use crate::time::{Instant, SimTime};
use crate::wheel::TimingWheel;

const ABSENT: u32 = u32::MAX;

/// `(instant, rank)` packed into one integer with the same order.
fn agenda_key(at: Instant, rank: u32) -> u128 {
    (u128::from(at.time.as_micros()) << 64) | (u128::from(at.round) << 32) | u128::from(rank)
}

fn agenda_instant(key: u128) -> Instant {
    Instant { time: SimTime::from_micros((key >> 64) as u64), round: (key >> 32) as u32 }
}

/// Next internal event per actor, ordered by `(instant, rank)`.
#[derive(Debug, Default)]
pub(crate) struct Agenda {
    /// Binary min-heap of (packed key, actor).
    heap: Vec<(u128, u32)>,
    /// Each actor's index in `heap`, or `ABSENT`.
    position: Vec<u32>,
    rank: Vec<u32>,
}

impl Agenda {
    /// An agenda for actors with the given name ranks (indexed by `ActorId`), none scheduled.
    pub(crate) fn new(ranks: &[u32]) -> Agenda {
        Agenda {
            heap: Vec::with_capacity(ranks.len()),
            position: vec![ABSENT; ranks.len()],
            rank: ranks.to_vec(),
        }
    }

    /// The earliest scheduled instant.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.heap.first().map(|&(key, _)| agenda_instant(key))
    }

    /// The earliest instant but for the first entry's: the next event after the earliest one.
    pub(crate) fn second(&self) -> Option<Instant> {
        let child = |i: usize| self.heap.get(i).map(|&(key, _)| key);
        match (child(1), child(2)) {
            (Some(a), Some(b)) => Some(agenda_instant(a.min(b))),
            (a, b) => a.or(b).map(agenda_instant),
        }
    }

    /// The scheduled instant of `actor`, if any.
    pub(crate) fn get(&self, actor: ActorId) -> Option<Instant> {
        let i = self.position[actor.index()];
        (i != ABSENT).then(|| agenda_instant(self.heap[i as usize].0))
    }

    /// Visit every actor scheduled exactly at `at`, leaving them scheduled: the caller
    /// reschedules each one with [`Agenda::set`], which costs one sift instead of a removal and
    /// a reinsertion. Visits in heap order; the caller sorts.
    pub(crate) fn for_each_at(&self, at: Instant, mut visit: impl FnMut(ActorId)) {
        // Every entry due at `at` has only ancestors due at `at` (the heap property, with `at`
        // the minimum), so a walk from the root that stops at later entries finds them all. The
        // walk's stack never holds more than the heap's height plus one entries.
        let due = |i: usize| self.heap.get(i).is_some_and(|&(key, _)| agenda_instant(key) == at);
        if !due(0) {
            return;
        }
        visit(ActorId(self.heap[0].1));
        if !due(1) && !due(2) {
            return;
        }
        let mut stack = Vec::with_capacity(8);
        stack.extend([1, 2].into_iter().filter(|&i| due(i)));
        while let Some(i) = stack.pop() {
            visit(ActorId(self.heap[i].1));
            stack.extend([2 * i + 1, 2 * i + 2].into_iter().filter(|&c| due(c)));
        }
    }

    /// The actor scheduled at `at` when it is the only one (`at` being the earliest instant).
    pub(crate) fn lone_at(&self, at: Instant) -> Option<ActorId> {
        let due = |i: usize| self.heap.get(i).is_some_and(|&(key, _)| agenda_instant(key) == at);
        (due(0) && !due(1) && !due(2)).then(|| ActorId(self.heap[0].1))
    }

    /// Schedule `actor` at `at`, or unschedule it with `None`.
    pub(crate) fn set(&mut self, actor: ActorId, at: Option<Instant>) {
        let a = actor.index();
        let i = self.position[a];
        match (i != ABSENT, at) {
            (false, None) => {}
            (true, None) => self.remove(i as usize),
            (false, Some(at)) => {
                let i = self.heap.len();
                self.heap.push((agenda_key(at, self.rank[a]), actor.0));
                self.position[a] = i as u32;
                self.sift_up(i);
            }
            (true, Some(at)) => {
                let i = i as usize;
                let old = self.heap[i].0;
                let new = agenda_key(at, self.rank[a]);
                self.heap[i].0 = new;
                if new < old {
                    self.sift_up(i);
                } else if new > old {
                    self.sift_down(i);
                }
            }
        }
    }

    fn remove(&mut self, i: usize) {
        let removed = self.heap.swap_remove(i).1;
        self.position[removed as usize] = ABSENT;
        if i < self.heap.len() {
            self.position[self.heap[i].1 as usize] = i as u32;
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        let entry = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].0 <= entry.0 {
                break;
            }
            self.heap[i] = self.heap[parent];
            self.position[self.heap[i].1 as usize] = i as u32;
            i = parent;
        }
        self.heap[i] = entry;
        self.position[entry.1 as usize] = i as u32;
    }

    fn sift_down(&mut self, mut i: usize) {
        let entry = self.heap[i];
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].0 < self.heap[left].0 { right } else { left };
            if self.heap[child].0 >= entry.0 {
                break;
            }
            self.heap[i] = self.heap[child];
            self.position[self.heap[i].1 as usize] = i as u32;
            i = child;
        }
        self.heap[i] = entry;
        self.position[entry.1 as usize] = i as u32;
    }
}

/// A message's place in its receiver's bag, `(receiver rank, class, sender rank, send_count)`,
/// packed into one integer with the same order (32 + 16 + 32 + 48 bits; a sender would need
/// 2^48 messages to overflow its count field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BagKey(u128);

impl BagKey {
    pub(crate) fn new(receiver: u32, class: MessageClass, sender: SenderOrder, send_count: u64) -> BagKey {
        debug_assert!(send_count < 1 << 48, "send count beyond the 48-bit key field");
        BagKey(
            (u128::from(receiver) << 96)
                | (u128::from(class.0) << 80)
                | (u128::from(sender.0) << 48)
                | u128::from(send_count & ((1 << 48) - 1)),
        )
    }
}

/// A message waiting for delivery: its place in the receiver's bag and the envelope, complete
/// from the moment it is sent.
pub(crate) struct Pending<M> {
    pub(crate) bag_key: BagKey,
    pub(crate) envelope: Envelope<M>,
}

/// Messages not yet delivered.
pub(crate) struct MessageQueue<M> {
    /// Delayed messages due within the wheel's span of the current time.
    soon: TimingWheel<Pending<M>>,
    /// Later delayed messages: slab indices by delivery time.
    later: RadixQueue<u32>,
    slab: Vec<Option<Pending<M>>>,
    free: Vec<u32>,
    next_round: Vec<Pending<M>>,
    next_round_at: Instant,
    /// The earliest delayed delivery time, once known (forgotten when a time is drained).
    earliest: Option<u64>,
    due: Vec<Pending<M>>,
    due_slots: Vec<u32>,
}

impl<M> Default for MessageQueue<M> {
    fn default() -> Self {
        MessageQueue {
            soon: TimingWheel::default(),
            later: RadixQueue::default(),
            slab: Vec::new(),
            free: Vec::new(),
            next_round: Vec::new(),
            next_round_at: Instant::default(),
            earliest: None,
            due: Vec::new(),
            due_slots: Vec::new(),
        }
    }
}

impl<M> MessageQueue<M> {
    /// The earliest delivery instant.
    pub(crate) fn peek(&mut self) -> Option<Instant> {
        if !self.next_round.is_empty() {
            return Some(self.next_round_at);
        }
        self.earliest_delayed().map(|t| Instant::at(SimTime::from_micros(t)))
    }

    /// The earliest delivery time of a delayed message.
    fn earliest_delayed(&mut self) -> Option<u64> {
        if self.earliest.is_none() {
            self.earliest = match (self.soon.first_key(), self.later.min_key()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.earliest
    }

    /// How many messages are waiting.
    pub(crate) fn len(&self) -> usize {
        self.soon.len() + self.later.len() + self.next_round.len()
    }

    /// Queue a message due at `at`: either round 0 of a later time, or the round right after
    /// the current one (all zero-delay messages of a round share that instant).
    pub(crate) fn push(&mut self, pending: Pending<M>) {
        let at = Instant { time: pending.envelope.key.time, round: pending.envelope.round };
        if at.round > 0 {
            debug_assert!(self.next_round.is_empty() || self.next_round_at == at);
            self.next_round_at = at;
            self.next_round.push(pending);
            return;
        }
        let time = at.time.as_micros();
        if self.earliest.is_some_and(|t| time < t) {
            self.earliest = Some(time);
        }
        let Err(pending) = self.soon.push(time, pending) else { return };
        let index = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(pending);
                i
            }
            None => {
                self.slab.push(Some(pending));
                (self.slab.len() - 1) as u32
            }
        };
        self.later.push(time, index);
    }

    /// Move on to `at` with nothing due there: what [`MessageQueue::drain_due`] does when it
    /// has nothing to deliver.
    pub(crate) fn pass(&mut self, at: Instant) {
        debug_assert!(self.peek() != Some(at), "passing over messages due at {at:?}");
        if at.round == 0 {
            // Nothing is due before `at`, so the wheel may move on.
            self.soon.advance(at.time.as_micros());
        }
    }

    /// Hand every message due exactly at `at` to `deliver`, receiver by receiver, each
    /// receiver's messages in bag order.
    pub(crate) fn drain_due(&mut self, at: Instant, mut deliver: impl FnMut(Envelope<M>)) {
        if at.round > 0 {
            if self.next_round_at == at && !self.next_round.is_empty() {
                self.next_round.sort_unstable_by_key(|p| p.bag_key);
                self.next_round.drain(..).for_each(|p| deliver(p.envelope));
            }
            return;
        }
        let time = at.time.as_micros();
        if self.earliest_delayed() != Some(time) {
            self.pass(at);
            return;
        }
        self.earliest = None;
        self.soon.take(time, &mut self.due);
        if self.later.min_key() == Some(time) {
            self.later.drain_min(time, &mut self.due_slots);
            for &index in &self.due_slots {
                let pending = self.slab[index as usize].take().expect("a queued slot holds its message");
                self.free.push(index);
                self.due.push(pending);
            }
            self.due_slots.clear();
        }
        if self.due.len() > 1 {
            self.due.sort_unstable_by_key(|p| p.bag_key);
        }
        self.due.drain(..).for_each(|p| deliver(p.envelope));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::OrderKey;
    use crate::test_support::xorshift;

    fn at(t: u64, r: u32) -> Instant {
        Instant { time: SimTime::from_micros(t), round: r }
    }

    #[test]
    fn agenda_orders_by_instant_then_rank_and_reschedules_in_place() {
        let mut agenda = Agenda::new(&[2, 0, 1]);
        agenda.set(ActorId(0), Some(at(5, 0)));
        agenda.set(ActorId(1), Some(at(5, 0)));
        agenda.set(ActorId(2), Some(at(3, 1)));
        assert_eq!(agenda.peek(), Some(at(3, 1)));
        agenda.set(ActorId(2), Some(at(9, 0)));
        assert_eq!(agenda.get(ActorId(2)), Some(at(9, 0)));
        let mut due = Vec::new();
        agenda.for_each_at(at(5, 0), |a| due.push(a));
        due.sort();
        assert_eq!(due, vec![ActorId(0), ActorId(1)]);
        agenda.set(ActorId(0), None);
        agenda.set(ActorId(1), Some(at(9, 0)));
        due.clear();
        agenda.for_each_at(at(5, 0), |a| due.push(a));
        assert!(due.is_empty());
        assert_eq!(agenda.peek(), Some(at(9, 0)));
        agenda.set(ActorId(1), None);
        agenda.set(ActorId(2), None);
        assert_eq!(agenda.peek(), None);
        assert_eq!(agenda.get(ActorId(2)), None);
    }

    #[test]
    fn agenda_matches_a_sorted_reference_under_random_updates() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let n = 17;
        let ranks: Vec<u32> = (0..n).rev().collect();
        let mut agenda = Agenda::new(&ranks);
        let mut reference: Vec<Option<Instant>> = vec![None; n as usize];
        for _ in 0..5_000 {
            let a = (next() % n as u64) as usize;
            let at = (!next().is_multiple_of(4)).then(|| at(next() % 50, (next() % 3) as u32));
            agenda.set(ActorId(a as u32), at);
            reference[a] = at;
            let expected = reference
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (t, ranks[i])))
                .min()
                .map(|(t, _)| t);
            assert_eq!(agenda.peek(), expected);
            if let Some(first) = expected {
                let mut due = Vec::new();
                agenda.for_each_at(first, |a| due.push(a));
                due.sort();
                let mut want: Vec<ActorId> = (0..n as usize)
                    .filter(|&i| reference[i] == Some(first))
                    .map(|i| ActorId(i as u32))
                    .collect();
                want.sort();
                assert_eq!(due, want);
            }
        }
    }

    #[test]
    fn queue_hands_over_only_what_is_due_in_key_order() {
        let mut q = MessageQueue::default();
        let pending = |due: Instant, receiver, class, sender, send_count, payload| Pending {
            bag_key: BagKey::new(receiver, MessageClass(class), SenderOrder(sender), send_count),
            envelope: Envelope {
                key: OrderKey {
                    time: due.time,
                    class: MessageClass(class),
                    sender: SenderOrder(sender),
                    send_count,
                },
                round: due.round,
                sent_at: at(0, 0),
                sender: ActorId(0),
                to: ActorId(receiver),
                payload,
            },
        };
        q.push(pending(at(2, 0), 1, 0, 0, 0, 0));
        q.push(pending(at(1, 0), 1, 5, 0, 1, 1));
        q.push(pending(at(1, 0), 0, 9, 3, 0, 2));
        q.push(pending(at(1, 0), 1, 5, 0, 0, 3));
        q.push(pending(at(0, 1), 1, 1, 0, 0, 4));
        q.push(pending(at(0, 1), 0, 7, 0, 1, 5));
        assert_eq!(q.peek(), Some(at(0, 1)), "the next round comes first");
        let mut order = Vec::new();
        q.drain_due(at(0, 1), |e| order.push(e.payload));
        assert_eq!(order, vec![5, 4]);
        assert_eq!(q.peek(), Some(at(1, 0)));
        order.clear();
        q.drain_due(at(1, 0), |e| order.push(e.payload));
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.peek(), Some(at(2, 0)));
    }

    #[test]
    fn delayed_messages_are_delivered_at_their_time_in_bag_order_near_and_far() {
        // Delays inside the timing wheel, at its edge and far past it, so that one time's
        // messages can sit in both the wheel and the radix heap; checked against a reference.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut q: MessageQueue<u64> = MessageQueue::default();
        let mut reference: Vec<(u64, BagKey, u64)> = Vec::new();
        let mut now = 0u64;
        let mut send_count = 0u64;
        for step in 0..30_000u64 {
            let r = next();
            if !r.is_multiple_of(3) {
                let delay = match r % 11 {
                    0 => 3 * 512 + r % 4_000,
                    1 => 511 + r % 3,
                    2 => 1_024 - now % 512,
                    _ => 1 + r % 600,
                };
                let time = now + delay;
                send_count += 1;
                let (receiver, class, sender) = ((r >> 8) % 4, (r >> 16) % 3, (r >> 24) % 5);
                let bag_key = BagKey::new(
                    receiver as u32,
                    MessageClass(class as u16),
                    SenderOrder(sender as u32),
                    send_count,
                );
                q.push(Pending {
                    bag_key,
                    envelope: Envelope {
                        key: OrderKey {
                            time: SimTime::from_micros(time),
                            class: MessageClass(class as u16),
                            sender: SenderOrder(sender as u32),
                            send_count,
                        },
                        round: 0,
                        sent_at: at(now, 0),
                        sender: ActorId(sender as u32),
                        to: ActorId(receiver as u32),
                        payload: step,
                    },
                });
                reference.push((time, bag_key, step));
            } else if let Some(due) = q.peek() {
                let earliest = reference.iter().map(|&(t, _, _)| t).min();
                assert_eq!(Some(due.time.as_micros()), earliest, "step {step}");
                // Sometimes a round at an earlier time with nothing due moves the wheel on.
                if r.is_multiple_of(5) && due.time.as_micros() > now + 1 {
                    now += 1;
                    let mut none = Vec::new();
                    q.drain_due(at(now, 0), |e| none.push(e.payload));
                    assert!(none.is_empty(), "step {step}");
                    continue;
                }
                now = due.time.as_micros();
                let mut delivered = Vec::new();
                q.drain_due(due, |e| delivered.push(e.payload));
                let mut expected: Vec<(BagKey, u64)> =
                    reference.iter().filter(|&&(t, _, _)| t == now).map(|&(_, k, v)| (k, v)).collect();
                expected.sort_unstable();
                assert_eq!(delivered, expected.iter().map(|&(_, v)| v).collect::<Vec<_>>(), "step {step}");
                reference.retain(|&(t, _, _)| t != now);
            }
            assert_eq!(q.len(), reference.len(), "step {step}");
        }
    }

    #[test]
    fn bag_keys_order_like_their_fields() {
        let k = |r, c, s, n| BagKey::new(r, MessageClass(c), SenderOrder(s), n);
        assert!(k(0, 9, 9, 9) < k(1, 0, 0, 0));
        assert!(k(1, 0, 9, 9) < k(1, 1, 0, 0));
        assert!(k(1, 1, 0, 9) < k(1, 1, 1, 0));
        assert!(k(1, 1, 1, 0) < k(1, 1, 1, 1));
        assert!(
            k(u32::MAX, u16::MAX, u32::MAX, (1 << 48) - 2) < k(u32::MAX, u16::MAX, u32::MAX, (1 << 48) - 1)
        );
    }
}

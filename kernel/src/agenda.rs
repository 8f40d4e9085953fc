//! The two pending-event structures of the coordinator.
//!
//! - [`Agenda`]: each actor's next internal event, an indexed binary min-heap with one entry per
//!   actor at most, so rescheduling is `O(log actors)` and leaves nothing stale behind.
//! - [`MessageQueue`]: messages not yet delivered, a binary min-heap of small keys ordered by
//!   `(instant, receiver rank, class, sender rank, send_count)`, with the payloads kept aside in
//!   a slab so heap moves stay cheap. Popping everything due at one instant yields the bags
//!   receiver by receiver, each already sorted by [`crate::OrderKey`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::actor::ActorId;
use crate::message::{MessageClass, SenderOrder};
use crate::time::Instant;

const ABSENT: u32 = u32::MAX;

/// Next internal event per actor, ordered by `(instant, rank)`.
#[derive(Debug, Default)]
pub(crate) struct Agenda {
    heap: Vec<u32>,
    position: Vec<u32>,
    key: Vec<(Instant, u32)>,
}

impl Agenda {
    /// An agenda for actors with the given name ranks (indexed by `ActorId`), none scheduled.
    pub(crate) fn new(ranks: &[u32]) -> Agenda {
        Agenda {
            heap: Vec::with_capacity(ranks.len()),
            position: vec![ABSENT; ranks.len()],
            key: ranks.iter().map(|&r| (Instant::default(), r)).collect(),
        }
    }

    /// The earliest scheduled instant.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.heap.first().map(|&a| self.key[a as usize].0)
    }

    /// The scheduled instant of `actor`, if any.
    pub(crate) fn get(&self, actor: ActorId) -> Option<Instant> {
        (self.position[actor.index()] != ABSENT).then(|| self.key[actor.index()].0)
    }

    /// Remove and return the earliest actor if it is scheduled exactly at `at`.
    pub(crate) fn pop_at(&mut self, at: Instant) -> Option<ActorId> {
        let &top = self.heap.first()?;
        if self.key[top as usize].0 != at {
            return None;
        }
        self.remove(top);
        Some(ActorId(top))
    }

    /// Schedule `actor` at `at`, or unschedule it with `None`.
    pub(crate) fn set(&mut self, actor: ActorId, at: Option<Instant>) {
        let a = actor.0;
        match (self.position[a as usize] != ABSENT, at) {
            (false, None) => {}
            (true, None) => self.remove(a),
            (false, Some(at)) => {
                self.key[a as usize].0 = at;
                let i = self.heap.len();
                self.heap.push(a);
                self.position[a as usize] = i as u32;
                self.sift_up(i);
            }
            (true, Some(at)) => {
                let old = self.key[a as usize].0;
                self.key[a as usize].0 = at;
                let i = self.position[a as usize] as usize;
                if at < old {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
        }
    }

    fn remove(&mut self, a: u32) {
        let i = self.position[a as usize] as usize;
        let last = self.heap.len() - 1;
        self.swap(i, last);
        self.heap.pop();
        self.position[a as usize] = ABSENT;
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn less(&self, i: usize, j: usize) -> bool {
        self.key[self.heap[i] as usize] < self.key[self.heap[j] as usize]
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.position[self.heap[i] as usize] = i as u32;
        self.position[self.heap[j] as usize] = j as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let left = 2 * i + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.less(right, left) { right } else { left };
            if !self.less(child, i) {
                break;
            }
            self.swap(i, child);
            i = child;
        }
    }
}

/// Where a pending message goes in the queue: its delivery instant, then its place in the
/// receiver's bag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    pub(crate) at: Instant,
    pub(crate) receiver: u32,
    pub(crate) class: MessageClass,
    pub(crate) sender: SenderOrder,
    pub(crate) send_count: u64,
}

/// A message waiting for delivery, as stored in the queue.
pub(crate) struct Pending<M> {
    pub(crate) key: QueueKey,
    pub(crate) sent_at: Instant,
    pub(crate) sender: ActorId,
    pub(crate) to: ActorId,
    pub(crate) payload: M,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    key: QueueKey,
    index: u32,
}

/// Messages not yet delivered.
pub(crate) struct MessageQueue<M> {
    heap: BinaryHeap<Reverse<Slot>>,
    slab: Vec<Option<Pending<M>>>,
    free: Vec<u32>,
}

impl<M> Default for MessageQueue<M> {
    fn default() -> Self {
        MessageQueue { heap: BinaryHeap::new(), slab: Vec::new(), free: Vec::new() }
    }
}

impl<M> MessageQueue<M> {
    /// The earliest delivery instant.
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(s)| s.key.at)
    }

    /// How many messages are waiting.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Queue a message.
    pub(crate) fn push(&mut self, pending: Pending<M>) {
        let key = pending.key;
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
        self.heap.push(Reverse(Slot { key, index }));
    }

    /// Remove and return the next message if it is due exactly at `at`.
    pub(crate) fn pop_at(&mut self, at: Instant) -> Option<Pending<M>> {
        if self.heap.peek()?.0.key.at != at {
            return None;
        }
        let Reverse(slot) = self.heap.pop()?;
        self.free.push(slot.index);
        self.slab[slot.index as usize].take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimTime;

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
        assert_eq!(agenda.pop_at(at(5, 0)), Some(ActorId(1)), "rank 0 first");
        assert_eq!(agenda.pop_at(at(5, 0)), Some(ActorId(0)));
        assert_eq!(agenda.pop_at(at(5, 0)), None);
        agenda.set(ActorId(2), None);
        assert_eq!(agenda.peek(), None);
        assert_eq!(agenda.get(ActorId(2)), None);
    }

    #[test]
    fn agenda_matches_a_sorted_reference_under_random_updates() {
        // A small deterministic generator: this is a data-structure test, not a model draw.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = 17;
        let ranks: Vec<u32> = (0..n).rev().collect();
        let mut agenda = Agenda::new(&ranks);
        let mut reference: Vec<Option<Instant>> = vec![None; n as usize];
        for _ in 0..5_000 {
            let a = (next() % n as u64) as usize;
            let at = (next() % 4 != 0).then(|| at(next() % 50, (next() % 3) as u32));
            agenda.set(ActorId(a as u32), at);
            reference[a] = at;
            let expected = reference
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (t, ranks[i])))
                .min()
                .map(|(t, _)| t);
            assert_eq!(agenda.peek(), expected);
        }
    }

    #[test]
    fn queue_pops_only_what_is_due_in_key_order() {
        let mut q = MessageQueue::default();
        let key = |t, receiver, class, sender, send_count| QueueKey {
            at: at(t, 0),
            receiver,
            class: MessageClass(class),
            sender: SenderOrder(sender),
            send_count,
        };
        for (i, k) in
            [key(2, 1, 0, 0, 0), key(1, 1, 5, 0, 1), key(1, 0, 9, 3, 0), key(1, 1, 5, 0, 0)]
                .into_iter()
                .enumerate()
        {
            q.push(Pending {
                key: k,
                sent_at: at(0, 0),
                sender: ActorId(0),
                to: ActorId(k.receiver),
                payload: i,
            });
        }
        let order: Vec<usize> = std::iter::from_fn(|| q.pop_at(at(1, 0)).map(|p| p.payload)).collect();
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.peek(), Some(at(2, 0)));
    }
}

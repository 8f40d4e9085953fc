//! A timing wheel in front of the radix heap: the queue of delayed messages.
//!
//! Most delays are short against the wheel's span ([`SPAN`] µs: network hops, a few hundred
//! µs at most), so a message due less than a span after the last drained time goes straight to
//! the wheel's slot for its time (`time mod SPAN`), a bit in an occupancy bitmap marking the
//! slot used; later ones go to a [`RadixQueue`]. Every key in the wheel lies in
//! `[last drained, last drained + SPAN)` — it was pushed less than a span after a drained time
//! no later than the current one, and is not drained yet — so each slot holds one time only, and
//! the earliest wheel time is the first used slot from the current one on. Draining a time takes
//! its slot whole and whatever the radix heap holds at that time; no entry ever moves between
//! buckets, which the radix heap alone did up to once per bit of the delay.

use crate::radix::RadixQueue;

/// The wheel's span in µs, a power of two above the usual network delays.
const SPAN: u64 = 512;

/// Words of the occupancy bitmap.
const WORDS: usize = (SPAN / 64) as usize;

/// Entries `(key, value)` drained in key order; keys never go below the last drained one.
pub(crate) struct DelayQueue<V> {
    slots: Vec<Vec<V>>,
    occupied: [u64; WORDS],
    near: usize,
    far: RadixQueue<V>,
    last: u64,
    min: Option<u64>,
}

impl<V: Copy> Default for DelayQueue<V> {
    fn default() -> Self {
        DelayQueue {
            slots: (0..SPAN).map(|_| Vec::new()).collect(),
            occupied: [0; WORDS],
            near: 0,
            far: RadixQueue::default(),
            last: 0,
            min: None,
        }
    }
}

impl<V: Copy> DelayQueue<V> {
    /// How many entries are queued.
    pub(crate) fn len(&self) -> usize {
        self.near + self.far.len()
    }

    /// Queue `value` under `key`, which must not be below the last drained key.
    pub(crate) fn push(&mut self, key: u64, value: V) {
        debug_assert!(key >= self.last, "delay queue keys must not go backwards");
        if key - self.last < SPAN {
            let slot = (key % SPAN) as usize;
            self.slots[slot].push(value);
            self.occupied[slot / 64] |= 1 << (slot % 64);
            self.near += 1;
        } else {
            self.far.push(key, value);
        }
        if self.min.is_some_and(|m| key < m) {
            self.min = Some(key);
        }
    }

    /// The smallest queued key.
    pub(crate) fn min_key(&mut self) -> Option<u64> {
        if self.min.is_none() {
            let near = (self.near > 0).then(|| self.first_near_key());
            self.min = match (near, self.far.min_key()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.min
    }

    /// The earliest key in the wheel, which holds at least one.
    fn first_near_key(&self) -> u64 {
        let start = (self.last % SPAN) as usize;
        // Slots from the current one to the end of its word, then whole words cyclically, then
        // the start of the current word.
        let (word, bit) = (start / 64, start % 64);
        let mut offset = None;
        let head = self.occupied[word] & (u64::MAX << bit);
        if head != 0 {
            offset = Some(word * 64 + head.trailing_zeros() as usize);
        } else {
            for step in 1..=WORDS {
                let w = (word + step) % WORDS;
                let bits = if w == word { self.occupied[w] & !(u64::MAX << bit) } else { self.occupied[w] };
                if bits != 0 {
                    offset = Some(w * 64 + bits.trailing_zeros() as usize);
                    break;
                }
            }
        }
        let slot = offset.expect("the wheel holds an entry");
        self.last + ((slot + SPAN as usize - start) % SPAN as usize) as u64
    }

    /// Move every entry with the smallest key, which must be `key`, into `out` (in the order
    /// they happen to sit; callers sort what needs sorting).
    pub(crate) fn drain_min(&mut self, key: u64, out: &mut Vec<V>) {
        debug_assert_eq!(self.min_key(), Some(key));
        self.last = key;
        let slot = (key % SPAN) as usize;
        if self.occupied[slot / 64] & (1 << (slot % 64)) != 0 {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
            self.near -= self.slots[slot].len();
            if out.is_empty() {
                // Hand the slot's vector over whole; the empty one takes its place.
                std::mem::swap(out, &mut self.slots[slot]);
            } else {
                out.append(&mut self.slots[slot]);
            }
        }
        if self.far.min_key() == Some(key) {
            self.far.drain_min(key, out);
        }
        self.min = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::radix::check::{MonotoneQueue, drains_in_key_order};

    impl MonotoneQueue for DelayQueue<u32> {
        fn push(&mut self, key: u64, value: u32) {
            DelayQueue::push(self, key, value);
        }
        fn min_key(&mut self) -> Option<u64> {
            DelayQueue::min_key(self)
        }
        fn drain_min(&mut self, key: u64, out: &mut Vec<u32>) {
            DelayQueue::drain_min(self, key, out);
        }
        fn len(&self) -> usize {
            DelayQueue::len(self)
        }
    }

    #[test]
    fn drains_in_key_order_across_the_wheel_and_the_heap_under_interleaved_pushes() {
        // Delays within the wheel, at its edge and far beyond it; some due now.
        let delay = |r: u64| match r % 7 {
            0 => 0,
            1 => SPAN - 1 + r % 3,
            2 => 3 * SPAN + r % 5_000,
            _ => r % SPAN,
        };
        drains_in_key_order(&mut DelayQueue::default(), 40_000, delay);
    }

    #[test]
    fn the_earliest_wheel_time_is_found_past_the_end_of_the_wheel() {
        let mut queue = DelayQueue::default();
        let mut out = Vec::new();
        queue.push(SPAN - 3, 1u32);
        assert_eq!(queue.min_key(), Some(SPAN - 3));
        queue.drain_min(SPAN - 3, &mut out);
        // Slots behind the current one hold times of the next turn.
        queue.push(SPAN + 5, 2);
        queue.push(SPAN - 1, 3);
        queue.push(2 * SPAN - 4, 4);
        assert_eq!(queue.min_key(), Some(SPAN - 1));
        queue.drain_min(SPAN - 1, &mut out);
        assert_eq!(queue.min_key(), Some(SPAN + 5));
        queue.drain_min(SPAN + 5, &mut out);
        assert_eq!(queue.min_key(), Some(2 * SPAN - 4));
        queue.drain_min(2 * SPAN - 4, &mut out);
        assert_eq!((out, queue.min_key(), queue.len()), (vec![1, 3, 2, 4], None, 0));
    }
}

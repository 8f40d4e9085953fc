//! A monotone radix heap: the priority queue of messages delayed past the timing wheel's span
//! ([`crate::wheel`]).
//!
//! Discrete-event time never runs backwards, so every key pushed is at least the key last
//! drained. A radix heap exploits that: an entry lives in the bucket named by the highest bit in
//! which its key differs from the last drained key, so a push is one bit scan and draining the
//! minimum touches each entry `O(log key range)` times over its life, with no comparisons that
//! depend on the other entries. The buckets are plain vectors, reused for the whole run.

/// Entries `(key, value)` drained in key order; keys never go below the last drained one.
pub(crate) struct RadixQueue<V> {
    buckets: [Vec<(u64, V)>; 65],
    last: u64,
    len: usize,
    min: Option<u64>,
}

impl<V: Copy> Default for RadixQueue<V> {
    fn default() -> Self {
        RadixQueue { buckets: std::array::from_fn(|_| Vec::new()), last: 0, len: 0, min: None }
    }
}

impl<V: Copy> RadixQueue<V> {
    fn bucket(&self, key: u64) -> usize {
        (64 - (key ^ self.last).leading_zeros()) as usize
    }

    /// How many entries are queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Queue `value` under `key`, which must not be below the last drained key.
    pub(crate) fn push(&mut self, key: u64, value: V) {
        debug_assert!(key >= self.last, "radix queue keys must not go backwards");
        let bucket = self.bucket(key);
        self.buckets[bucket].push((key, value));
        self.len += 1;
        if self.min.is_some_and(|m| key < m) {
            self.min = Some(key);
        }
    }

    /// The smallest queued key.
    pub(crate) fn min_key(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        if self.min.is_none() {
            let first = self.buckets.iter().find(|b| !b.is_empty())?;
            self.min = first.iter().map(|&(k, _)| k).min();
        }
        self.min
    }

    /// Move every entry with the smallest key, which must be `key`, into `out` (in the order
    /// they happen to sit; callers sort what needs sorting).
    pub(crate) fn drain_min(&mut self, key: u64, out: &mut Vec<V>) {
        debug_assert_eq!(self.min_key(), Some(key));
        if key != self.last || self.buckets[0].is_empty() {
            // Redistribute the first non-empty bucket around the new minimum: every entry moves
            // to a strictly lower bucket, the minimum ones to bucket 0.
            let Some(index) = self.buckets.iter().position(|b| !b.is_empty()) else { return };
            self.last = key;
            if index > 0 {
                let mut moving = std::mem::take(&mut self.buckets[index]);
                for (k, v) in moving.drain(..) {
                    let bucket = self.bucket(k);
                    self.buckets[bucket].push((k, v));
                }
                // Keep the allocation for the next time this bucket fills.
                self.buckets[index] = moving;
            }
        }
        self.len -= self.buckets[0].len();
        out.extend(self.buckets[0].drain(..).map(|(_, v)| v));
        self.min = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::xorshift;

    #[test]
    fn drains_in_key_order_under_interleaved_pushes() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut queue = RadixQueue::default();
        let mut reference: Vec<(u64, u32)> = Vec::new();
        let mut now = 0u64;
        let mut out = Vec::new();
        for step in 0..20_000u32 {
            if !next().is_multiple_of(3) {
                let key = now + next() % 1_000;
                queue.push(key, step);
                reference.push((key, step));
            } else if let Some(min) = queue.min_key() {
                let expected_min = reference.iter().map(|&(k, _)| k).min().unwrap();
                assert_eq!(min, expected_min);
                now = min;
                out.clear();
                queue.drain_min(min, &mut out);
                out.sort_unstable();
                let mut expected: Vec<u32> =
                    reference.iter().filter(|&&(k, _)| k == min).map(|&(_, v)| v).collect();
                expected.sort_unstable();
                assert_eq!(out, expected);
                reference.retain(|&(k, _)| k != min);
            }
            assert_eq!(queue.len(), reference.len());
        }
    }
}

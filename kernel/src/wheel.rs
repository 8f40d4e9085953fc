//! A timing wheel: where messages due soon wait, each time's messages together.
//!
//! Most delays are short against the wheel's span ([`SPAN`] µs: network hops, a few hundred
//! µs at most). A value due less than a span after the wheel's current time goes straight to
//! the slot for its time (`time mod SPAN`), a bit in an occupancy bitmap marking the slot used;
//! the caller keeps later ones elsewhere (the message queue's radix heap). Every key in the
//! wheel lies in `[now, now + SPAN)` — it was pushed less than a span after a time no later
//! than the current one, and is not taken yet — so each slot holds one time only, and the
//! earliest time is the first used slot from the current one on. A time's values are taken
//! with their slot, whole; nothing moves between slots.

/// The wheel's span in µs, a power of two above the usual network delays.
const SPAN: u64 = 512;

/// Words of the occupancy bitmap.
const WORDS: usize = (SPAN / 64) as usize;

/// Values keyed by a time less than [`SPAN`] µs after the wheel's current time.
pub(crate) struct TimingWheel<V> {
    slots: Vec<Vec<V>>,
    occupied: [u64; WORDS],
    len: usize,
    now: u64,
}

impl<V> Default for TimingWheel<V> {
    fn default() -> Self {
        TimingWheel { slots: (0..SPAN).map(|_| Vec::new()).collect(), occupied: [0; WORDS], len: 0, now: 0 }
    }
}

impl<V> TimingWheel<V> {
    /// How many values are held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Move the current time to `now`, which must not be after any held key.
    pub(crate) fn advance(&mut self, now: u64) {
        debug_assert!(now >= self.now, "the wheel's time must not go backwards");
        debug_assert!(self.first_key().is_none_or(|first| first >= now), "no held key is before {now}");
        self.now = now;
    }

    /// Hold `value` under `key` if the key lies within the span from the current time (and
    /// not before it); otherwise hand the value back.
    pub(crate) fn push(&mut self, key: u64, value: V) -> Result<(), V> {
        debug_assert!(key >= self.now, "wheel keys must not go backwards");
        if key - self.now >= SPAN {
            return Err(value);
        }
        let slot = (key % SPAN) as usize;
        self.slots[slot].push(value);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
        Ok(())
    }

    /// The earliest held key.
    pub(crate) fn first_key(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let start = (self.now % SPAN) as usize;
        // Slots from the current one to the end of its word, then whole words cyclically, then
        // the start of the current word.
        let (word, bit) = (start / 64, start % 64);
        let head = self.occupied[word] & (u64::MAX << bit);
        let slot = if head != 0 {
            word * 64 + head.trailing_zeros() as usize
        } else {
            (1..=WORDS)
                .find_map(|step| {
                    let w = (word + step) % WORDS;
                    let bits =
                        if w == word { self.occupied[w] & !(u64::MAX << bit) } else { self.occupied[w] };
                    (bits != 0).then(|| w * 64 + bits.trailing_zeros() as usize)
                })
                .expect("a wheel holding values has a used slot")
        };
        Some(self.now + ((slot + SPAN as usize - start) % SPAN as usize) as u64)
    }

    /// Make `key`, which must not be after any held key, the current time, and move every
    /// value held under it to the end of `out` (in the order pushed). Its slot's bit says
    /// whether there are any: a held key in that slot is `key` plus whole spans, and less than
    /// a span after `key`.
    pub(crate) fn take(&mut self, key: u64, out: &mut Vec<V>) {
        self.advance(key);
        let slot = (key % SPAN) as usize;
        let bit = 1 << (slot % 64);
        if self.occupied[slot / 64] & bit == 0 {
            return;
        }
        self.occupied[slot / 64] &= !bit;
        self.len -= self.slots[slot].len();
        if out.is_empty() {
            // Hand the slot's vector over whole; the empty one takes its place.
            std::mem::swap(out, &mut self.slots[slot]);
        } else {
            out.append(&mut self.slots[slot]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_time_is_found_past_the_end_of_the_wheel_and_far_keys_are_handed_back() {
        let mut wheel = TimingWheel::default();
        let mut out = Vec::new();
        assert_eq!(wheel.push(SPAN - 3, 1u32), Ok(()));
        assert_eq!(wheel.push(SPAN, 9), Err(9), "a span or more ahead");
        assert_eq!(wheel.first_key(), Some(SPAN - 3));
        wheel.take(SPAN - 3, &mut out);
        // Slots behind the current one hold times of the next turn.
        for (key, value) in [(SPAN + 5, 2), (SPAN - 1, 3), (2 * SPAN - 4, 4), (SPAN + 5, 5)] {
            assert_eq!(wheel.push(key, value), Ok(()));
        }
        assert_eq!((wheel.first_key(), wheel.len()), (Some(SPAN - 1), 4));
        wheel.take(SPAN - 1, &mut out);
        wheel.advance(SPAN + 2);
        wheel.take(SPAN + 3, &mut out);
        assert_eq!(out.len(), 2, "nothing is held at a time whose slot is empty");
        assert_eq!(wheel.first_key(), Some(SPAN + 5));
        wheel.take(SPAN + 5, &mut out);
        assert_eq!(wheel.first_key(), Some(2 * SPAN - 4));
        wheel.take(2 * SPAN - 4, &mut out);
        assert_eq!((out, wheel.first_key(), wheel.len()), (vec![1, 3, 2, 5, 4], None, 0));
    }
}

//! The client's live requests, by the sequence numbers it hands them.

use std::collections::VecDeque;

/// Values under keys handed out in increasing order and removed in any order, kept in key
/// order: O(1) per operation where a `BTreeMap` walks its nodes.
///
/// It holds a slot for every key from the oldest value still held to the newest, so it is as
/// long as the number of keys handed out over the oldest value's life (a client's requests
/// arrived while its oldest live request lives).
#[derive(Debug)]
pub(super) struct Window<V> {
    /// The key of `slots[0]`.
    base: usize,
    slots: VecDeque<Option<V>>,
    held: usize,
}

impl<V> Default for Window<V> {
    fn default() -> Window<V> {
        Window { base: 0, slots: VecDeque::new(), held: 0 }
    }
}

impl<V> Window<V> {
    /// The key the next value pushed is held under.
    pub(super) fn next_key(&self) -> usize {
        self.base + self.slots.len()
    }

    /// Hold `value` under the next key, which is returned.
    pub(super) fn push(&mut self, value: V) -> usize {
        debug_assert!(self.slots.front().is_none_or(Option::is_some), "the oldest slot holds a value");
        self.slots.push_back(Some(value));
        self.held += 1;
        self.base + self.slots.len() - 1
    }

    /// The value under `key`.
    pub(super) fn get(&self, key: usize) -> Option<&V> {
        self.slots.get(key.checked_sub(self.base)?)?.as_ref()
    }

    /// The value under `key`, to change.
    pub(super) fn get_mut(&mut self, key: usize) -> Option<&mut V> {
        self.slots.get_mut(key.checked_sub(self.base)?)?.as_mut()
    }

    /// Take the value under `key` out.
    pub(super) fn remove(&mut self, key: usize) -> Option<V> {
        let value = self.slots.get_mut(key.checked_sub(self.base)?)?.take()?;
        self.held -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(value)
    }

    /// The values held, in key order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().flatten()
    }

    /// Take every value out, in key order.
    pub(super) fn take_all(&mut self) -> Vec<V> {
        self.base += self.slots.len();
        self.held = 0;
        self.slots.drain(..).flatten().collect()
    }

    /// How many values are held.
    pub(super) fn len(&self) -> usize {
        self.held
    }

    /// Whether no value is held.
    pub(super) fn is_empty(&self) -> bool {
        self.held == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::Window;

    proptest! {
        /// Keys come out as a counter hands them, and every answer is an ordered map's.
        #[test]
        fn answers_as_an_ordered_map_under_a_counter(operations in prop::collection::vec((0u8..3, 0usize..40), 0..300)) {
            let mut window = Window::default();
            let mut model = BTreeMap::new();
            let mut next = 0;
            for (operation, back) in operations {
                match operation {
                    0 => {
                        prop_assert_eq!(window.push(next), next);
                        model.insert(next, next);
                        next += 1;
                    }
                    1 => {
                        let key = next.saturating_sub(back);
                        prop_assert_eq!(window.remove(key), model.remove(&key));
                    }
                    _ => {
                        let key = next.saturating_sub(back);
                        prop_assert_eq!(window.get(key), model.get(&key));
                        prop_assert_eq!(window.get_mut(key).copied(), model.get(&key).copied());
                    }
                }
                prop_assert_eq!(window.len(), model.len());
                prop_assert_eq!(window.is_empty(), model.is_empty());
                prop_assert!(window.values().eq(model.values()));
            }
            prop_assert_eq!(window.take_all(), model.into_values().collect::<Vec<_>>());
            prop_assert!(window.is_empty());
        }
    }
}

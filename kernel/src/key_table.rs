//! A map from `u64` keys that can be looked up but never iterated, so a hash table is safe on a
//! simulation path.
//!
//! Iterating a hash table visits entries in an order its hashing decides, which DESIGN.md §1.2
//! forbids where it could decide anything. A [`KeyTable`] offers no iteration at all: only
//! insertion, lookup and removal by key, whose outcomes do not depend on the table's layout.
//! It costs O(1) per operation where a `BTreeMap` walks a few nodes, which matters on the
//! per-call paths (a client's calls, the router's destinations, an engine host's clients).

use std::fmt;

use hashbrown::HashMap;
use rustc_hash::FxBuildHasher;

/// A map from `u64` keys to `V` with no iteration (see the module doc).
#[derive(Clone)]
pub struct KeyTable<V> {
    entries: HashMap<u64, V, FxBuildHasher>,
}

impl<V> Default for KeyTable<V> {
    fn default() -> KeyTable<V> {
        KeyTable { entries: HashMap::with_hasher(FxBuildHasher) }
    }
}

impl<V> KeyTable<V> {
    /// An empty table.
    pub fn new() -> KeyTable<V> {
        KeyTable::default()
    }

    /// Put `value` under `key`; the value it replaces, if any.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        self.entries.insert(key, value)
    }

    /// The value under `key`.
    pub fn get(&self, key: u64) -> Option<&V> {
        self.entries.get(&key)
    }

    /// The value under `key`, to change.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.entries.get_mut(&key)
    }

    /// Whether a value is under `key`.
    pub fn contains_key(&self, key: u64) -> bool {
        self.entries.contains_key(&key)
    }

    /// Take the value under `key` out.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        self.entries.remove(&key)
    }

    /// How many keys hold a value.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key holds a value.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<V> fmt::Debug for KeyTable<V> {
    /// Only the size: listing the entries would show them in the table's order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyTable").field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::KeyTable;

    proptest! {
        /// Every operation answers as an ordered map does, whatever the keys (call keys put the
        /// client in the top bits and leave the low ones mostly zero).
        #[test]
        fn answers_as_an_ordered_map(operations in prop::collection::vec((0u8..4, 0u64..64, any::<u32>()), 0..400)) {
            let mut table = KeyTable::new();
            let mut model = BTreeMap::new();
            for (operation, small, value) in operations {
                let key = (small % 3) << 48 | (small / 3) << 16;
                match operation {
                    0 => prop_assert_eq!(table.insert(key, value), model.insert(key, value)),
                    1 => prop_assert_eq!(table.remove(key), model.remove(&key)),
                    2 => prop_assert_eq!(table.get(key), model.get(&key)),
                    _ => {
                        if let Some(v) = table.get_mut(key) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(&key) {
                            *v = v.wrapping_add(1);
                        }
                    }
                }
                prop_assert_eq!(table.len(), model.len());
                prop_assert_eq!(table.contains_key(key), model.contains_key(&key));
                prop_assert_eq!(table.is_empty(), model.is_empty());
            }
        }
    }
}

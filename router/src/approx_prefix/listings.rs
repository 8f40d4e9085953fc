//! The index's listings: which endpoints are listed under which block hash, one 16-byte entry
//! per (hash, endpoint) pair in an open-addressing table.
//!
//! Keys are XXH64 outputs, already uniform, so an entry's home slot is its hash's low bits, and
//! the entries of one hash (one per endpoint listed) lie in the probe run from that home. The
//! table is linear-probed and deletes by shifting later entries back, so it never holds
//! tombstones and a lookup ends at the first empty slot: one cache line per lookup in the usual
//! case, against two (control bytes and bucket) for a general-purpose map. It is never iterated
//! where a decision could see its order: an endpoint's listings are found by lookups, and
//! growing re-places entries by content.

/// Marks an empty slot (an endpoint key the router never uses: keys index its endpoint list).
const EMPTY: u32 = u32::MAX;

/// The fewest slots a table has.
const MIN_SLOTS: usize = 16;

/// One endpoint listed under one hash, with its LRU slot (`NO_SLOT` for a phantom).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Listing {
    /// The block hash.
    pub(super) hash: u64,
    /// The endpoint listed under it (`EMPTY` in an empty slot).
    pub(super) endpoint: u32,
    /// The slot of the hash in the endpoint's LRU, or none for a phantom listing.
    pub(super) lru_slot: u32,
}

const VACANT: Listing = Listing { hash: 0, endpoint: EMPTY, lru_slot: 0 };

/// (hash, endpoint) → LRU slot, with every endpoint listed under a hash found from the hash.
#[derive(Clone, Debug)]
pub(super) struct Listings {
    slots: Vec<Listing>,
    /// Occupied slots.
    len: usize,
}

impl Default for Listings {
    fn default() -> Listings {
        Listings { slots: vec![VACANT; MIN_SLOTS], len: 0 }
    }
}

impl Listings {
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask()
    }

    /// Where `(hash, endpoint)` is listed, if it is.
    fn position(&self, hash: u64, endpoint: u32) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(hash);
        loop {
            let slot = &self.slots[i];
            if slot.endpoint == EMPTY {
                return None;
            }
            if slot.hash == hash && slot.endpoint == endpoint {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The LRU slot `(hash, endpoint)` is listed with, if it is listed.
    pub(super) fn get(&self, hash: u64, endpoint: u32) -> Option<u32> {
        self.position(hash, endpoint).map(|i| self.slots[i].lru_slot)
    }

    /// The endpoints listed under `hash`, in no meaningful order.
    pub(super) fn endpoints(&self, hash: u64) -> impl Iterator<Item = u32> + '_ {
        let mask = self.mask();
        let mut i = self.home(hash);
        std::iter::from_fn(move || {
            loop {
                let slot = self.slots[i];
                if slot.endpoint == EMPTY {
                    return None;
                }
                i = (i + 1) & mask;
                if slot.hash == hash {
                    return Some(slot.endpoint);
                }
            }
        })
    }

    /// List `endpoint` under `hash` with `lru_slot`, replacing the slot it is listed with.
    pub(super) fn set(&mut self, hash: u64, endpoint: u32, lru_slot: u32) {
        match self.position(hash, endpoint) {
            Some(i) => self.slots[i].lru_slot = lru_slot,
            None => self.insert(hash, endpoint, lru_slot),
        }
    }

    /// List `endpoint` under `hash` with `lru_slot`, known not to be listed there (one probe
    /// run walked, not two).
    pub(super) fn insert(&mut self, hash: u64, endpoint: u32, lru_slot: u32) {
        debug_assert!(endpoint != EMPTY, "endpoint keys index the router's endpoints");
        debug_assert!(self.position(hash, endpoint).is_none(), "({hash}, {endpoint}) is listed already");
        // Grow at three quarters full, so probe runs stay short.
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.place(Listing { hash, endpoint, lru_slot });
        self.len += 1;
    }

    /// Put `listing` (not present) in the first empty slot of its probe run.
    fn place(&mut self, listing: Listing) {
        let mask = self.mask();
        let mut i = self.home(listing.hash);
        while self.slots[i].endpoint != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = listing;
    }

    fn grow(&mut self) {
        let doubled = vec![VACANT; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for listing in old.into_iter().filter(|l| l.endpoint != EMPTY) {
            self.place(listing);
        }
    }

    /// Unlist `endpoint` under `hash`, if listed: later entries of the probe run shift back into
    /// the gap when their home allows, so no lookup ever stops short of them.
    pub(super) fn remove(&mut self, hash: u64, endpoint: u32) {
        let Some(mut gap) = self.position(hash, endpoint) else { return };
        let mask = self.mask();
        let mut i = gap;
        loop {
            i = (i + 1) & mask;
            let slot = self.slots[i];
            if slot.endpoint == EMPTY {
                break;
            }
            // The entry at `i` may fill the gap unless its home lies cyclically in (gap, i].
            let home = self.home(slot.hash);
            let home_after_gap = (home.wrapping_sub(gap + 1) & mask) < (i.wrapping_sub(gap) & mask);
            if !home_after_gap {
                self.slots[gap] = slot;
                gap = i;
            }
        }
        self.slots[gap] = VACANT;
        self.len -= 1;
    }

    /// Start fetching the slot where `hash`'s listings begin.
    pub(super) fn prefetch(&self, hash: u64) {
        mem_prefetch::prefetch_write_data::<_, 3>(&self.slots[self.home(hash)]);
    }

    /// How many distinct hashes are listed (upstream's `len(hashToPods)`).
    #[cfg(test)]
    pub(super) fn distinct_hashes(&self) -> usize {
        let hashes: std::collections::BTreeSet<u64> =
            self.slots.iter().filter(|l| l.endpoint != EMPTY).map(|l| l.hash).collect();
        hashes.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sorted(listings: &Listings, hash: u64) -> Vec<u32> {
        let mut v: Vec<u32> = listings.endpoints(hash).collect();
        v.sort_unstable();
        v
    }

    /// Entries whose homes wrap past the table's end are found, and removing one shifts back
    /// only those whose home allows: a run of 15s and 31s (home 15 at 16 slots) spills into
    /// slots 0.., and an entry at home 0 placed after them stays reachable.
    #[test]
    fn runs_wrap_and_shift_back_by_home() {
        let mut l = Listings::default();
        for (hash, endpoint) in [(15, 0), (31, 0), (15, 1), (0, 2), (47, 3)] {
            l.set(hash, endpoint, endpoint * 10);
        }
        assert_eq!(sorted(&l, 15), [0, 1]);
        assert_eq!(l.get(0, 2), Some(20));
        l.remove(15, 0);
        assert_eq!(
            (sorted(&l, 15), l.get(31, 0), l.get(0, 2), l.get(47, 3)),
            (vec![1], Some(0), Some(20), Some(30))
        );
        l.remove(31, 0);
        l.remove(15, 1);
        assert_eq!((l.get(0, 2), l.get(47, 3), l.len), (Some(20), Some(30), 2));
        l.set(47, 3, 7);
        assert_eq!((l.get(47, 3), l.len), (Some(7), 2));
    }

    proptest! {
        /// Any sequence of sets and removals, with hashes that crowd a few homes (and wrap),
        /// leaves the listings a sorted map would hold, through growth.
        #[test]
        fn listings_match_a_map(
            ops in proptest::collection::vec((any::<bool>(), 0u64..40, 0u32..5, 0u32..100), 0..200)
        ) {
            let mut listings = Listings::default();
            let mut model = std::collections::BTreeMap::new();
            for (set, h, endpoint, lru_slot) in ops {
                // Hashes 15 apart from 16·k + 15: most share the last home of a small table.
                let hash = (h % 8) * 16 + if h < 20 { 15 } else { h };
                if set {
                    listings.set(hash, endpoint, lru_slot);
                    model.insert((hash, endpoint), lru_slot);
                } else {
                    listings.remove(hash, endpoint);
                    model.remove(&(hash, endpoint));
                }
                prop_assert_eq!(listings.len, model.len());
                for (&(hash, endpoint), &lru_slot) in &model {
                    prop_assert_eq!(listings.get(hash, endpoint), Some(lru_slot));
                    let want: Vec<u32> = model.keys().filter(|k| k.0 == hash).map(|k| k.1).collect();
                    prop_assert_eq!(sorted(&listings, hash), want);
                }
            }
        }
    }
}

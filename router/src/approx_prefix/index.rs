//! The approximate index: which endpoints were sent which block hashes, with one LRU per endpoint.
//!
//! Upstream: `approximateprefix/indexer.go` over `hashicorp/golang-lru/v2` v2.0.7. Upstream keeps
//! `hashToPods` (hash → set of pods) and, per pod, an LRU of hashes whose eviction callback drops
//! the pod from `hashToPods[hash]` (and the hash when its set empties). We fold both into one
//! table of listings: (hash, endpoint) → the slot of its entry in that endpoint's LRU, or no
//! slot for a *phantom* listing — an endpoint `hashToPods` lists although its LRU no longer holds
//! the hash. Phantoms arise from upstream's `Add` order ([Q]): every hash goes into the LRU first
//! (each insertion may evict the oldest entry) and into `hashToPods` only afterwards, so a hash
//! evicted during the same `Add` — a prompt with more blocks than the capacity — is listed again
//! without an LRU entry. Nothing removes a phantom except that hash being added to the endpoint
//! again and then evicted: `RemovePod` walks only the LRU, so phantoms outlive their endpoint's
//! removal.
//!
//! Lookups only: the listings are never iterated ([`super::listings`]), so their order cannot
//! reach a decision.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use super::listings::Listings;

/// No LRU slot: marks a phantom listing and the ends of an LRU's list.
const NO_SLOT: u32 = u32::MAX;
/// The most entries one endpoint's LRU holds (slots are `u32`; `NO_SLOT` is reserved).
const MAX_LRU_ENTRIES: usize = (u32::MAX - 1) as usize;

/// An entry of an endpoint's LRU: its hash and its neighbours in recency order.
#[derive(Clone, Copy, Debug)]
struct Node {
    hash: u64,
    newer: u32,
    older: u32,
}

/// One endpoint's LRU of hashes (golang-lru semantics): re-adding refreshes recency, adding to a
/// full LRU evicts the least recently added or refreshed hash. The capacity is fixed at creation.
#[derive(Clone, Debug)]
struct EndpointLru {
    capacity: usize,
    nodes: Vec<Node>,
    newest: u32,
    oldest: u32,
}

impl EndpointLru {
    fn new(capacity: NonZeroUsize) -> EndpointLru {
        EndpointLru {
            capacity: capacity.get().min(MAX_LRU_ENTRIES),
            nodes: Vec::new(),
            newest: NO_SLOT,
            oldest: NO_SLOT,
        }
    }

    fn unlink(&mut self, slot: u32) {
        let Node { newer, older, .. } = self.nodes[slot as usize];
        match newer {
            NO_SLOT => self.newest = older,
            n => self.nodes[n as usize].older = older,
        }
        match older {
            NO_SLOT => self.oldest = newer,
            o => self.nodes[o as usize].newer = newer,
        }
    }

    fn link_newest(&mut self, slot: u32) {
        let previous = self.newest;
        self.nodes[slot as usize].newer = NO_SLOT;
        self.nodes[slot as usize].older = previous;
        match previous {
            NO_SLOT => self.oldest = slot,
            p => self.nodes[p as usize].newer = slot,
        }
        self.newest = slot;
    }

    /// Make `slot` the most recent entry.
    fn refresh(&mut self, slot: u32) {
        if slot != self.newest {
            self.unlink(slot);
            self.link_newest(slot);
        }
    }

    /// Insert `hash` (not present) as the most recent entry; returns its slot and the hash it
    /// evicted, if the LRU was full.
    fn insert(&mut self, hash: u64) -> (u32, Option<u64>) {
        if self.nodes.len() >= self.capacity {
            let slot = self.oldest;
            let evicted = self.nodes[slot as usize].hash;
            self.unlink(slot);
            self.nodes[slot as usize].hash = hash;
            self.link_newest(slot);
            return (slot, Some(evicted));
        }
        let slot = self.nodes.len() as u32;
        self.nodes.push(Node { hash, newer: NO_SLOT, older: NO_SLOT });
        self.link_newest(slot);
        (slot, None)
    }

    /// The hashes from least to most recent.
    fn oldest_first(&self) -> impl Iterator<Item = u64> + '_ {
        let mut slot = self.oldest;
        std::iter::from_fn(move || {
            (slot != NO_SLOT).then(|| {
                let node = self.nodes[slot as usize];
                slot = node.newer;
                node.hash
            })
        })
    }
}

/// Hash → endpoints that were sent it, with a per-endpoint LRU bounding each endpoint's share.
#[derive(Clone, Debug, Default)]
pub struct PrefixIndex {
    listings: Listings,
    lrus: BTreeMap<u32, EndpointLru>,
}

impl PrefixIndex {
    /// Record that `endpoint` was sent `hashes` (one prompt's), as upstream's `indexer.Add`: the
    /// LRU is created with `capacity` if the endpoint has none yet, every hash is added to the LRU
    /// (refreshing or evicting), then every hash lists the endpoint — phantoms included.
    pub fn add(&mut self, endpoint: u32, capacity: NonZeroUsize, hashes: &[u64]) {
        let PrefixIndex { listings, lrus } = self;
        let lru = lrus.entry(endpoint).or_insert_with(|| EndpointLru::new(capacity));
        // Every hash's listings are looked up, and a full LRU's oldest hashes are unlisted as
        // they are evicted: start fetching those slots before the first is needed.
        for &hash in hashes {
            listings.prefetch(hash);
        }
        if lru.nodes.len() >= lru.capacity {
            for hash in lru.oldest_first().take(hashes.len()) {
                listings.prefetch(hash);
            }
        }
        for &hash in hashes {
            let listed = listings.get(hash, endpoint);
            if let Some(slot) = listed.filter(|&slot| slot != NO_SLOT) {
                lru.refresh(slot);
                continue;
            }
            // Not in the LRU, so the hash it evicts is another: the lookup above still holds.
            let (slot, evicted) = lru.insert(hash);
            if let Some(evicted) = evicted {
                listings.remove(evicted, endpoint);
            }
            match listed {
                Some(_) => listings.set(hash, endpoint, slot),
                None => listings.insert(hash, endpoint, slot),
            }
        }
        // A hash of this add is evicted by it only after every other entry of the full LRU was
        // refreshed or inserted after it, that is by at least `capacity` later hashes of the add:
        // with no more hashes than that, every one is still listed and there is no phantom.
        if hashes.len() <= lru.capacity {
            return;
        }
        for &hash in hashes {
            if listings.get(hash, endpoint).is_none() {
                listings.insert(hash, endpoint, NO_SLOT);
            }
        }
    }

    /// The endpoints listed under `hash` (phantoms included), in no meaningful order.
    pub fn holders(&self, hash: u64) -> impl Iterator<Item = u32> + '_ {
        self.listings.endpoints(hash)
    }

    /// Drop `endpoint`'s LRU and unlist it from every hash its LRU holds (upstream's `RemovePod`;
    /// its phantom listings stay).
    pub fn remove_endpoint(&mut self, endpoint: u32) {
        let Some(lru) = self.lrus.remove(&endpoint) else { return };
        for hash in lru.oldest_first() {
            self.listings.remove(hash, endpoint);
        }
    }

    /// The endpoints that have an LRU, ascending.
    pub fn endpoints(&self) -> impl Iterator<Item = u32> + '_ {
        self.lrus.keys().copied()
    }

    /// How many hashes `endpoint`'s LRU holds (`None` without an LRU).
    pub fn block_count(&self, endpoint: u32) -> Option<usize> {
        self.lrus.get(&endpoint).map(|lru| lru.nodes.len())
    }

    /// The capacity `endpoint`'s LRU was created with (`None` without an LRU).
    #[cfg(test)]
    pub(super) fn capacity(&self, endpoint: u32) -> Option<usize> {
        self.lrus.get(&endpoint).map(|lru| lru.capacity)
    }

    /// `endpoint`'s hashes from least to most recent.
    #[cfg(test)]
    fn lru_order(&self, endpoint: u32) -> Vec<u64> {
        self.lrus.get(&endpoint).map(|lru| lru.oldest_first().collect()).unwrap_or_default()
    }

    /// How many hashes list at least one endpoint (upstream's `len(hashToPods)`).
    #[cfg(test)]
    fn listed_hashes(&self) -> usize {
        self.listings.distinct_hashes()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cap(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    fn listed(index: &PrefixIndex, hash: u64) -> Vec<u32> {
        let mut v: Vec<u32> = index.holders(hash).collect();
        v.sort_unstable();
        v
    }

    /// upstream: approximateprefix/indexer_test.go::TestIndexer_AddAndGet (the server's 2 GPU
    /// blocks win over the indexer default of 3; here the caller passes the resolved capacity)
    #[test]
    fn indexer_add_and_get() {
        let mut index = PrefixIndex::default();
        let server = 1;
        index.add(server, cap(2), &[1]);
        assert_eq!(index.block_count(server), Some(1));
        assert_eq!(listed(&index, 1), vec![server]);
        index.add(server, cap(2), &[2]);
        assert_eq!(index.block_count(server), Some(2));
        index.add(server, cap(2), &[3]);
        assert_eq!(index.block_count(server), Some(2));
        assert!(listed(&index, 4).is_empty());
        // Beyond upstream's assertions: the oldest hash went, the others stayed.
        assert!(listed(&index, 1).is_empty());
        assert_eq!(index.lru_order(server), vec![2, 3]);
    }

    /// upstream: approximateprefix/indexer_test.go::TestIndexer_RemovePodAndEviction (servers
    /// without GPU blocks get the indexer's default size, 10)
    #[test]
    fn indexer_remove_pod_and_eviction() {
        const SIZE: u64 = 10;
        let mut index = PrefixIndex::default();
        let (server1, server2) = (1, 2);
        for h in 0..SIZE {
            index.add(server1, cap(10), &[h]);
            index.add(server2, cap(10), &[h]);
        }
        assert_eq!(index.block_count(server1), Some(10));
        assert_eq!(index.block_count(server2), Some(10));
        for h in 0..SIZE {
            assert_eq!(listed(&index, h), vec![server1, server2]);
        }
        index.add(server1, cap(10), &[SIZE]);
        assert_eq!(index.block_count(server1), Some(10));
        assert_eq!(listed(&index, 0), vec![server2], "server1 evicted hash 0, server2 still holds it");
        index.remove_endpoint(server2);
        assert!(listed(&index, 0).is_empty(), "hash 0 has no pods after eviction and removal");
        for h in 1..=SIZE {
            assert_eq!(listed(&index, h), vec![server1], "hash {h}");
        }
        assert_eq!(index.listed_hashes(), 10);
        assert_eq!(index.endpoints().collect::<Vec<_>>(), vec![server1]);
    }

    /// upstream: approximateprefix/indexer_test.go::TestIndexer_ConcurrentAddRemovePod (its two
    /// interleavings, run in order: once the pod has no LRU, no hash lists it)
    #[test]
    fn indexer_add_remove_pod_in_either_order() {
        let mut index = PrefixIndex::default();
        index.add(1, cap(10), &[1, 2, 3]);
        index.remove_endpoint(1);
        assert_eq!(index.block_count(1), None);
        assert_eq!(index.listed_hashes(), 0);
        let mut index = PrefixIndex::default();
        index.remove_endpoint(1);
        index.add(1, cap(10), &[1, 2, 3]);
        assert_eq!(index.block_count(1), Some(3));
        assert_eq!(listed(&index, 2), vec![1]);
    }

    /// Eviction order is least recently *added or refreshed*: re-adding moves a hash to the front.
    #[test]
    fn lru_refresh_changes_the_eviction_victim() {
        let mut index = PrefixIndex::default();
        index.add(7, cap(3), &[10, 20, 30]);
        assert_eq!(index.lru_order(7), vec![10, 20, 30]);
        index.add(7, cap(3), &[10]);
        assert_eq!(index.lru_order(7), vec![20, 30, 10]);
        index.add(7, cap(3), &[40]);
        assert_eq!(index.lru_order(7), vec![30, 10, 40]);
        assert!(listed(&index, 20).is_empty());
        assert_eq!(listed(&index, 10), vec![7]);
        index.add(7, cap(3), &[50, 60]);
        assert_eq!(index.lru_order(7), vec![40, 50, 60]);
        assert!(listed(&index, 30).is_empty() && listed(&index, 10).is_empty());
    }

    /// The capacity is fixed when the LRU is created; later adds' capacities are ignored, and a
    /// removed endpoint gets a fresh LRU with the capacity of its next add.
    #[test]
    fn capacity_is_fixed_at_creation() {
        let mut index = PrefixIndex::default();
        index.add(3, cap(2), &[1]);
        index.add(3, cap(100), &[2, 3]);
        assert_eq!(index.capacity(3), Some(2));
        assert_eq!(index.lru_order(3), vec![2, 3]);
        index.remove_endpoint(3);
        assert_eq!(index.block_count(3), None);
        index.add(3, cap(100), &[4]);
        assert_eq!(index.capacity(3), Some(100));
    }

    /// [Q] One add with more hashes than the capacity: the LRU keeps the last `capacity`, but
    /// every hash of the add stays listed (phantoms), and the phantoms survive endpoint removal.
    #[test]
    fn one_add_beyond_capacity_leaves_phantoms_that_outlive_removal() {
        let mut index = PrefixIndex::default();
        index.add(5, cap(2), &[1, 2, 3, 4]);
        assert_eq!(index.lru_order(5), vec![3, 4]);
        for h in 1..=4 {
            assert_eq!(listed(&index, h), vec![5], "hash {h} is listed");
        }
        // A later add evicts 3 properly; phantoms 1 and 2 stay.
        index.add(5, cap(2), &[9]);
        assert!(listed(&index, 3).is_empty());
        assert_eq!(listed(&index, 1), vec![5]);
        // Removal walks the LRU only.
        index.remove_endpoint(5);
        assert!(listed(&index, 4).is_empty() && listed(&index, 9).is_empty());
        assert_eq!(listed(&index, 1), vec![5]);
        assert_eq!(listed(&index, 2), vec![5]);
        assert_eq!(index.listed_hashes(), 2);
    }

    /// A phantom hash added again gets a real LRU entry, and is then evicted normally.
    #[test]
    fn a_phantom_added_again_becomes_real() {
        let mut index = PrefixIndex::default();
        index.add(5, cap(2), &[1, 2, 3]);
        assert_eq!(index.lru_order(5), vec![2, 3]);
        index.add(5, cap(2), &[1]);
        assert_eq!(index.lru_order(5), vec![3, 1]);
        assert!(listed(&index, 2).is_empty(), "2 was evicted by the re-added 1");
        index.add(5, cap(2), &[7, 8]);
        assert!(listed(&index, 1).is_empty(), "1 is real now, so its eviction unlists it");
    }

    /// An eviction unlists only the evicting endpoint.
    #[test]
    fn eviction_is_per_endpoint() {
        let mut index = PrefixIndex::default();
        index.add(1, cap(1), &[100]);
        index.add(2, cap(1), &[100]);
        index.add(1, cap(1), &[200]);
        assert_eq!(listed(&index, 100), vec![2]);
        assert_eq!(listed(&index, 200), vec![1]);
    }

    /// A reference model of upstream's two structures, operation by operation.
    #[derive(Default)]
    struct Model {
        hash_to_pods: BTreeMap<u64, std::collections::BTreeSet<u32>>,
        lrus: BTreeMap<u32, (usize, Vec<u64>)>,
    }

    impl Model {
        fn evict(&mut self, pod: u32, hash: u64) {
            if let Some(set) = self.hash_to_pods.get_mut(&hash) {
                set.remove(&pod);
                if set.is_empty() {
                    self.hash_to_pods.remove(&hash);
                }
            }
        }

        fn add(&mut self, pod: u32, capacity: usize, hashes: &[u64]) {
            let lru = &mut self.lrus.entry(pod).or_insert_with(|| (capacity, Vec::new()));
            let capacity = lru.0;
            let mut evicted = Vec::new();
            for &h in hashes {
                let order = &mut lru.1;
                if let Some(i) = order.iter().position(|&x| x == h) {
                    order.remove(i);
                    order.push(h);
                    continue;
                }
                order.push(h);
                if order.len() > capacity {
                    evicted.push(order.remove(0));
                }
            }
            for h in evicted {
                self.evict(pod, h);
            }
            for &h in hashes {
                self.hash_to_pods.entry(h).or_default().insert(pod);
            }
        }

        fn remove(&mut self, pod: u32) {
            if let Some((_, order)) = self.lrus.remove(&pod) {
                for h in order {
                    self.evict(pod, h);
                }
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u32, usize, Vec<u64>),
        Remove(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u32..4, 1usize..5, proptest::collection::vec(0u64..12, 0..7)).prop_map(|(e, c, h)| Op::Add(e, c, h)),
            1 => (0u32..4).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Whatever the sequence of adds and removals, the index lists exactly what upstream's
        /// hashToPods would and each LRU holds upstream's hashes in upstream's order. (The model
        /// applies one add's evictions after its LRU loop, which is exact: that loop never reads
        /// hashToPods.)
        #[test]
        fn index_matches_upstreams_structures(ops in proptest::collection::vec(op(), 0..40)) {
            let mut index = PrefixIndex::default();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Add(e, c, hashes) => {
                        index.add(e, cap(c), &hashes);
                        model.add(e, c, &hashes);
                    }
                    Op::Remove(e) => {
                        index.remove_endpoint(e);
                        model.remove(e);
                    }
                }
                for h in 0..12 {
                    let want: Vec<u32> = model.hash_to_pods.get(&h).map(|s| s.iter().copied().collect()).unwrap_or_default();
                    prop_assert_eq!(listed(&index, h), want, "hash {}", h);
                }
                prop_assert_eq!(index.listed_hashes(), model.hash_to_pods.len());
                for (e, (_, order)) in &model.lrus {
                    prop_assert_eq!(&index.lru_order(*e), order);
                }
                prop_assert_eq!(index.endpoints().collect::<Vec<_>>(), model.lrus.keys().copied().collect::<Vec<_>>());
            }
        }
    }
}

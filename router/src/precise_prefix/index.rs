//! The KV-block index: which endpoints hold each request key, on which medium.
//!
//! Upstream: `pkg/kvcache/kvblock/in_memory.go` (`InMemoryIndex`) and `index.go`
//! (`engineToRequestMapping`), over `hashicorp/golang-lru/v2`. Two LRUs of `size` entries each:
//! `data`, request key → a small LRU of pod entries (`podCacheSize` of them, golang-lru's `Add`
//! refreshing a present entry), and `engineToRequestKeys`, engine key → the request keys it
//! stands for. Recency follows upstream's calls exactly: `Lookup`, `Add`, `GetRequestKey` and
//! `Evict` go through `Get` (which refreshes), `Clear` scans with `Peek` (which does not) and
//! refreshes only the keys it edits and keeps. The maps are only looked up, never iterated; the
//! one scan (`Clear`) walks the recency list, oldest first, as golang-lru's `Keys` does.
//!
//! Where upstream iterates a Go map — `Add` stores the engine→request mappings in map order,
//! which only matters once the mapping LRU is full — we store them in engine-key order.

use std::hash::BuildHasherDefault;

use hashbrown::HashMap;
use smallvec::SmallVec;

pub(crate) use crate::identity_hasher::IdentityHasher;

const NONE: u32 = u32::MAX;

/// One endpoint's copy of a block on one medium (upstream's `PodEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodEntry {
    /// The endpoint's key.
    pub endpoint: u32,
    /// The medium, as an index into the producer's tier names.
    pub tier: u16,
}

type KeyMap = HashMap<u64, u32, BuildHasherDefault<IdentityHasher>>;

#[derive(Clone, Debug)]
struct Node<V> {
    key: u64,
    value: V,
    newer: u32,
    older: u32,
}

/// golang-lru's `Cache` over `u64` keys: a slab of nodes on a recency list, freed slots reused.
#[derive(Clone, Debug)]
struct Lru<V> {
    capacity: usize,
    map: KeyMap,
    nodes: Vec<Node<V>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
}

impl<V: Default> Lru<V> {
    fn new(capacity: usize) -> Lru<V> {
        Lru {
            capacity,
            map: KeyMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            newest: NONE,
            oldest: NONE,
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn unlink(&mut self, slot: u32) {
        let (newer, older) = (self.nodes[slot as usize].newer, self.nodes[slot as usize].older);
        if newer == NONE {
            self.newest = older;
        } else {
            self.nodes[newer as usize].older = older;
        }
        if older == NONE {
            self.oldest = newer;
        } else {
            self.nodes[older as usize].newer = newer;
        }
    }

    fn push_newest(&mut self, slot: u32) {
        self.nodes[slot as usize].older = self.newest;
        self.nodes[slot as usize].newer = NONE;
        if self.newest == NONE {
            self.oldest = slot;
        } else {
            self.nodes[self.newest as usize].newer = slot;
        }
        self.newest = slot;
    }

    /// `Get`: the value, refreshed.
    fn get(&mut self, key: u64) -> Option<&mut V> {
        let slot = *self.map.get(&key)?;
        if self.newest != slot {
            self.unlink(slot);
            self.push_newest(slot);
        }
        Some(&mut self.nodes[slot as usize].value)
    }

    /// `Peek`: the value, recency untouched.
    fn peek(&self, key: u64) -> Option<&V> {
        self.map.get(&key).map(|&slot| &self.nodes[slot as usize].value)
    }

    /// The value under `key`, created empty as the newest entry if absent (evicting the oldest
    /// when full), refreshed if present.
    fn get_or_insert(&mut self, key: u64) -> &mut V {
        if self.map.contains_key(&key) {
            return self.get(key).expect("present");
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot as usize].key = key;
                slot
            }
            None => {
                self.nodes.push(Node { key, value: V::default(), newer: NONE, older: NONE });
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(key, slot);
        self.push_newest(slot);
        if self.map.len() > self.capacity {
            let oldest = self.nodes[self.oldest as usize].key;
            self.remove(oldest);
        }
        &mut self.nodes[slot as usize].value
    }

    /// `Remove`.
    fn remove(&mut self, key: u64) {
        let Some(slot) = self.map.remove(&key) else { return };
        self.unlink(slot);
        self.nodes[slot as usize].value = V::default();
        self.free.push(slot);
    }

    /// Keys from the least to the most recently used (golang-lru's `Keys`).
    fn keys_oldest_first(&self, out: &mut Vec<u64>) {
        out.clear();
        let mut at = self.oldest;
        while at != NONE {
            out.push(self.nodes[at as usize].key);
            at = self.nodes[at as usize].newer;
        }
    }
}

/// A key's pod entries, least recently added first (a golang-lru of `podCacheSize` entries).
type PodCache = SmallVec<[PodEntry; 4]>;

/// The in-memory KV-block index.
#[derive(Clone, Debug)]
pub struct KvBlockIndex {
    data: Lru<PodCache>,
    engine_to_request: Lru<SmallVec<[u64; 2]>>,
    pod_cache_size: usize,
    scan: Vec<u64>,
}

impl KvBlockIndex {
    /// An empty index of at most `size` keys (each map), `pod_cache_size` entries per key.
    pub fn new(size: usize, pod_cache_size: usize) -> KvBlockIndex {
        KvBlockIndex {
            data: Lru::new(size),
            engine_to_request: Lru::new(size),
            pod_cache_size,
            scan: Vec::new(),
        }
    }

    /// `Lookup`: for each of `keys`, the entries of candidate endpoints (`is_candidate[e]`) are
    /// appended to `entries` and its end offset to `ends`. A key absent from the index has none
    /// and does not stop the walk; a key present with no entry stops it (the rest get none).
    pub fn lookup(
        &mut self,
        keys: &[u64],
        is_candidate: &[bool],
        entries: &mut Vec<PodEntry>,
        ends: &mut Vec<usize>,
    ) {
        entries.clear();
        ends.clear();
        let mut broken = false;
        for &key in keys {
            if !broken && let Some(pods) = self.data.get(key) {
                if pods.is_empty() {
                    broken = true;
                } else {
                    entries.extend(
                        pods.iter()
                            .filter(|e| is_candidate.get(e.endpoint as usize).copied().unwrap_or(false)),
                    );
                }
            }
            ends.push(entries.len());
        }
    }

    /// `Add`: `entry` under every request key, and (when given) each engine key mapped to its
    /// share of the request keys, proportionally when the counts differ.
    pub fn add(&mut self, engine_keys: Option<&[u64]>, request_keys: &[u64], entry: PodEntry) {
        if request_keys.is_empty() {
            return;
        }
        if let Some(engine_keys) = engine_keys.filter(|k| !k.is_empty()) {
            let n = engine_keys.len().max(request_keys.len());
            let mut i = 0;
            while i < n {
                let ek = engine_keys[i * engine_keys.len() / n];
                let mapped = self.engine_to_request.get_or_insert(ek);
                mapped.clear();
                while i < n && engine_keys[i * engine_keys.len() / n] == ek {
                    mapped.push(request_keys[i * request_keys.len() / n]);
                    i += 1;
                }
            }
        }
        let cap = self.pod_cache_size;
        for &key in request_keys {
            let pods = self.data.get_or_insert(key);
            if let Some(at) = pods.iter().position(|e| *e == entry) {
                pods.remove(at);
            }
            pods.push(entry);
            if pods.len() > cap {
                pods.remove(0);
            }
        }
    }

    /// `GetRequestKey`: the last request key `engine_key` stands for.
    pub fn request_key(&mut self, engine_key: u64) -> Option<u64> {
        self.engine_to_request.get(engine_key).and_then(|keys| keys.last().copied())
    }

    /// `Evict(engineKey, EngineKey, [entry])`: drop `entry` from every request key the engine key
    /// stands for (a key left with none leaves the index), then the mapping once none of them
    /// holds anything.
    pub fn evict_engine_key(&mut self, engine_key: u64, entry: PodEntry) {
        let Some(mapped) = self.engine_to_request.get(engine_key) else { return };
        let mapped = mapped.clone();
        for &key in &mapped {
            self.evict_from(key, entry);
        }
        // Upstream checks with `Get`, refreshing each key up to the first that still holds one.
        let all_empty = !mapped.iter().any(|&k| self.data.get(k).is_some_and(|p| !p.is_empty()));
        if all_empty {
            self.engine_to_request.remove(engine_key);
        }
    }

    fn evict_from(&mut self, key: u64, entry: PodEntry) {
        let Some(pods) = self.data.get(key) else { return };
        pods.retain(|e| *e != entry);
        if pods.is_empty() {
            self.data.remove(key);
        }
    }

    /// `Clear`: every entry of `endpoint`, on every medium; engine mappings stay.
    pub fn clear(&mut self, endpoint: u32) {
        let mut scan = std::mem::take(&mut self.scan);
        self.data.keys_oldest_first(&mut scan);
        for &key in &scan {
            if self.data.peek(key).is_some_and(|p| p.iter().any(|e| e.endpoint == endpoint)) {
                let pods = self.data.get(key).expect("present");
                pods.retain(|e| e.endpoint != endpoint);
                if pods.is_empty() {
                    self.data.remove(key);
                }
            }
        }
        self.scan = scan;
    }

    /// The entries under a request key, least recently added first (for inspection; recency
    /// untouched).
    pub fn entries(&self, request_key: u64) -> &[PodEntry] {
        self.data.peek(request_key).map_or(&[], |p| p.as_slice())
    }

    /// The request keys an engine key stands for (for inspection; recency untouched).
    pub fn mapped(&self, engine_key: u64) -> &[u64] {
        self.engine_to_request.peek(engine_key).map_or(&[], |k| k.as_slice())
    }

    /// How many request keys the index holds.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether it holds no request key.
    pub fn is_empty(&self) -> bool {
        self.data.len() == 0
    }
}

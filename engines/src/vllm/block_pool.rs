//! vLLM's block pool: numbered KV blocks, the free queue, and the prefix cache's hash map.
//!
//! As in vLLM 0.15.1 (`v1/core/block_pool.py`, `kv_cache_utils.py`): `num_gpu_blocks` blocks
//! with ids `0..N`; block 0 is taken at start as the *null block* and never freed, so `N − 1`
//! are usable. Free blocks form a doubly linked queue, initially in id order. Allocation pops
//! from the **head**, and a popped block that still carries a hash is evicted from the cache
//! (a `BlockRemoved` event). Freeing appends every block whose reference count reaches zero to
//! the **tail**, in the order given (callers pass a request's blocks last first), hashed or not,
//! so the least recently freed block is reused first and a freed block stays hit-able until it
//! is reused. A prefix hit on a free block takes it out of the middle of the queue. Identical
//! content is not deduplicated: the cache maps a hash to every block holding it, in insertion
//! order, and a lookup returns the first.

use std::collections::BTreeMap;

use super::block_hash::{BlockHash, event_value};

/// A block's id in the pool.
pub type BlockId = u32;

const NONE: u32 = u32::MAX;

/// A KV-cache event, as vLLM publishes them (hash values are the events' 64-bit form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Full blocks were cached: their hashes, their predecessor's hash (none at a request's
    /// first block), and the index of the first block in its request with the request's key.
    BlockStored {
        /// The caching request's key.
        request: u64,
        /// Index of the first block within the request.
        first_block: u32,
        /// Hashes of the blocks, in order.
        hashes: Vec<u64>,
        /// Hash of the block before the first, if any.
        parent: Option<u64>,
    },
    /// A cached block was evicted on reuse.
    BlockRemoved {
        /// Its hash.
        hash: u64,
    },
}

/// The pool of KV blocks of one instance.
#[derive(Clone, Debug)]
pub struct BlockPool {
    ref_count: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    free: u32,
    /// Cached blocks by the first 16 bytes of their hash (cheaper to compare than all 32), in
    /// the order they were cached; lookups confirm the full hash in `hash`.
    cached: BTreeMap<u128, Vec<BlockId>>,
    caching: bool,
    events: Vec<KvEvent>,
    record_events: bool,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (at least 2: the null block and one usable block), with
    /// prefix caching on or off.
    pub fn new(num_blocks: u32, caching: bool) -> BlockPool {
        assert!(num_blocks >= 2, "a block pool needs the null block and at least one usable block");
        let n = num_blocks as usize;
        let mut pool = BlockPool {
            ref_count: vec![0; n],
            hash: vec![None; n],
            prev: vec![NONE; n],
            next: vec![NONE; n],
            head: NONE,
            tail: NONE,
            free: 0,
            cached: BTreeMap::new(),
            caching,
            events: Vec::new(),
            record_events: caching,
        };
        for id in 0..num_blocks {
            pool.push_tail(id);
        }
        let null = pool.pop_head();
        debug_assert_eq!(null, Some(0));
        pool.ref_count[0] = 1;
        pool
    }

    /// All blocks, the null block included.
    pub fn num_blocks(&self) -> u32 {
        self.ref_count.len() as u32
    }

    /// Blocks in the free queue (cached ones included).
    pub fn num_free(&self) -> u32 {
        self.free
    }

    /// Whether prefix caching is on.
    pub fn caching(&self) -> bool {
        self.caching
    }

    /// vLLM's `kv_cache_usage`: `1 − free / (N − 1)`, the null block excluded.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.free) / f64::from(self.num_blocks() - 1)
    }

    /// Reference count of a block (the null block counts 1).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.ref_count[id as usize]
    }

    /// Take `count` blocks from the head of the free queue (evicting the hashes they carry),
    /// appending them to `into`. The caller has checked that enough are free.
    pub fn get_new_blocks(&mut self, count: u32, into: &mut Vec<BlockId>) {
        assert!(count <= self.free, "allocating {count} blocks with {} free", self.free);
        let start = into.len();
        for _ in 0..count {
            into.push(self.pop_head().expect("free count says a block is there"));
        }
        for &id in &into[start..] {
            if self.caching {
                self.evict(id);
            }
            self.ref_count[id as usize] = 1;
        }
    }

    /// The first block cached under `hash`, if any.
    pub fn get_cached_block(&self, hash: &BlockHash) -> Option<BlockId> {
        let blocks = self.cached.get(&index(hash))?;
        blocks.iter().copied().find(|&id| self.hash[id as usize].as_ref() == Some(hash))
    }

    /// Take a reference on prefix-hit blocks, removing free ones from the queue.
    pub fn touch(&mut self, blocks: &[BlockId]) {
        for &id in blocks {
            if self.ref_count[id as usize] == 0 && id != 0 {
                self.unlink(id);
            }
            self.ref_count[id as usize] += 1;
        }
    }

    /// Drop a reference on each block of `ordered` and append those that reach zero to the
    /// tail, in the order given.
    pub fn free_blocks(&mut self, ordered: impl Iterator<Item = BlockId> + Clone) {
        for id in ordered.clone() {
            debug_assert!(self.ref_count[id as usize] > 0, "freeing block {id} that is not held");
            self.ref_count[id as usize] -= 1;
        }
        for id in ordered {
            if self.ref_count[id as usize] == 0 && id != 0 {
                self.push_tail(id);
            }
        }
    }

    /// Cache `blocks[cached..full]` of the request with key `request` under `hashes[cached..]`
    /// (one `BlockStored` event if at least one block is cached).
    pub fn cache_full_blocks(
        &mut self,
        request: u64,
        blocks: &[BlockId],
        hashes: &[BlockHash],
        cached: usize,
        full: usize,
    ) {
        if cached >= full {
            return;
        }
        let mut stored = Vec::with_capacity(full - cached);
        for (i, &id) in blocks[cached..full].iter().enumerate() {
            if id == 0 {
                continue;
            }
            let hash = hashes[cached + i];
            debug_assert!(self.hash[id as usize].is_none(), "block {id} is cached twice");
            self.hash[id as usize] = Some(hash);
            self.cached.entry(index(&hash)).or_default().push(id);
            stored.push(event_value(&hash));
        }
        if self.record_events {
            let parent = (cached > 0).then(|| event_value(&hashes[cached - 1]));
            self.events.push(KvEvent::BlockStored {
                request,
                first_block: cached as u32,
                hashes: stored,
                parent,
            });
        }
    }

    /// Events since the last call, in emission order.
    pub fn take_events(&mut self, into: &mut Vec<KvEvent>) {
        into.append(&mut self.events);
    }

    /// The free queue from head to tail.
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.free as usize);
        let mut at = self.head;
        while at != NONE {
            out.push(at);
            at = self.next[at as usize];
        }
        out
    }

    fn evict(&mut self, id: BlockId) {
        let Some(hash) = self.hash[id as usize].take() else { return };
        let key = index(&hash);
        if let Some(blocks) = self.cached.get_mut(&key)
            && let Some(position) = blocks.iter().position(|&b| b == id)
        {
            blocks.remove(position);
            if blocks.is_empty() {
                self.cached.remove(&key);
            }
            if self.record_events {
                self.events.push(KvEvent::BlockRemoved { hash: event_value(&hash) });
            }
        }
    }

    fn push_tail(&mut self, id: u32) {
        self.prev[id as usize] = self.tail;
        self.next[id as usize] = NONE;
        if self.tail == NONE {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.free += 1;
    }

    fn pop_head(&mut self) -> Option<u32> {
        let id = self.head;
        if id == NONE {
            return None;
        }
        self.unlink(id);
        Some(id)
    }

    fn unlink(&mut self, id: u32) {
        let (prev, next) = (self.prev[id as usize], self.next[id as usize]);
        if prev == NONE {
            self.head = next;
        } else {
            self.next[prev as usize] = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.prev[next as usize] = prev;
        }
        self.prev[id as usize] = NONE;
        self.next[id as usize] = NONE;
        self.free -= 1;
    }
}

/// The key of `hash` in the cached-block index.
fn index(hash: &BlockHash) -> u128 {
    let mut first = [0u8; 16];
    first.copy_from_slice(&hash[..16]);
    u128::from_le_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_null_block_is_taken_and_the_rest_queue_in_id_order() {
        let pool = BlockPool::new(5, true);
        assert_eq!(pool.free_queue(), vec![1, 2, 3, 4]);
        assert_eq!(pool.usage(), 0.0);
    }

    #[test]
    fn allocation_pops_the_head_and_freeing_appends_in_the_order_given() {
        let mut pool = BlockPool::new(7, false);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        pool.get_new_blocks(3, &mut a);
        pool.get_new_blocks(2, &mut b);
        assert_eq!((a.as_slice(), b.as_slice()), (&[1, 2, 3][..], &[4, 5][..]));
        pool.free_blocks(a.iter().rev().copied());
        assert_eq!(pool.free_queue(), vec![6, 3, 2, 1]);
        let mut c = Vec::new();
        pool.get_new_blocks(2, &mut c);
        assert_eq!(c, vec![6, 3]);
    }

    #[test]
    fn a_cached_free_block_stays_hit_able_until_reused_and_a_hit_takes_it_out_of_the_queue() {
        let mut pool = BlockPool::new(5, true);
        let mut blocks = Vec::new();
        pool.get_new_blocks(2, &mut blocks);
        let hashes = [[1u8; 32], [2u8; 32]];
        pool.cache_full_blocks(7, &blocks, &hashes, 0, 2);
        pool.free_blocks(blocks.iter().rev().copied());
        assert_eq!(pool.free_queue(), vec![3, 4, 2, 1]);
        assert_eq!(pool.get_cached_block(&hashes[0]), Some(1));
        pool.touch(&[1]);
        assert_eq!(pool.free_queue(), vec![3, 4, 2]);
        assert_eq!(pool.ref_count(1), 1);
        // Reusing block 2 evicts its hash.
        let mut more = Vec::new();
        pool.get_new_blocks(3, &mut more);
        assert_eq!(more, vec![3, 4, 2]);
        assert_eq!(pool.get_cached_block(&hashes[1]), None);
        let mut events = Vec::new();
        pool.take_events(&mut events);
        assert_eq!(events.len(), 2);
        assert!(matches!(events[0], KvEvent::BlockStored { request: 7, first_block: 0, parent: None, .. }));
        assert!(matches!(events[1], KvEvent::BlockRemoved { .. }));
    }
}

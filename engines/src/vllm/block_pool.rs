//! vLLM's block pool: numbered KV blocks, the free queue, and the prefix cache's hash map.
//!
//! As in vLLM 0.15.1 (`v1/core/block_pool.py`, `kv_cache_utils.py`): `num_gpu_blocks` blocks
//! with ids `0..N`; block 0 is taken at start as the *null block* and never freed, so `N − 1`
//! are usable. Free blocks form a queue, initially in id order. Allocation pops
//! from the **head**, and a popped block that still carries a hash is evicted from the cache
//! (a `BlockRemoved` event). Freeing appends every block whose reference count reaches zero to
//! the **tail**, in the order given (callers pass a request's blocks last first), hashed or not,
//! so the least recently freed block is reused first and a freed block stays hit-able until it
//! is reused. A prefix hit on a free block takes it out of the middle of the queue. Identical
//! content is not deduplicated: the cache maps a hash to every block holding it, in insertion
//! order, and a lookup returns the first.
//!
//! The cache index is an open-addressing table keyed by the blocks' [`BlockKey`] bits (linear
//! probing, backward-shift deletion, at most half full, 8-byte slots): it is only ever looked
//! up, never iterated, so its layout cannot reach any decision. The blocks sharing a key form a
//! list threaded through per-block arrays. Blocks just cached wait in a short list, in the
//! order cached, until at least [`LINK_BATCH`] have been, and are then linked into the index
//! together, each one's slot fetched as it was cached so that the miss is over by then; a
//! lookup reads the index (the older blocks) and then the list, so it still returns the first
//! block cached.
//!
//! The free queue is a ring of block ids in queue order, each entry with the block's folded key
//! (zero when it is not cached), each block remembering its position; taking a block from the
//! middle (a prefix hit) only clears its entry, which is skipped when it reaches the head.
//! Taking blocks from the head reads the ring in order and each evicted key's index slot, and
//! only writes the blocks, so the blocks taken at once cost no load that waits on another (the
//! least recently freed blocks are cold, and a linked queue made every one a serial miss).

use super::block_hash::{BlockHash, BlockKey, event_value};

/// A block's id in the pool.
pub type BlockId = u32;

const NONE: u32 = u32::MAX;

/// A run of a [`KvEvents`] buffer: `start..start + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSpan {
    /// First index.
    pub start: u32,
    /// How many.
    pub len: u32,
}

impl EventSpan {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

/// A KV-cache event, as vLLM publishes them (hash values are the events' 64-bit form); a
/// stored event's hashes and tokens live in its [`KvEvents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Full blocks were cached: their hashes, their predecessor's hash (none at a request's
    /// first block), their tokens, and the index of the first block in its request with the
    /// request's key.
    BlockStored {
        /// The caching request's key.
        request: u64,
        /// Index of the first block within the request.
        first_block: u32,
        /// Hashes of the blocks, in order.
        hashes: EventSpan,
        /// Hash of the block before the first, if any.
        parent: Option<u64>,
        /// The blocks' token ids, concatenated (`block_size` per block).
        tokens: EventSpan,
    },
    /// A cached block was evicted on reuse.
    BlockRemoved {
        /// Its hash.
        hash: u64,
    },
}

/// KV events in emission order, every stored event's hashes and tokens in two shared buffers,
/// so recording allocates nothing once the buffers have grown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvEvents {
    events: Vec<KvEvent>,
    hashes: Vec<u64>,
    tokens: Vec<u32>,
}

impl KvEvents {
    /// The events, in emission order.
    pub fn iter(&self) -> std::slice::Iter<'_, KvEvent> {
        self.events.iter()
    }

    /// How many events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The hashes a stored event's span names.
    pub fn hashes(&self, span: EventSpan) -> &[u64] {
        &self.hashes[span.range()]
    }

    /// The tokens a stored event's span names.
    pub fn tokens(&self, span: EventSpan) -> &[u32] {
        &self.tokens[span.range()]
    }

    /// Forget every event, keeping the buffers.
    pub fn clear(&mut self) {
        self.events.clear();
        self.hashes.clear();
        self.tokens.clear();
    }

    /// Move every event of `other` to the end of these (swapping buffers when these are empty).
    fn append(&mut self, other: &mut KvEvents) {
        if self.events.is_empty() {
            self.clear();
            std::mem::swap(self, other);
            return;
        }
        let (h, t) = (self.hashes.len() as u32, self.tokens.len() as u32);
        self.events.extend(other.events.drain(..).map(|e| match e {
            KvEvent::BlockStored { request, first_block, hashes, parent, tokens } => KvEvent::BlockStored {
                request,
                first_block,
                hashes: EventSpan { start: hashes.start + h, len: hashes.len },
                parent,
                tokens: EventSpan { start: tokens.start + t, len: tokens.len },
            },
            removed => removed,
        }));
        self.hashes.append(&mut other.hashes);
        self.tokens.append(&mut other.tokens);
    }
}

/// The pool of KV blocks of one instance.
#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Every block's state, together so that taking a block from the free queue touches one
    /// cache line of it.
    blocks: Vec<Block>,
    free_queue: FreeQueue,
    free: u32,
    index: CacheIndex,
    /// Blocks cached but not yet linked into the index, in the order cached, and their keys:
    /// they are linked together once at least `link_batch` are listed, each slot fetched as
    /// its block is cached, so that the misses on the slots are over by then; until then
    /// lookups and evictions read these lists (a few ids in one cache line, where a flag on
    /// the block would be a miss).
    unlinked: Vec<BlockId>,
    unlinked_keys: Vec<BlockKey>,
    /// The length of the lists at which they are linked ([`LINK_BATCH`]; tests vary it).
    link_batch: usize,
    caching: bool,
    events: KvEvents,
    record_events: bool,
    /// Each cached block's hash as KV events carry it, while events are recorded (empty until
    /// the first is cached); apart from the blocks, which events are rarely recorded for.
    event_hashes: Vec<u64>,
}

/// A key as a block keeps it.
fn split(key: BlockKey) -> [u64; 2] {
    [key as u64, (key >> 64) as u64]
}

/// A key from a block's halves.
fn joined(halves: [u64; 2]) -> BlockKey {
    u128::from(halves[0]) | (u128::from(halves[1]) << 64)
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (at least 2: the null block and one usable block), with
    /// prefix caching on or off; with caching, KV events are recorded until turned off.
    pub fn new(num_blocks: u32, caching: bool) -> BlockPool {
        assert!(num_blocks >= 2, "a block pool needs the null block and at least one usable block");
        let n = num_blocks as usize;
        let mut pool = BlockPool {
            blocks: vec![Block::FREE; n],
            free_queue: FreeQueue::new(n),
            free: 0,
            index: CacheIndex::new(if caching { n } else { 0 }),
            unlinked: Vec::with_capacity(if caching { 2 * LINK_BATCH } else { 0 }),
            unlinked_keys: Vec::with_capacity(if caching { 2 * LINK_BATCH } else { 0 }),
            link_batch: LINK_BATCH,
            caching,
            events: KvEvents::default(),
            record_events: caching,
            event_hashes: Vec::new(),
        };
        for id in 0..num_blocks {
            pool.push_tail(id);
        }
        let null = pool.pop_head();
        debug_assert_eq!(null, Some((0, 0)));
        pool.blocks[0].ref_count = 1;
        pool
    }

    /// All blocks, the null block included.
    pub fn num_blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks in the free queue (cached ones included).
    pub fn num_free(&self) -> u32 {
        self.free
    }

    /// Whether prefix caching is on.
    pub fn caching(&self) -> bool {
        self.caching
    }

    /// Whether KV events are recorded (their SHA-256 hashes are then computed as blocks are
    /// cached).
    pub fn records_events(&self) -> bool {
        self.record_events
    }

    /// Record KV events (`BlockStored`, `BlockRemoved`) or not; only with caching on. Turn it
    /// on or off before the first block is cached.
    pub fn set_record_events(&mut self, on: bool) {
        self.record_events = on && self.caching;
    }

    /// vLLM's `kv_cache_usage`: `1 − free / (N − 1)`, the null block excluded.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.free) / f64::from(self.num_blocks() - 1)
    }

    /// Reference count of a block (the null block counts 1).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks[id as usize].ref_count
    }

    /// The key a block is cached under, if it is (tests compare two pools block by block).
    pub fn cached_key(&self, id: BlockId) -> Option<BlockKey> {
        self.blocks[id as usize].cached_key()
    }

    /// Take `count` blocks from the head of the free queue (evicting the hashes they carry),
    /// appending them to `into`. The caller has checked that enough are free.
    pub fn get_new_blocks(&mut self, count: u32, into: &mut Vec<BlockId>) {
        assert!(count <= self.free, "allocating {count} blocks with {} free", self.free);
        // Each block is evicted as it is taken; what the blocks a few places behind the head
        // will read is fetched ahead, so that their cache misses overlap.
        for ahead in 0..PREFETCH_DISTANCE.min(u64::from(count)) {
            self.prefetch_queued(ahead);
        }
        for _ in 0..count {
            self.prefetch_queued(PREFETCH_DISTANCE);
            let (id, folded) = self.pop_head().expect("free count says a block is there");
            if self.caching {
                self.evict(id, folded);
            }
            self.blocks[id as usize].ref_count = 1;
            into.push(id);
        }
    }

    /// Start fetching what taking the queued block `ahead` places behind the head will read
    /// (the block, and its index slot if it is cached).
    #[inline]
    fn prefetch_queued(&self, ahead: u64) {
        let Some((id, folded)) = self.free_queue.peek(ahead) else { return };
        if id == NONE {
            return;
        }
        mem_prefetch::prefetch_write_data::<_, 3>(&self.blocks[id as usize]);
        if folded != 0 {
            mem_prefetch::prefetch_write_data::<_, 3>(&self.index.slots[self.index.home(folded)]);
        }
    }

    /// Start fetching the index slots where `keys` are found or would be cached.
    pub fn prefetch_slots(&self, keys: &[BlockKey]) {
        if !self.caching {
            return;
        }
        for &key in keys {
            mem_prefetch::prefetch_write_data::<_, 3>(&self.index.slots[self.index.home(fold(key))]);
        }
    }

    /// The first block cached under `key`, if any: an indexed one was cached before any not
    /// linked yet.
    pub fn get_cached_block(&self, key: BlockKey) -> Option<BlockId> {
        self.index.find(key, &self.blocks).map(|slot| self.index.slots[slot].first).or_else(|| {
            self.unlinked_keys
                .iter()
                .position(|&unlinked_key| unlinked_key == key)
                .map(|at| self.unlinked[at])
        })
    }

    /// Take a reference on prefix-hit blocks, removing free ones from the queue.
    pub fn touch(&mut self, blocks: &[BlockId]) {
        for &id in blocks {
            if self.blocks[id as usize].ref_count == 0 && id != 0 {
                self.take_from_queue(id);
            }
            self.blocks[id as usize].ref_count += 1;
        }
    }

    /// Drop a reference on each block of `ordered` and append those that reach zero to the
    /// tail, in the order given.
    pub fn free_blocks(&mut self, ordered: impl Iterator<Item = BlockId> + Clone) {
        for id in ordered.clone() {
            debug_assert!(self.blocks[id as usize].ref_count > 0, "freeing block {id} that is not held");
            self.blocks[id as usize].ref_count -= 1;
        }
        for id in ordered {
            if self.blocks[id as usize].ref_count == 0 && id != 0 {
                self.push_tail(id);
            }
        }
    }

    /// Cache `blocks[cached..full]` of the request with key `request` under `keys[cached..]`;
    /// when events are recorded, `hashes[..full]` are the blocks' SHA-256 hashes, `tokens` the
    /// request's tokens (`block_size` per block) and one `BlockStored` event is recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn cache_full_blocks(
        &mut self,
        request: u64,
        blocks: &[BlockId],
        keys: &[BlockKey],
        hashes: &[BlockHash],
        tokens: &[u32],
        block_size: usize,
        cached: usize,
        full: usize,
    ) {
        if cached >= full {
            return;
        }
        for (i, &id) in blocks[cached..full].iter().enumerate() {
            if id == 0 {
                continue;
            }
            let key = keys[cached + i];
            debug_assert!(!self.blocks[id as usize].cached, "block {id} is cached twice");
            self.blocks[id as usize].key = split(key);
            self.blocks[id as usize].cached = true;
            self.unlinked.push(id);
            self.unlinked_keys.push(key);
            // Its index slot is fetched now, so it has arrived when the batch is linked.
            mem_prefetch::prefetch_write_data::<_, 3>(&self.index.slots[self.index.home(fold(key))]);
            if self.record_events {
                if self.event_hashes.is_empty() {
                    self.event_hashes = vec![0; self.blocks.len()];
                }
                self.event_hashes[id as usize] = event_value(&hashes[cached + i]);
            }
        }
        if self.record_events {
            let events = &mut self.events;
            let (h, t) = (events.hashes.len(), events.tokens.len());
            for i in (cached..full).filter(|&i| blocks[i] != 0) {
                events.hashes.push(event_value(&hashes[i]));
                events.tokens.extend_from_slice(&tokens[i * block_size..(i + 1) * block_size]);
            }
            let parent = (cached > 0).then(|| event_value(&hashes[cached - 1]));
            let span =
                |start: usize, end: usize| EventSpan { start: start as u32, len: (end - start) as u32 };
            let event = KvEvent::BlockStored {
                request,
                first_block: cached as u32,
                hashes: span(h, events.hashes.len()),
                parent,
                tokens: span(t, events.tokens.len()),
            };
            events.events.push(event);
        }
        if self.unlinked.len() >= self.link_batch {
            self.link_unlinked();
        }
    }

    /// Link every block cached but not linked yet into the index, in the order cached (their
    /// slots were fetched as they were cached).
    fn link_unlinked(&mut self) {
        for at in 0..self.unlinked.len() {
            self.link(self.unlinked[at], self.unlinked_keys[at]);
        }
        self.unlinked.clear();
        self.unlinked_keys.clear();
    }

    /// Events since the last call, in emission order.
    pub fn take_events(&mut self, into: &mut KvEvents) {
        into.append(&mut self.events);
    }

    /// The free queue from head to tail.
    pub fn free_queue(&self) -> Vec<BlockId> {
        let queue = &self.free_queue;
        (queue.head..queue.tail)
            .map(|position| (position, queue.entry(position)))
            .filter(|&(_, id)| id != NONE)
            .inspect(|&(position, id)| debug_assert_eq!(self.blocks[id as usize].queue_position, position))
            .map(|(_, id)| id)
            .collect()
    }

    /// Append `id` to the blocks cached under `key`.
    fn link(&mut self, id: BlockId, key: BlockKey) {
        let slot = self.index.find_or_insert(key, &self.blocks);
        let first = self.index.slots[slot].first;
        self.blocks[id as usize].same_next = NONE;
        if first == NONE {
            self.index.slots[slot].first = id;
            self.blocks[id as usize].same_prev = id;
        } else {
            let last = self.blocks[first as usize].same_prev;
            self.blocks[last as usize].same_next = id;
            self.blocks[id as usize].same_prev = last;
            self.blocks[first as usize].same_prev = id;
            self.index.slots[slot].tag |= SHARED_TAG;
        }
    }

    /// Evict `id` from the cache if it is cached: from the lists if it is not linked yet, else
    /// from the index; `folded` is its folded key as queued (zero if it was not cached), so the
    /// index slot is found without reading the block, and a block alone under its key is
    /// evicted without reading it at all.
    fn evict(&mut self, id: BlockId, folded: u64) {
        debug_assert_eq!(
            folded,
            self.blocks[id as usize].cached_key().map_or(0, fold),
            "block {id} was queued with its key"
        );
        if folded == 0 {
            return;
        }
        if let Some(at) = self.unlinked.iter().position(|&unlinked| unlinked == id) {
            // Cached but not linked yet: it leaves the lists, and the index never knew it.
            self.unlinked.remove(at);
            self.unlinked_keys.remove(at);
            self.blocks[id as usize].cached = false;
            if self.record_events {
                self.events.events.push(KvEvent::BlockRemoved { hash: self.event_hashes[id as usize] });
            }
            return;
        }
        let slot = self.index.find_block(folded, id, &self.blocks).expect("a cached block's key is indexed");
        self.blocks[id as usize].cached = false;
        let Slot { tag, first } = self.index.slots[slot];
        if tag & SHARED_TAG == 0 {
            debug_assert_eq!(first, id, "a key with one block has it first");
            self.index.remove(slot);
        } else {
            let (prev, next) = (self.blocks[id as usize].same_prev, self.blocks[id as usize].same_next);
            let first = if first == id {
                // The next block becomes the first, and keeps the list's last (the first's prev).
                self.index.slots[slot].first = next;
                self.blocks[next as usize].same_prev = prev;
                next
            } else {
                self.blocks[prev as usize].same_next = next;
                let tail_holder = if next == NONE { first } else { next };
                self.blocks[tail_holder as usize].same_prev = prev;
                first
            };
            if self.blocks[first as usize].same_next == NONE {
                self.index.slots[slot].tag &= !SHARED_TAG;
            }
        }
        if self.record_events {
            self.events.events.push(KvEvent::BlockRemoved { hash: self.event_hashes[id as usize] });
        }
    }

    #[inline]
    fn push_tail(&mut self, id: u32) {
        if self.free_queue.is_full() {
            self.compact_free_queue();
        }
        let folded = self.blocks[id as usize].cached_key().map_or(0, fold);
        self.blocks[id as usize].queue_position = self.free_queue.push(id, folded);
        self.free += 1;
    }

    /// The head block and its folded key (as queued).
    fn pop_head(&mut self) -> Option<(u32, u64)> {
        while let Some((position, id, folded)) = self.free_queue.pop() {
            if id == NONE {
                // Taken from the middle of the queue.
                continue;
            }
            debug_assert_eq!(self.blocks[id as usize].queue_position, position, "block {id} is queued here");
            self.blocks[id as usize].queue_position = NOT_QUEUED;
            self.free -= 1;
            return Some((id, folded));
        }
        None
    }

    /// Take free block `id` out of the middle of the free queue (a prefix hit on it).
    fn take_from_queue(&mut self, id: u32) {
        let position = self.blocks[id as usize].queue_position;
        debug_assert_ne!(position, NOT_QUEUED, "block {id} is not free");
        self.free_queue.clear_entry(position);
        self.blocks[id as usize].queue_position = NOT_QUEUED;
        self.free -= 1;
    }

    /// Drop the cleared entries of a full ring, keeping the free blocks' order.
    fn compact_free_queue(&mut self) {
        let live = self.free_queue();
        self.free_queue.clear();
        for id in live {
            let folded = self.blocks[id as usize].cached_key().map_or(0, fold);
            self.blocks[id as usize].queue_position = self.free_queue.push(id, folded);
        }
    }
}

/// How many places ahead of the block being taken its successors' cache lines are fetched.
const PREFETCH_DISTANCE: u64 = 4;

/// Blocks listed as cached before they are linked into the index together.
const LINK_BATCH: usize = 16;

/// A block's position in no queue.
const NOT_QUEUED: u64 = u64::MAX;

/// The free queue's ring: every id pushed and not yet popped at positions `head..tail` (which
/// only grow; a position's slot is `position & mask`), those taken from the middle cleared to
/// [`NONE`], each with its folded key if it was cached when queued, else zero (a queued block's
/// key cannot change). Twice the pool's size, so it is compacted at most once per pool's worth
/// of frees.
#[derive(Clone, Debug)]
struct FreeQueue {
    ring: Vec<u32>,
    folded: Vec<u64>,
    mask: u64,
    head: u64,
    tail: u64,
}

impl FreeQueue {
    fn new(num_blocks: usize) -> FreeQueue {
        let size = (2 * num_blocks).next_power_of_two();
        FreeQueue { ring: vec![NONE; size], folded: vec![0; size], mask: size as u64 - 1, head: 0, tail: 0 }
    }

    fn entry(&self, position: u64) -> u32 {
        self.ring[(position & self.mask) as usize]
    }

    fn is_full(&self) -> bool {
        self.tail - self.head == self.ring.len() as u64
    }

    /// Append `id` with its folded key; its position.
    fn push(&mut self, id: u32, folded: u64) -> u64 {
        let position = self.tail;
        let at = (position & self.mask) as usize;
        self.ring[at] = id;
        self.folded[at] = folded;
        self.tail += 1;
        position
    }

    /// Mark the entry at `position` taken ([`NONE`]), so the head skips it.
    fn clear_entry(&mut self, position: u64) {
        self.ring[(position & self.mask) as usize] = NONE;
    }

    /// The head entry's position, id ([`NONE`] if it was taken) and folded key.
    fn pop(&mut self) -> Option<(u64, u32, u64)> {
        if self.head == self.tail {
            return None;
        }
        let position = self.head;
        let at = (position & self.mask) as usize;
        self.head += 1;
        Some((position, self.ring[at], self.folded[at]))
    }

    /// The id ([`NONE`] if it was taken) and folded key of the entry `ahead` places behind
    /// the head, left in place.
    fn peek(&self, ahead: u64) -> Option<(u32, u64)> {
        (self.head + ahead < self.tail).then(|| {
            let at = ((self.head + ahead) & self.mask) as usize;
            (self.ring[at], self.folded[at])
        })
    }

    fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
    }
}

/// One block's state.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// Its key, low half first (meaningful while it is cached); two halves rather than a
    /// `u128` so a block is 8-aligned and 40 bytes.
    key: [u64; 2],
    /// Its position in the free queue ([`NOT_QUEUED`] unless free).
    queue_position: u64,
    /// Its neighbours among the blocks cached under the same key, in the order cached; the
    /// first block's `same_prev` is the last (so a key's slot need not keep it), the last's
    /// `same_next` is `NONE`.
    same_prev: u32,
    same_next: u32,
    /// Requests holding it (the null block counts 1).
    ref_count: u32,
    /// Whether it is cached (under `key`); a flag rather than an `Option` keeps a block at 40
    /// bytes.
    cached: bool,
}

impl Block {
    const FREE: Block = Block {
        key: [0; 2],
        queue_position: NOT_QUEUED,
        same_prev: NONE,
        same_next: NONE,
        ref_count: 0,
        cached: false,
    };

    /// Its key, if it is cached.
    fn cached_key(&self) -> Option<BlockKey> {
        self.cached.then(|| joined(self.key))
    }
}

/// One key's entry in the cache index: the low bits of its folded key (which place it) with
/// [`SHARED_TAG`], and the first block cached under it (`NONE` in an empty slot). The full key
/// is the first block's, so a slot is 8 bytes and eight share a cache line; two keys whose tags
/// agree get a slot each.
#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: u32,
    first: u32,
}

const EMPTY: Slot = Slot { tag: 0, first: NONE };

/// The bits of a folded key a slot's tag keeps (a table has at most `2^31` slots, so they hold
/// every bit that places a key).
const TAG_FOLD: u32 = (1 << 31) - 1;

/// The tag's bit set while more than one block is cached under the key: a key's only block is
/// evicted without reading it.
const SHARED_TAG: u32 = 1 << 31;

/// A folded key's tag bits.
fn tag_of(folded: u64) -> u32 {
    folded as u32 & TAG_FOLD
}

/// The bit every folded key has set, so that a folded key is never zero (the free queue's
/// mark of a block that is not cached); an index's home slot comes from the low bits.
const FOLDED_BIT: u64 = 1 << 63;

/// A key folded to the 64 bits a slot keeps.
fn fold(key: BlockKey) -> u64 {
    (key as u64 ^ (key >> 64) as u64) | FOLDED_BIT
}

/// Open addressing over block keys: linear probing from the key's low bits, at most half full
/// (a pool of `n` blocks caches at most `n` keys), deletion by backward shift so no tombstone
/// ever lengthens a probe.
#[derive(Clone, Debug)]
struct CacheIndex {
    slots: Vec<Slot>,
    mask: usize,
}

impl CacheIndex {
    /// An index for up to `capacity` keys.
    fn new(capacity: usize) -> CacheIndex {
        let size = (2 * capacity).next_power_of_two().max(2);
        assert!(size <= 1 << 31, "a cache index of {size} slots is beyond its tags' reach");
        CacheIndex { slots: vec![EMPTY; size], mask: size - 1 }
    }

    /// Where a probe for a key folded to `folded` starts (its bits are already uniform).
    fn home(&self, folded: u64) -> usize {
        folded as usize & self.mask
    }

    /// Probe from the home of `folded`: the first slot of that fold that `is_it` accepts, or
    /// else the empty slot that ends the run.
    fn probe(&self, folded: u64, is_it: impl Fn(&Slot) -> bool) -> Result<usize, usize> {
        let mut at = self.home(folded);
        loop {
            let slot = &self.slots[at];
            if slot.first == NONE {
                return Err(at);
            }
            if slot.tag & TAG_FOLD == tag_of(folded) && is_it(slot) {
                return Ok(at);
            }
            at = (at + 1) & self.mask;
        }
    }

    /// The slot of `key` (whose first block, in `blocks`, carries the full key).
    fn find(&self, key: BlockKey, blocks: &[Block]) -> Option<usize> {
        self.probe(fold(key), |slot| blocks[slot.first as usize].cached_key() == Some(key)).ok()
    }

    /// The slot of the key block `id` is cached under, folded to `folded`: a slot whose first
    /// block is `id` is it, without reading any block.
    fn find_block(&self, folded: u64, id: BlockId, blocks: &[Block]) -> Option<usize> {
        self.probe(folded, |slot| {
            slot.first == id || blocks[slot.first as usize].key == blocks[id as usize].key
        })
        .ok()
    }

    /// The slot of `key`, or a new empty one for it (its caller links a first block at once).
    fn find_or_insert(&mut self, key: BlockKey, blocks: &[Block]) -> usize {
        let folded = fold(key);
        match self.probe(folded, |slot| blocks[slot.first as usize].cached_key() == Some(key)) {
            Ok(at) => at,
            Err(at) => {
                self.slots[at].tag = tag_of(folded);
                at
            }
        }
    }

    /// Empty slot `hole`, moving back every later entry of the run whose probe passes it.
    fn remove(&mut self, mut hole: usize) {
        let mut at = hole;
        loop {
            at = (at + 1) & self.mask;
            if self.slots[at].first == NONE {
                break;
            }
            let home = self.home(u64::from(self.slots[at].tag & TAG_FOLD));
            // The entry may move to the hole if its home is not cyclically within (hole, at].
            let stays = if hole <= at { hole < home && home <= at } else { hole < home || home <= at };
            if !stays {
                self.slots[hole] = self.slots[at];
                hole = at;
            }
        }
        self.slots[hole] = EMPTY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_forty_bytes() {
        // Taking a block from the free queue reads one cold block: its size sets how many of a
        // pool's blocks the caches hold.
        assert_eq!(std::mem::size_of::<Block>(), 40);
    }

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
    fn the_free_queue_keeps_vllm_order_through_middle_removals_and_ring_compactions() {
        // A model of vLLM's doubly linked queue: a list popped at the front, appended at the back
        // and removed from anywhere. Enough rounds that the ring (twice the pool) is compacted
        // many times over, with entries cleared by removals in the middle.
        let mut pool = BlockPool::new(9, false);
        let mut model: Vec<BlockId> = (1..9).collect();
        let mut held: Vec<BlockId> = Vec::new();
        let mut state = 7u64;
        for round in 0..4_000 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let pick = (state >> 33) as usize;
            match pick % 3 {
                0 if !model.is_empty() => {
                    let count = 1 + (pick / 3) % model.len().min(3);
                    let mut taken = Vec::new();
                    pool.get_new_blocks(count as u32, &mut taken);
                    assert_eq!(taken, model.drain(..count).collect::<Vec<_>>(), "round {round}");
                    held.extend(taken);
                }
                1 if !model.is_empty() => {
                    let id = model.remove((pick / 3) % model.len());
                    pool.touch(&[id]);
                    held.push(id);
                }
                _ if !held.is_empty() => {
                    let id = held.swap_remove((pick / 3) % held.len());
                    pool.free_blocks(std::iter::once(id));
                    model.push(id);
                }
                _ => {}
            }
            assert_eq!(pool.free_queue(), model, "round {round}");
            assert_eq!(pool.num_free() as usize, model.len());
        }
    }

    #[test]
    fn a_cached_free_block_stays_hit_able_until_reused_and_a_hit_takes_it_out_of_the_queue() {
        let mut pool = BlockPool::new(5, true);
        let mut blocks = Vec::new();
        pool.get_new_blocks(2, &mut blocks);
        let hashes = [[1u8; 32], [2u8; 32]];
        let keys = [11, 12];
        let tokens = [5, 6, 7, 8];
        pool.cache_full_blocks(7, &blocks, &keys, &hashes, &tokens, 2, 0, 2);
        pool.free_blocks(blocks.iter().rev().copied());
        assert_eq!(pool.free_queue(), vec![3, 4, 2, 1]);
        assert_eq!(pool.get_cached_block(keys[0]), Some(1));
        pool.touch(&[1]);
        assert_eq!(pool.free_queue(), vec![3, 4, 2]);
        assert_eq!(pool.ref_count(1), 1);
        // Reusing block 2 evicts its hash.
        let mut more = Vec::new();
        pool.get_new_blocks(3, &mut more);
        assert_eq!(more, vec![3, 4, 2]);
        assert_eq!(pool.get_cached_block(keys[1]), None);
        let mut events = KvEvents::default();
        pool.take_events(&mut events);
        let all: Vec<KvEvent> = events.iter().copied().collect();
        assert_eq!(all.len(), 2);
        let KvEvent::BlockStored { request: 7, first_block: 0, parent: None, hashes: stored, tokens: span } =
            all[0]
        else {
            panic!("{:?}", all[0])
        };
        assert_eq!(events.hashes(stored), [event_value(&hashes[0]), event_value(&hashes[1])]);
        assert_eq!(events.tokens(span), [5, 6, 7, 8], "a stored event carries its blocks' tokens");
        assert_eq!(all[1], KvEvent::BlockRemoved { hash: event_value(&hashes[1]) });
    }

    /// A pool of `num_blocks` without KV events whose blocks 1, 2 and 3 are held and cached,
    /// in that order, under key 5.
    fn three_blocks_cached_under_one_key(num_blocks: u32) -> (BlockPool, Vec<BlockId>) {
        let mut pool = BlockPool::new(num_blocks, true);
        pool.set_record_events(false);
        let mut blocks = Vec::new();
        pool.get_new_blocks(3, &mut blocks);
        for &id in &blocks {
            pool.cache_full_blocks(u64::from(id), &[id], &[5], &[], &[], 1, 0, 1);
        }
        (pool, blocks)
    }

    #[test]
    fn blocks_of_equal_content_are_found_in_the_order_cached_until_each_is_evicted() {
        let (mut pool, blocks) = three_blocks_cached_under_one_key(4);
        pool.free_blocks(blocks.iter().copied());
        assert_eq!(pool.get_cached_block(5), Some(1));
        let mut reused = Vec::new();
        pool.get_new_blocks(1, &mut reused);
        assert_eq!((reused[0], pool.get_cached_block(5)), (1, Some(2)));
        pool.get_new_blocks(2, &mut reused);
        assert_eq!(pool.get_cached_block(5), None);
        let mut events = KvEvents::default();
        pool.take_events(&mut events);
        assert!(events.is_empty(), "no events unless recorded");
    }

    #[test]
    fn evicting_a_block_from_the_middle_of_its_keys_list_keeps_the_others_in_order() {
        let (mut pool, blocks) = three_blocks_cached_under_one_key(5);
        assert_eq!(blocks, vec![1, 2, 3]);
        pool.free_blocks([2, 1, 3].into_iter());
        assert_eq!(pool.free_queue(), vec![4, 2, 1, 3]);
        let mut reused = Vec::new();
        pool.get_new_blocks(2, &mut reused);
        assert_eq!((reused.as_slice(), pool.get_cached_block(5)), (&[4, 2][..], Some(1)));
        pool.get_new_blocks(1, &mut reused);
        assert_eq!(
            (reused[2], pool.get_cached_block(5)),
            (1, Some(3)),
            "the last is found once the first goes"
        );
        pool.touch(&[3]);
        assert_eq!(
            (pool.free_queue(), pool.num_free()),
            (vec![], 0),
            "a hit takes the block out of the queue"
        );
        pool.free_blocks(std::iter::once(3));
        pool.get_new_blocks(1, &mut reused);
        assert_eq!((reused[3], pool.get_cached_block(5)), (3, None));
    }

    #[test]
    fn the_index_agrees_with_an_ordered_map_under_inserts_and_removals() {
        use std::collections::BTreeMap;
        let mut index = CacheIndex::new(64);
        let mut model: BTreeMap<BlockKey, u32> = BTreeMap::new();
        // Keys crowding a few home slots make long probe runs that wrap around the table; keys
        // 32..64 fold to the same 64 bits as keys 0..32 and must still be told apart.
        let key = |i: u64| {
            let j = i % 32;
            let base = (u128::from(j % 7) << 64) | u128::from((j * 0x9e37) % 5) | (u128::from(j) << 100);
            if i < 32 { base } else { base ^ ((0x1234u128 << 64) | 0x1234) }
        };
        // Block i holds key i, as a cached block would.
        let mut blocks = vec![Block::FREE; 64];
        for (i, block) in blocks.iter_mut().enumerate() {
            block.key = split(key(i as u64));
            block.cached = true;
        }
        assert_eq!(fold(key(3)), fold(key(35)));
        let mut state = 1u64;
        for step in 0..5_000u64 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let i = state >> 58;
            let k = key(i);
            match model.get(&k) {
                Some(_) if state & 1 == 0 => {
                    let slot = index.find(k, &blocks).expect("a key in the model is indexed");
                    index.remove(slot);
                    model.remove(&k);
                }
                Some(_) => {}
                None => {
                    let slot = index.find_or_insert(k, &blocks);
                    index.slots[slot].first = i as u32;
                    model.insert(k, i as u32);
                }
            }
            for i in 0..64 {
                let k = key(i);
                assert_eq!(
                    index.find(k, &blocks).map(|s| index.slots[s].first),
                    model.get(&k).copied(),
                    "step {step}"
                );
                if model.get(&k) == Some(&(i as u32)) {
                    // Found by its block as by its key, past keys of the same fold.
                    assert_eq!(
                        index.find_block(fold(k), i as u32, &blocks),
                        index.find(k, &blocks),
                        "step {step}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_pool_matches_a_model_of_vllms_queue_and_cache_under_random_operations() {
        // vLLM's structures as plain ones: the free queue a list, the cache a map from key to
        // its blocks in the order cached. Keys that fold alike (their halves swapped) and keys
        // that differ only in the bit every folded key has set must still be told apart.
        use std::collections::BTreeMap;
        let keys: Vec<BlockKey> = [
            (1u64, 0u64),
            (0, 1),
            (3, 2),
            (2, 3),
            (5, 4),
            (4, 5),
            (8, 0),
            (0, 8),
            (0, 0),
            (1 << 63, 0),
            (7, 1 << 63),
        ]
        .iter()
        .map(|&(lo, hi)| joined([lo, hi]))
        .collect();
        for seed in 0..300u64 {
            let n = 3 + (seed % 9) as u32;
            let mut pool = BlockPool::new(n, true);
            // Blocks linked into the index at once, at every cache (1), in batches the pool
            // fills and by the default, which a pool this small never fills (lists only).
            pool.link_batch = [1, 2, 3, LINK_BATCH][(seed % 4) as usize];
            let mut queue: Vec<BlockId> = (1..n).collect();
            let mut refs = vec![0u32; n as usize];
            let mut cached: Vec<Option<(BlockKey, u64)>> = vec![None; n as usize];
            let mut map: BTreeMap<BlockKey, Vec<BlockId>> = BTreeMap::new();
            let mut held: Vec<BlockId> = Vec::new();
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut counter = 0u64;
            for round in 0..3_000 {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let pick = (state >> 33) as usize;
                let mut removed = Vec::new();
                match pick % 4 {
                    0 if !queue.is_empty() => {
                        let count = 1 + (pick / 4) % queue.len().min(3);
                        let mut taken = Vec::new();
                        pool.get_new_blocks(count as u32, &mut taken);
                        let want: Vec<BlockId> = queue.drain(..count).collect();
                        assert_eq!(taken, want, "seed {seed} round {round}");
                        for &id in &want {
                            if let Some((k, h)) = cached[id as usize].take() {
                                let list = map.get_mut(&k).unwrap();
                                list.retain(|&b| b != id);
                                if list.is_empty() {
                                    map.remove(&k);
                                }
                                removed.push(h);
                            }
                            refs[id as usize] = 1;
                            held.push(id);
                        }
                    }
                    1 => {
                        let candidates: Vec<BlockId> =
                            held.iter().copied().filter(|&b| cached[b as usize].is_none()).collect();
                        if !candidates.is_empty() {
                            // Up to three blocks in one call, so that one call can fill a batch.
                            let count = 1 + (pick / 4096) % candidates.len().min(3);
                            let first = (pick / 4) % candidates.len();
                            let ids: Vec<BlockId> =
                                (0..count).map(|j| candidates[(first + j) % candidates.len()]).collect();
                            let ks: Vec<BlockKey> =
                                (0..count).map(|j| keys[(pick / 64 + 5 * j) % keys.len()]).collect();
                            let mut hashes = Vec::new();
                            for (&id, &k) in ids.iter().zip(&ks) {
                                counter += 1;
                                let mut hash = [0u8; 32];
                                hash[24..].copy_from_slice(&counter.to_be_bytes());
                                hashes.push(hash);
                                cached[id as usize] = Some((k, counter));
                                map.entry(k).or_default().push(id);
                            }
                            pool.cache_full_blocks(1, &ids, &ks, &hashes, &vec![0; count], 1, 0, count);
                        }
                    }
                    2 => {
                        let k = keys[(pick / 4) % keys.len()];
                        let want = map.get(&k).map(|l| l[0]);
                        assert_eq!(pool.get_cached_block(k), want, "seed {seed} round {round}");
                        if let Some(id) = want {
                            pool.touch(&[id]);
                            if refs[id as usize] == 0 {
                                queue.retain(|&b| b != id);
                            }
                            refs[id as usize] += 1;
                            held.push(id);
                        }
                    }
                    _ if !held.is_empty() => {
                        let id = held.swap_remove((pick / 4) % held.len());
                        pool.free_blocks(std::iter::once(id));
                        refs[id as usize] -= 1;
                        if refs[id as usize] == 0 {
                            queue.push(id);
                        }
                    }
                    _ => {}
                }
                assert_eq!(pool.free_queue(), queue, "seed {seed} round {round}");
                assert_eq!(pool.num_free() as usize, queue.len());
                for &k in &keys {
                    assert_eq!(
                        pool.get_cached_block(k),
                        map.get(&k).map(|l| l[0]),
                        "seed {seed} round {round}"
                    );
                }
                let mut events = KvEvents::default();
                pool.take_events(&mut events);
                let got: Vec<u64> = events
                    .iter()
                    .filter_map(|e| match *e {
                        KvEvent::BlockRemoved { hash } => Some(hash),
                        _ => None,
                    })
                    .collect();
                assert_eq!(got, removed, "seed {seed} round {round}");
            }
        }
    }
}

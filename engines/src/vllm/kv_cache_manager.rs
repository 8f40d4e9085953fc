//! vLLM's KV-cache manager for one full-attention group: block tables over a block pool, prefix
//! lookups, slot allocation and caching (`v1/core/kv_cache_manager.py` and
//! `single_type_kv_cache_manager.py` in 0.15.1).
//!
//! `allocate_slots` gives a request with `c` computed tokens (plus `h` prefix-hit tokens) `n`
//! more: it needs `ceil(min(c + h + n, max_model_len) / block_size)` blocks; those it lacks, plus
//! any hit blocks that sit in the free queue (touching them takes them out of it), must all be
//! free, or nothing is allocated. Hit blocks are touched and appended first, new blocks popped
//! from the free queue's head. With caching on, every block that is now full of known tokens —
//! up to `min(c + h + n, num_tokens)` — is hashed into the cache. Freeing returns a request's
//! blocks last first; their hashes stay until the blocks are reused.

use super::block_pool::{BlockId, BlockPool, KvEvents};
use super::request::Request;

/// Prefix-cache lookups since the last snapshot, split as vLLM splits them: lookups by
/// requests never preempted, and by preempted ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Lookups by never-preempted requests.
    pub requests: u64,
    /// Tokens those lookups covered.
    pub queries: u64,
    /// Tokens they found cached.
    pub hits: u64,
    /// Lookups by preempted requests.
    pub preempted_requests: u64,
    /// Tokens those covered.
    pub preempted_queries: u64,
    /// Tokens they found cached.
    pub preempted_hits: u64,
}

/// Block tables and the prefix cache of one instance.
#[derive(Clone, Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: u32,
    /// `log2(block_size)`: block arithmetic on the hot path shifts instead of dividing.
    block_shift: u32,
    max_model_len: u32,
    tables: usize,
    stats: PrefixCacheStats,
    scratch: Vec<u8>,
    /// A request's tokens, copied for the KV events' hashes and contents.
    tokens: Vec<u32>,
    /// Whether blocks past a request's prompt are cached in the pool only when it is preempted
    /// (see [`KvCacheManager::set_defer_output_blocks`]).
    defer_output_blocks: bool,
}

impl KvCacheManager {
    /// A manager over `num_blocks` blocks of `block_size` tokens, prefix caching on or off.
    /// `block_size` is one of vLLM's block sizes, all powers of two (the engine arguments are
    /// checked against them before a manager is made).
    pub fn new(num_blocks: u32, block_size: u32, max_model_len: u32, caching: bool) -> KvCacheManager {
        assert!(block_size.is_power_of_two(), "vLLM's block sizes are powers of two, not {block_size}");
        KvCacheManager {
            pool: BlockPool::new(num_blocks, caching),
            block_size,
            block_shift: block_size.trailing_zeros(),
            max_model_len,
            tables: 0,
            stats: PrefixCacheStats::default(),
            scratch: Vec::new(),
            tokens: Vec::new(),
            defer_output_blocks: false,
        }
    }

    /// Cache a request's blocks past its prompt's full ones in the pool only if it is
    /// preempted (off by default). Its count of cached blocks runs on as vLLM's does. Set it
    /// only where no prompt can hold another request's output ids (no conversation history
    /// in the workload), no KV event is recorded and no connector runs: then only the request
    /// itself, resumed after a preemption, could hit those blocks, and the outputs are those of
    /// caching them as they fill, without the index insertions and evictions.
    pub fn set_defer_output_blocks(&mut self, on: bool) {
        self.defer_output_blocks = on;
    }

    /// Whether a request's output blocks are keyed only when they are handed to the pool: when
    /// they are cached late and keyed at all.
    pub(crate) fn keys_outputs_late(&self) -> bool {
        self.defer_output_blocks && self.pool.caching()
    }

    /// Record KV events or not (on by default with caching); without them no SHA-256 block
    /// hash is computed. Set it before the first request.
    pub fn set_record_events(&mut self, on: bool) {
        self.pool.set_record_events(on);
    }

    /// Blocks that hold `tokens` tokens (the last one possibly part full).
    #[inline]
    fn blocks_holding(&self, tokens: u32) -> usize {
        ((tokens >> self.block_shift) + u32::from(tokens & (self.block_size - 1) != 0)) as usize
    }

    /// Blocks that `tokens` tokens fill.
    #[inline]
    fn full_blocks(&self, tokens: u32) -> usize {
        (tokens >> self.block_shift) as usize
    }

    /// The block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The block pool, for fault injection in checked runs ([`super::Scheduler::leak_kv_block`]).
    pub(crate) fn pool_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    /// Tokens per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The block size requests hash with, when prefix caching is on.
    pub(crate) fn hash_block_size(&self) -> Option<usize> {
        self.pool.caching().then_some(self.block_size as usize)
    }

    /// The longest cached prefix of `request` in whole blocks, at most `num_tokens − 1` tokens,
    /// into `hits`; records the lookup. Returns the hit tokens.
    pub(crate) fn get_computed_blocks(&mut self, request: &Request, hits: &mut Vec<BlockId>) -> u32 {
        hits.clear();
        if !self.pool.caching() {
            return 0;
        }
        let max_blocks = self.full_blocks(request.num_tokens().saturating_sub(1));
        // The slots its full blocks will be cached under (or found in) are fetched now, while
        // the lookup below and the evictions of the allocation that follows take their time.
        self.pool.prefetch_slots(request.block_keys());
        for &key in request.block_keys().iter().take(max_blocks) {
            match self.pool.get_cached_block(key) {
                Some(id) => hits.push(id),
                None => break,
            }
        }
        let hit_tokens = hits.len() as u32 * self.block_size;
        let queries = u64::from(request.num_tokens());
        if request.num_preemptions > 0 {
            self.stats.preempted_requests += 1;
            self.stats.preempted_queries += queries;
            self.stats.preempted_hits += u64::from(hit_tokens);
        } else {
            self.stats.requests += 1;
            self.stats.queries += queries;
            self.stats.hits += u64::from(hit_tokens);
        }
        hit_tokens
    }

    /// [`KvCacheManager::allocate_slots`] for a request already running (no hits, nothing
    /// external): most of its steps need no new block and fill no block, and those return at
    /// once, without the general call.
    #[inline]
    pub(crate) fn allocate_running(
        &mut self,
        request: &mut Request,
        num_new: u32,
        new_blocks: &mut Vec<BlockId>,
    ) -> bool {
        let computed = request.num_computed_tokens.min(self.max_model_len);
        let need = (computed + num_new).min(self.max_model_len);
        let holds_enough = self.blocks_holding(need) <= request.blocks.len();
        let fills_none = !self.pool.caching()
            || self.full_blocks((computed + num_new).min(request.num_tokens()))
                <= request.num_cached_blocks.unwrap_or(0);
        if holds_enough && fills_none && request.has_table {
            return true;
        }
        self.allocate_slots(request, num_new, 0, &[], 0, false, new_blocks)
    }

    /// Blocks `request` (running) takes from the free queue to compute `num_new` more tokens.
    pub(crate) fn blocks_to_run(&self, request: &Request, num_new: u32) -> usize {
        let computed = request.num_computed_tokens.min(self.max_model_len);
        let need = (computed + num_new).min(self.max_model_len);
        self.blocks_holding(need).saturating_sub(request.blocks.len())
    }

    /// Give `request` slots for `num_new` more tokens after its computed tokens, `hits`
    /// (blocks found by [`KvCacheManager::get_computed_blocks`], `hit_tokens` tokens) and
    /// `external` tokens a connector supplies (fresh blocks, hashed now unless `delay_cache`);
    /// the blocks newly taken from the free queue go to `new_blocks`. `false`, with nothing
    /// changed, when too few blocks are free.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn allocate_slots(
        &mut self,
        request: &mut Request,
        num_new: u32,
        hit_tokens: u32,
        hits: &[BlockId],
        external: u32,
        delay_cache: bool,
        new_blocks: &mut Vec<BlockId>,
    ) -> bool {
        let total_computed = (request.num_computed_tokens + hit_tokens + external).min(self.max_model_len);
        let need = (total_computed + num_new).min(self.max_model_len);
        let required = self.blocks_holding(need);
        let held = request.blocks.len();
        let to_allocate = if request.num_cached_blocks_known() {
            debug_assert!(hits.is_empty(), "a running request has no new prefix hits");
            required.saturating_sub(held)
        } else {
            let evictable = hits.iter().filter(|&&b| self.pool.ref_count(b) == 0 && b != 0).count();
            required.saturating_sub(hits.len() + held) + evictable
        };
        if to_allocate > self.pool.num_free() as usize {
            return false;
        }
        if request.blocks.capacity() == 0 {
            // Room for every block it can come to hold, so its list grows without copies.
            let most =
                self.blocks_holding((request.num_prompt_tokens + request.max_tokens).min(self.max_model_len));
            request.blocks.reserve_exact(most.max(required));
        }
        if !hits.is_empty() {
            self.pool.touch(hits);
            request.blocks.extend_from_slice(hits);
            request.num_cached_blocks = Some(request.blocks.len());
        }
        if !request.has_table {
            request.has_table = true;
            self.tables += 1;
        }
        let missing = required.saturating_sub(request.blocks.len()) as u32;
        if missing > 0 {
            let start = new_blocks.len();
            self.pool.get_new_blocks(missing, new_blocks);
            request.blocks.extend_from_slice(&new_blocks[start..]);
        }
        if self.pool.caching() && !delay_cache {
            let cache_to = (total_computed + num_new).min(request.num_tokens());
            self.cache_blocks(request, cache_to);
        }
        true
    }

    /// Hash into the cache every block of `request` full within its first `num_tokens` tokens.
    /// Inlined: it is asked twice a step for every running request, and a block fills only
    /// once every `block_size` tokens.
    #[inline]
    pub(crate) fn cache_blocks(&mut self, request: &mut Request, num_tokens: u32) {
        if !self.pool.caching() {
            return;
        }
        let cached = request.num_cached_blocks.unwrap_or(0);
        let full = self.full_blocks(num_tokens);
        if cached < full {
            self.cache_new_full_blocks(request, cached, full);
        }
    }

    /// [`KvCacheManager::cache_blocks`] for blocks `cached..full`, at least one.
    fn cache_new_full_blocks(&mut self, request: &mut Request, cached: usize, full: usize) {
        let told = if self.defer_output_blocks && !self.pool.records_events() {
            let prompt_blocks = (request.num_prompt_tokens >> self.block_shift) as usize;
            full.min(prompt_blocks.max(cached))
        } else {
            full
        };
        if told < full {
            request.deferred_from.get_or_insert(told);
        }
        if cached < told {
            self.hand_to_pool(request, cached, told);
        }
        request.num_cached_blocks = Some(full);
    }

    /// Cache in the pool the blocks of `request` whose caching was deferred, before it is
    /// preempted and its blocks freed (so that it can hit them when it resumes).
    pub(crate) fn cache_deferred(&mut self, request: &mut Request) {
        let Some(from) = request.deferred_from.take() else { return };
        let to = request.num_cached_blocks.unwrap_or(0);
        if from < to {
            self.hand_to_pool(request, from, to);
        }
    }

    /// Cache blocks `from..to` of `request` in the pool (with their KV events, when recorded).
    fn hand_to_pool(&mut self, request: &mut Request, from: usize, to: usize) {
        // Output blocks keyed late are keyed here, the first read of their keys: a lookup when
        // the request resumes reads only the keys of blocks handed to the pool before, as no
        // other block can be found there.
        if request.block_keys().len() < to {
            request.key_full_blocks(self.block_size as usize, &mut self.scratch);
        }
        // The hashes and tokens are read only for the KV events, when they are recorded.
        self.tokens.clear();
        if self.pool.records_events() {
            let block_size = self.block_size as usize;
            request.extend_hashes(to * block_size, block_size, &mut self.tokens, &mut self.scratch);
        }
        self.pool.cache_full_blocks(
            request.spec.key,
            &request.blocks,
            request.block_keys(),
            &request.block_hashes,
            &self.tokens,
            self.block_size as usize,
            from,
            to,
        );
    }

    /// Extend `request`'s SHA-256 block hashes over all its full blocks (for the connector's KV
    /// events).
    pub(crate) fn hash_all_blocks(&mut self, request: &mut Request) {
        let num_tokens = request.num_tokens() as usize;
        request.extend_hashes(num_tokens, self.block_size as usize, &mut self.tokens, &mut self.scratch);
    }

    /// Return a request's blocks to the pool, last block first.
    pub(crate) fn free(&mut self, request: &mut Request) {
        self.pool.free_blocks(request.blocks.iter().rev().copied());
        request.blocks.clear();
        request.num_cached_blocks = None;
        request.deferred_from = None;
        if request.has_table {
            request.has_table = false;
            self.tables -= 1;
        }
    }

    /// Leading blocks of `request` held by every request that holds blocks (cascade
    /// attention's common prefix); zero without prefix caching.
    pub(crate) fn common_prefix_blocks(&self, request: &Request) -> u32 {
        if !self.pool.caching() {
            return 0;
        }
        request.blocks.iter().take_while(|&&b| self.pool.ref_count(b) as usize == self.tables).count() as u32
    }

    /// Prefix-cache statistics since the last call, resetting them.
    pub fn take_stats(&mut self) -> PrefixCacheStats {
        std::mem::take(&mut self.stats)
    }

    /// KV events since the last call.
    pub fn take_events(&mut self, into: &mut KvEvents) {
        self.pool.take_events(into);
    }

    /// Requests that hold a block table.
    pub fn tables(&self) -> usize {
        self.tables
    }
}

#[cfg(test)]
mod tests {
    use super::KvCacheManager;

    #[test]
    fn block_arithmetic_by_shifts_is_division() {
        for block_size in [1u32, 8, 16, 32, 64, 128] {
            let kv = KvCacheManager::new(4, block_size, 1 << 20, true);
            let edges = [u32::MAX, u32::MAX - 1, u32::MAX - block_size, u32::MAX - block_size + 1];
            for tokens in (0..1_000).chain(edges) {
                assert_eq!(kv.blocks_holding(tokens), tokens.div_ceil(block_size) as usize, "{tokens}");
                assert_eq!(kv.full_blocks(tokens), (tokens / block_size) as usize, "{tokens}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "powers of two")]
    fn a_block_size_not_a_power_of_two_is_a_programming_error() {
        KvCacheManager::new(4, 12, 1024, true);
    }
}

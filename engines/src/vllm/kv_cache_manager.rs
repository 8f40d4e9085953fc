//! vLLM's KV-cache manager for one full-attention group: block tables over a block pool.
//!
//! `allocate_slots` follows vLLM V1 (`v1/core/kv_cache_manager.py`): a request that has computed
//! `c` tokens and is given `n` more needs `ceil(min(c + n, max_model_len) / block_size)` blocks
//! in all; the missing ones come from the free queue's head, all or nothing. Block tables only
//! grow while a request runs; freeing (finish, preemption) returns them last block first.

use super::block_pool::{BlockId, BlockPool};

/// Block tables of the requests of one instance, over its block pool.
#[derive(Clone, Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: u32,
    max_model_len: u32,
}

impl KvCacheManager {
    /// A manager over `num_blocks` blocks of `block_size` tokens.
    pub fn new(num_blocks: u32, block_size: u32, max_model_len: u32) -> KvCacheManager {
        KvCacheManager { pool: BlockPool::new(num_blocks), block_size, max_model_len }
    }

    /// The block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Grow `table` so a request with `num_computed` tokens can compute `num_new` more;
    /// `false`, with nothing allocated, when the free queue is too short.
    pub fn allocate_slots(&mut self, table: &mut Vec<BlockId>, num_computed: u32, num_new: u32) -> bool {
        let tokens = (num_computed + num_new).min(self.max_model_len);
        let needed = tokens.div_ceil(self.block_size).saturating_sub(table.len() as u32);
        self.pool.allocate(needed, table)
    }

    /// Return a request's blocks to the pool, last block first, and empty its table.
    pub fn free(&mut self, table: &mut Vec<BlockId>) {
        self.pool.free_blocks(table);
        table.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_allocated_in_whole_blocks_only_when_missing() {
        let mut kv = KvCacheManager::new(10, 16, 1_000);
        let mut table = Vec::new();
        assert!(kv.allocate_slots(&mut table, 0, 17));
        assert_eq!(table, vec![1, 2]);
        // 17 computed, one more token still fits in the second block.
        assert!(kv.allocate_slots(&mut table, 17, 1));
        assert_eq!(table.len(), 2);
        // Token 33 needs a third block.
        assert!(kv.allocate_slots(&mut table, 32, 1));
        assert_eq!(table, vec![1, 2, 3]);
        assert!(!kv.allocate_slots(&mut table, 33, 16 * 7), "all or nothing");
        assert_eq!(table.len(), 3);
        kv.free(&mut table);
        assert!(table.is_empty());
        assert_eq!(kv.pool().num_free(), 9);
    }
}

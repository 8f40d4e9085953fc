//! vLLM's block pool: the GPU KV cache as numbered blocks and the queue of free ones.
//!
//! As in vLLM V1 (`v1/core/block_pool.py`, `kv_cache_utils.py`): `num_gpu_blocks` blocks with
//! ids `0..N`; block 0 is taken at start as the *null block* (a placeholder, never allocated,
//! never freed), so `N − 1` blocks are usable. Free blocks form a doubly linked queue, initially
//! in id order. Allocation pops from the **head**; freeing appends to the **tail**, so the
//! least recently freed block is reused first. A request's blocks are freed last block first, so
//! its tail blocks are reused before its prefix. The links allow O(1) removal from the middle,
//! which a prefix-cache hit on a free block needs.

/// A block's id in the pool.
pub type BlockId = u32;

const NONE: u32 = u32::MAX;

/// The pool of KV blocks of one instance.
#[derive(Clone, Debug)]
pub struct BlockPool {
    ref_count: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    free: u32,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (at least 2: the null block and one usable block).
    pub fn new(num_blocks: u32) -> BlockPool {
        assert!(num_blocks >= 2, "a block pool needs the null block and at least one usable block");
        let n = num_blocks as usize;
        let mut pool = BlockPool {
            ref_count: vec![0; n],
            prev: vec![NONE; n],
            next: vec![NONE; n],
            head: NONE,
            tail: NONE,
            free: 0,
        };
        for id in 0..num_blocks {
            pool.push_tail(id);
        }
        // The null block leaves the queue at start and never returns.
        let null = pool.pop_head();
        debug_assert_eq!(null, Some(0));
        pool.ref_count[0] = 1;
        pool
    }

    /// All blocks, the null block included.
    pub fn num_blocks(&self) -> u32 {
        self.ref_count.len() as u32
    }

    /// Blocks in the free queue.
    pub fn num_free(&self) -> u32 {
        self.free
    }

    /// vLLM's `kv_cache_usage`: `1 − free / (N − 1)`, the null block excluded.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.free) / f64::from(self.num_blocks() - 1)
    }

    /// Take `count` blocks from the head of the free queue, appending their ids to `into`;
    /// `false` (and nothing taken) if fewer are free.
    pub fn allocate(&mut self, count: u32, into: &mut Vec<BlockId>) -> bool {
        if count > self.free {
            return false;
        }
        for _ in 0..count {
            let id = self.pop_head().expect("free count says a block is there");
            self.ref_count[id as usize] = 1;
            into.push(id);
        }
        true
    }

    /// Release a request's blocks, last block first (vLLM frees in reverse order); blocks whose
    /// reference count reaches zero join the tail of the free queue.
    pub fn free_blocks(&mut self, blocks: &[BlockId]) {
        for &id in blocks.iter().rev() {
            let count = &mut self.ref_count[id as usize];
            debug_assert!(*count > 0 && id != 0, "freeing block {id} that is not held");
            *count -= 1;
            if *count == 0 {
                self.push_tail(id);
            }
        }
    }

    /// The free queue from head to tail (for tests and invariant checks).
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.free as usize);
        let mut at = self.head;
        while at != NONE {
            out.push(at);
            at = self.next[at as usize];
        }
        out
    }

    /// Reference count of a block (the null block counts 1).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.ref_count[id as usize]
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
        self.head = self.next[id as usize];
        if self.head == NONE {
            self.tail = NONE;
        } else {
            self.prev[self.head as usize] = NONE;
        }
        self.next[id as usize] = NONE;
        self.free -= 1;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_null_block_is_taken_and_the_rest_queue_in_id_order() {
        let pool = BlockPool::new(5);
        assert_eq!(pool.free_queue(), vec![1, 2, 3, 4]);
        assert_eq!(pool.num_free(), 4);
        assert_eq!(pool.usage(), 0.0);
    }

    #[test]
    fn allocation_pops_the_head_and_freeing_appends_in_reverse() {
        let mut pool = BlockPool::new(7);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert!(pool.allocate(3, &mut a));
        assert!(pool.allocate(2, &mut b));
        assert_eq!((a.as_slice(), b.as_slice()), (&[1, 2, 3][..], &[4, 5][..]));
        assert!(!pool.allocate(2, &mut Vec::new()), "only one block left");
        pool.free_blocks(&a);
        // Freed last block first: 3, 2, 1 join the tail after 6.
        assert_eq!(pool.free_queue(), vec![6, 3, 2, 1]);
        assert!((pool.usage() - 2.0 / 6.0).abs() < 1e-12);
        let mut c = Vec::new();
        assert!(pool.allocate(2, &mut c));
        assert_eq!(c, vec![6, 3]);
    }
}

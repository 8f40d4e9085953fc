//! The CPU tier's block manager: vLLM 0.15.1's `LRUOffloadingManager` over its `CPUBackend`
//! (`v1/kv_offload/lru_manager.py`, `backends/cpu.py`).
//!
//! Blocks are keyed by the prefix key of the last GPU block they cover, kept in recency order
//! (least recent first). A block is *not ready* (being stored, reference −1) until its store
//! completes, then *ready* with a count of loads in flight. Lookups count consecutive ready
//! blocks; `touch` moves present blocks to the recent end, iterating the keys in reverse so a
//! sequence's first block ends up most recent (eviction takes tail blocks first); a store
//! evicts ready, unloaded blocks from the least recent end, or refuses (and evicts nothing) if
//! it cannot free enough. CPU block ids are handed out fresh (0, 1, 2, …) first, then reused
//! last-freed first.

use std::collections::BTreeMap;

use crate::vllm::block_hash::BlockKey;

/// A CPU tier event, as the connector publishes it (medium `CPU`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuEvent {
    /// Stored (true: `BlockStored`) or evicted (false: `BlockRemoved`).
    pub stored: bool,
    /// The blocks' keys, in the manager's order.
    pub keys: Vec<BlockKey>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// Position in recency order.
    seq: u64,
    /// −1: not ready; otherwise loads in flight.
    ref_cnt: i32,
    /// Its CPU block id.
    block_id: u32,
}

/// The LRU manager and its CPU backend.
#[derive(Clone, Debug)]
pub struct LruManager {
    num_blocks: u32,
    num_allocated: u32,
    free_list: Vec<u32>,
    blocks: BTreeMap<BlockKey, Entry>,
    order: BTreeMap<u64, BlockKey>,
    next_seq: u64,
    events: Option<Vec<CpuEvent>>,
    stored_total: u64,
    evicted_total: u64,
}

impl LruManager {
    /// A tier of `num_blocks` CPU blocks; events recorded or not.
    pub fn new(num_blocks: u32, record_events: bool) -> LruManager {
        LruManager {
            num_blocks,
            num_allocated: 0,
            free_list: Vec::new(),
            blocks: BTreeMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            events: record_events.then(Vec::new),
            stored_total: 0,
            evicted_total: 0,
        }
    }

    /// Blocks that became ready (stored) so far, and blocks evicted so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.stored_total, self.evicted_total)
    }

    /// Whether events are recorded.
    pub fn records_events(&self) -> bool {
        self.events.is_some()
    }

    /// Capacity in CPU blocks.
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// Free CPU blocks (the backend's count: never allocated plus freed).
    pub fn num_free(&self) -> u32 {
        self.free_list.len() as u32 + self.num_blocks - self.num_allocated
    }

    /// Blocks present (ready or not).
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is present.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Present blocks that are not ready (being stored).
    pub fn num_not_ready(&self) -> usize {
        self.blocks.values().filter(|e| e.ref_cnt < 0).count()
    }

    /// Loads in flight, summed over blocks.
    pub fn loads_in_flight(&self) -> u64 {
        self.blocks.values().map(|e| e.ref_cnt.max(0) as u64).sum()
    }

    /// Keys in recency order, least recent first, with their CPU ids and references.
    pub fn recency(&self) -> Vec<(BlockKey, u32, i32)> {
        self.order.values().map(|k| (*k, self.blocks[k].block_id, self.blocks[k].ref_cnt)).collect()
    }

    /// How many of `keys`, from the first, are present and ready.
    pub fn lookup(&self, keys: &[BlockKey]) -> usize {
        keys.iter().take_while(|k| self.blocks.get(k).is_some_and(|e| e.ref_cnt >= 0)).count()
    }

    /// Pin ready blocks for a load; their CPU ids in order.
    pub fn prepare_load(&mut self, keys: &[BlockKey]) -> Vec<u32> {
        keys.iter()
            .map(|k| {
                let e = self.blocks.get_mut(k).expect("a loaded block is present");
                debug_assert!(e.ref_cnt >= 0, "a loaded block is ready");
                e.ref_cnt += 1;
                e.block_id
            })
            .collect()
    }

    /// Move present blocks to the recent end, last key first.
    pub fn touch(&mut self, keys: &[BlockKey]) {
        for k in keys.iter().rev() {
            if let Some(e) = self.blocks.get_mut(k) {
                self.order.remove(&e.seq);
                e.seq = self.next_seq;
                self.order.insert(self.next_seq, *k);
                self.next_seq += 1;
            }
        }
    }

    /// A load finished: unpin.
    pub fn complete_load(&mut self, keys: &[BlockKey]) {
        for k in keys {
            let e = self.blocks.get_mut(k).expect("a loaded block is present");
            debug_assert!(e.ref_cnt > 0, "a loaded block was pinned");
            e.ref_cnt -= 1;
        }
    }

    /// Make room for and allocate the blocks of `keys` not yet present: `None` (nothing
    /// changed) when too few ready, unloaded blocks can be evicted; otherwise the keys to store
    /// and their CPU ids, in order.
    pub fn prepare_store(&mut self, keys: &[BlockKey]) -> Option<(Vec<BlockKey>, Vec<u32>)> {
        let to_store: Vec<BlockKey> = keys.iter().copied().filter(|k| !self.blocks.contains_key(k)).collect();
        let need = to_store.len() as i64 - i64::from(self.num_free());
        let mut evict = Vec::new();
        if need > 0 {
            for k in self.order.values() {
                if self.blocks[k].ref_cnt == 0 {
                    evict.push(*k);
                    if evict.len() as i64 == need {
                        break;
                    }
                }
            }
            if (evict.len() as i64) < need {
                return None;
            }
        }
        self.evicted_total += evict.len() as u64;
        for k in &evict {
            let e = self.blocks.remove(k).expect("an evicted block is present");
            self.order.remove(&e.seq);
            self.free_list.push(e.block_id);
        }
        if !evict.is_empty()
            && let Some(events) = &mut self.events
        {
            events.push(CpuEvent { stored: false, keys: evict });
        }
        let mut ids = Vec::with_capacity(to_store.len());
        for k in &to_store {
            let block_id = if self.num_allocated < self.num_blocks {
                self.num_allocated += 1;
                self.num_allocated - 1
            } else {
                self.free_list.pop().expect("room was made")
            };
            ids.push(block_id);
            self.blocks.insert(*k, Entry { seq: self.next_seq, ref_cnt: -1, block_id });
            self.order.insert(self.next_seq, *k);
            self.next_seq += 1;
        }
        Some((to_store, ids))
    }

    /// Stores finished: not-ready blocks among `keys` become ready (announced as stored).
    pub fn complete_store(&mut self, keys: &[BlockKey]) {
        let mut stored = Vec::new();
        for k in keys {
            let e = self.blocks.get_mut(k).expect("a stored block is present");
            if e.ref_cnt < 0 {
                e.ref_cnt = 0;
                stored.push(*k);
            }
        }
        self.stored_total += stored.len() as u64;
        if !stored.is_empty()
            && let Some(events) = &mut self.events
        {
            events.push(CpuEvent { stored: true, keys: stored });
        }
    }

    /// Events since the last call.
    pub fn take_events(&mut self) -> Vec<CpuEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_reverses_so_tail_blocks_are_evicted_first_and_ids_are_reused_last_freed_first() {
        let mut m = LruManager::new(3, true);
        let (keys, ids) = m.prepare_store(&[10, 11, 12]).unwrap();
        assert_eq!((keys, ids), (vec![10, 11, 12], vec![0, 1, 2]));
        // Not ready: not found, not evictable.
        assert_eq!(m.lookup(&[10]), 0);
        assert_eq!(m.prepare_store(&[20]), None);
        m.complete_store(&[10, 11, 12]);
        assert_eq!(m.lookup(&[10, 11, 12, 13]), 3);
        m.touch(&[10, 11, 12]);
        // Recency now 12, 11, 10 (10 most recent): a store of two evicts 12 then 11.
        let (_, ids) = m.prepare_store(&[20, 21]).unwrap();
        assert_eq!(ids, vec![1, 2]);
        let events = m.take_events();
        assert_eq!(events[1], CpuEvent { stored: false, keys: vec![12, 11] });
        // A pinned block is not evicted.
        m.prepare_load(&[10]);
        assert_eq!(m.prepare_store(&[30]), None);
        m.complete_load(&[10]);
        m.complete_store(&[20, 21]);
        assert_eq!(m.prepare_store(&[30]).unwrap().1, vec![0]);
    }
}

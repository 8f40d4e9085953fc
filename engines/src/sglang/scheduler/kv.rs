//! KV rows: slot allocation, checkpoints into the radix cache, release (`mem_cache/common.py`,
//! `allocation.py`).

use super::*;
use crate::sglang::radix_cache::Inserter;

impl Scheduler {
    /// The slot after `previous` in its page, or the first slot of a fresh page.
    pub(super) fn next_slot(&mut self, position: usize, previous: Option<u32>) -> u32 {
        match previous {
            Some(slot) if !position.is_multiple_of(self.page()) => slot + 1,
            _ => self.slots.take_page() * self.config.page_size,
        }
    }

    pub(super) fn evict_to_free(&mut self, count: usize) {
        let shortfall = count.saturating_sub(self.slots.available());
        if shortfall > 0 {
            let mut freed = Vec::new();
            self.tree.evict(shortfall, &mut freed);
            self.slots.give_back(&freed);
        }
    }

    pub(super) fn prepare_for_extend(&mut self, batch: &[RequestId]) {
        for &id in batch {
            if !self.requests[id].has_row {
                self.free_rows -= 1;
                self.requests[id].has_row = true;
            }
        }
        let total: usize =
            batch.iter().map(|&id| self.requests[id].extend_end - self.requests[id].prefix_len).sum();
        // Paged extends evict for a page more per request (`alloc_paged_token_slots_extend`).
        let paged_extra = if self.page() > 1 { batch.len() * self.page() } else { 0 };
        self.evict_to_free(total + paged_extra);
        for &id in batch {
            let prefix = self.requests[id].prefix_len;
            let end = self.requests[id].extend_end;
            if self.requests[id].row.len() < prefix {
                let mut matched = Vec::new();
                self.tree.prefix_slots(self.requests[id].last_node, &mut matched);
                self.requests[id].row = matched;
            }
            self.requests[id].row.truncate(prefix);
            for position in prefix..end {
                let previous = self.requests[id].row.last().copied();
                let slot = self.next_slot(position, previous);
                self.requests[id].row.push(slot);
            }
            let req = &mut self.requests[id];
            req.kv_allocated = end;
            req.kv_committed = end;
            req.is_retracted = false;
        }
    }

    /// `checkpoint_into_tree` up to `extend_end` (`checkpoint_kv_cache`).
    pub(super) fn checkpoint(&mut self, id: RequestId) {
        let up_to = self.requests[id].extend_end;
        self.insert_into_tree(id, up_to);
        self.requests[id].prefix_len = up_to;
    }

    pub(super) fn insert_into_tree(&mut self, id: RequestId, up_to: usize) {
        let page = self.page();
        let req = &self.requests[id];
        let tokens = &req.fill_ids[..up_to.min(req.fill_ids.len())];
        let aligned = tokens.len() / page * page;
        if aligned == 0 {
            return;
        }
        let values = &req.row[..aligned];
        let owner = Inserter {
            prev_prefix_len: req.cache_protected_len,
            inserted_len: req.cache_inserted_len,
            priority: 0,
        };
        let mut freed = Vec::new();
        let inserted = self.tree.insert(tokens, values, owner, &mut freed);
        let prompt = req.origin.len() / page * page;
        if 0 < prompt && prompt < aligned {
            let again = Inserter { prev_prefix_len: prompt, inserted_len: prompt, priority: 1 };
            self.tree.insert(&tokens[..prompt], &values[..prompt], again, &mut freed);
        }
        let req = &mut self.requests[id];
        req.cache_inserted_len = req.cache_inserted_len.max(aligned);
        self.slots.give_back(&freed);
        let mut path = Vec::new();
        self.tree.prefix_slots(inserted.node, &mut path);
        let req = &mut self.requests[id];
        let protected = req.cache_protected_len;
        req.row[protected..path.len()].copy_from_slice(&path[protected..]);
        if let Some(old) = req.lock.take() {
            self.tree.unlock(old);
        }
        self.tree.lock(inserted.node);
        let req = &mut self.requests[id];
        req.lock = Some(inserted.node);
        req.cache_protected_len = path.len();
        req.last_node = inserted.node;
    }

    /// `release_kv_cache`: give the request's row back, inserting it into the tree first if
    /// `checkpoint`.
    pub(super) fn release(&mut self, id: RequestId, checkpoint: bool) {
        let owned = self.requests[id].owned_kv_len();
        if checkpoint {
            self.requests[id].refresh_fill();
            self.insert_into_tree(id, owned);
        }
        let req = &mut self.requests[id];
        let protected = req.cache_protected_len.min(owned);
        let own: Vec<u32> = req.row[protected..owned].to_vec();
        let start = owned.div_ceil(self.config.page_size as usize) * self.config.page_size as usize;
        let extra: Vec<u32> =
            if start < req.kv_allocated { req.row[start..req.kv_allocated].to_vec() } else { Vec::new() };
        let lock = req.lock.take();
        req.has_row = false;
        req.row.clear();
        self.slots.give_back(&own);
        if let Some(node) = lock {
            self.tree.unlock(node);
        }
        self.slots.give_back(&extra);
        self.free_rows += 1;
    }

    /// A KV slot for each running request's next token (`prepare_for_decode`).
    pub(super) fn prepare_for_decode(&mut self) {
        self.evict_to_free(self.running.len() * self.page());
        for id in self.running.clone() {
            let position = self.requests[id].kv_committed;
            let previous = self.requests[id].row.last().copied();
            let slot = self.next_slot(position, previous);
            let req = &mut self.requests[id];
            req.row.push(slot);
            req.kv_allocated += 1;
            req.kv_committed += 1;
        }
    }
}

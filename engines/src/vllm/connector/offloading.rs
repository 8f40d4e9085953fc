//! vLLM 0.15.1's `OffloadingConnector`, scheduler side (`OffloadingConnectorScheduler` in
//! `distributed/kv_transfer/kv_connector/v1/offloading_connector.py`): GPU KV blocks copied to
//! a CPU tier and loaded back on a CPU hit.
//!
//! An offloaded block covers `factor = offloaded_block_size / block_size` GPU blocks and is keyed
//! by the last one's prefix key. Lookups touch every full offloaded block of the request, then
//! count ready CPU hits from the block holding the local GPU hit's end; a gain of less than one
//! offloaded block is no hit, and a hit on a block another request is loading (with GPU prefix
//! caching on) asks the scheduler to try again next step. Loads are always asynchronous. Stores
//! are planned per step for every block that becomes full (prompt or generated) and is not on
//! the CPU; a store the tier cannot make room for is retried next step. Stored blocks become
//! ready — loadable and announced — only when the worker reports the request's stores done,
//! which it does only after the request finishes, or when the request is preempted. Every
//! request that ever planned a store is delay-freed.

use std::collections::{BTreeMap, BTreeSet};

use super::ConnectorEvent;
use super::lru::LruManager;
use crate::vllm::block_hash::{BlockHash, BlockKey, event_value};
use crate::vllm::block_pool::BlockId;

/// One request's KV copy planned in a step: GPU block ids and CPU block ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferSpec {
    /// The request.
    pub key: u64,
    /// GPU block ids (for a load: the destination; for a store: the source, `factor` per CPU
    /// block).
    pub gpu_blocks: Vec<BlockId>,
    /// CPU block ids (for a load: the source; for a store: the destination).
    pub cpu_blocks: Vec<u32>,
}

/// A step's connector metadata: the loads and stores it plans, in vLLM's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffloadMeta {
    /// Loads, in the order they were planned (admission order).
    pub loads: Vec<TransferSpec>,
    /// Stores, new requests first then cached ones.
    pub stores: Vec<TransferSpec>,
}

/// What the scheduler tells the connector of one request scheduled this step.
#[derive(Clone, Copy, Debug)]
pub struct ScheduledRequest<'a> {
    /// Its key.
    pub key: u64,
    /// Blocks newly given this step (the whole table for a new or resumed request).
    pub new_blocks: Option<&'a [BlockId]>,
    /// Whether it resumes after a preemption.
    pub resumed: bool,
    /// Computed tokens plus those scheduled this step.
    pub total_tokens: u32,
    /// Prefix keys of its full GPU blocks so far.
    pub block_keys: &'a [BlockKey],
    /// SHA-256 hashes of its full GPU blocks (as many as were computed; for KV events only).
    pub block_hashes: &'a [BlockHash],
}

/// The offloading connector's scheduler-side state.
#[derive(Clone, Debug)]
pub struct OffloadingScheduler {
    gpu_block_size: u32,
    offloaded_block_size: u32,
    factor: usize,
    manager: LruManager,
    requests: BTreeSet<u64>,
    request_block_ids: BTreeMap<u64, Vec<BlockId>>,
    reqs_to_load: Vec<TransferSpec>,
    next_stored_block_idx: BTreeMap<u64, usize>,
    blocks_being_loaded: Option<BTreeSet<BlockKey>>,
    reqs_being_stored: BTreeMap<u64, BTreeSet<BlockKey>>,
    reqs_being_loaded: BTreeMap<u64, BTreeSet<BlockKey>>,
    cannot_store: u64,
    event_of: BTreeMap<BlockKey, u64>,
}

impl OffloadingScheduler {
    /// A connector over `num_cpu_blocks` CPU blocks of `offloaded_block_size` tokens (a multiple
    /// of the GPU `block_size`); GPU prefix caching on or off; CPU events recorded or not.
    pub fn new(
        block_size: u32,
        offloaded_block_size: u32,
        num_cpu_blocks: u32,
        prefix_caching: bool,
        record_events: bool,
    ) -> OffloadingScheduler {
        OffloadingScheduler {
            gpu_block_size: block_size,
            offloaded_block_size,
            factor: (offloaded_block_size / block_size) as usize,
            manager: LruManager::new(num_cpu_blocks, record_events),
            requests: BTreeSet::new(),
            request_block_ids: BTreeMap::new(),
            reqs_to_load: Vec::new(),
            next_stored_block_idx: BTreeMap::new(),
            blocks_being_loaded: prefix_caching.then(BTreeSet::new),
            reqs_being_stored: BTreeMap::new(),
            reqs_being_loaded: BTreeMap::new(),
            cannot_store: 0,
            event_of: BTreeMap::new(),
        }
    }

    /// The CPU tier.
    pub fn manager(&self) -> &LruManager {
        &self.manager
    }

    /// GPU blocks per offloaded block.
    pub fn factor(&self) -> usize {
        self.factor
    }

    /// Stores refused so far because the CPU tier was full of blocks it could not evict.
    pub fn cannot_store(&self) -> u64 {
        self.cannot_store
    }

    /// Keys of offloaded blocks `start..end` (all from `start` when `end` is `None`): the key
    /// of each one's last GPU block.
    fn keys(&self, gpu_keys: &[BlockKey], start: usize, end: Option<usize>) -> Vec<BlockKey> {
        let f = self.factor;
        let end = end.map_or(gpu_keys.len(), |e| (f * e).min(gpu_keys.len()));
        let first = f * start + f - 1;
        if first >= end {
            return Vec::new();
        }
        gpu_keys[first..end].iter().step_by(f).copied().collect()
    }

    /// `get_num_new_matched_tokens`: tokens loadable from the CPU beyond the local hit, and
    /// whether the load is asynchronous (always, when any); `None`: ask again next step.
    pub fn get_num_new_matched_tokens(
        &mut self,
        gpu_keys: &[BlockKey],
        num_tokens: u32,
        num_computed: u32,
    ) -> (Option<u32>, bool) {
        let obs = self.offloaded_block_size;
        let num_blocks = (num_tokens / obs) as usize;
        debug_assert_eq!(gpu_keys.len() / self.factor, num_blocks, "a key for every full block");
        let all = self.keys(gpu_keys, 0, None);
        self.manager.touch(&all);
        let full_block_tokens = i64::from(obs) * num_blocks as i64;
        if full_block_tokens - i64::from(num_computed) < i64::from(obs) {
            return (Some(0), false);
        }
        let start = (num_computed / obs) as usize;
        let hits = self.manager.lookup(&self.keys(gpu_keys, start, None));
        if hits == 0 {
            return (Some(0), false);
        }
        let hit_tokens = obs * (start + hits) as u32 - num_computed;
        if hit_tokens < obs {
            return (Some(0), false);
        }
        if let Some(loading) = &self.blocks_being_loaded
            && self.keys(gpu_keys, start, Some(start + hits)).iter().any(|k| loading.contains(k))
        {
            return (None, false);
        }
        (Some(hit_tokens), true)
    }

    /// `update_state_after_alloc`: register the request (its block list restarts empty) and,
    /// with external tokens, plan the load of its CPU hits into its blocks after the
    /// `num_hashed_blocks` local hits.
    pub fn update_state_after_alloc(
        &mut self,
        key: u64,
        gpu_keys: &[BlockKey],
        blocks: &[BlockId],
        num_hashed_blocks: usize,
        num_external: u32,
    ) {
        self.requests.insert(key);
        self.request_block_ids.insert(key, Vec::new());
        if num_external == 0 {
            return;
        }
        let computed = num_hashed_blocks as u32 * self.gpu_block_size;
        let full = computed + num_external;
        debug_assert_eq!(full % self.offloaded_block_size, 0);
        debug_assert_eq!(num_external, (blocks.len() - num_hashed_blocks) as u32 * self.gpu_block_size);
        let start = (computed / self.offloaded_block_size) as usize;
        let end = (full / self.offloaded_block_size) as usize;
        let keys = self.keys(gpu_keys, start, Some(end));
        let cpu_blocks = self.manager.prepare_load(&keys);
        self.reqs_to_load.push(TransferSpec {
            key,
            gpu_blocks: blocks[num_hashed_blocks..].to_vec(),
            cpu_blocks,
        });
        let loading = self.reqs_being_loaded.entry(key).or_default();
        loading.extend(keys.iter().copied());
        self.next_stored_block_idx.insert(key, end);
        if let Some(all) = &mut self.blocks_being_loaded {
            all.extend(loading.iter().copied());
        }
    }

    /// `build_connector_meta`: the loads planned since the last step and this step's stores;
    /// then the stores of requests preempted this step complete (their blocks become ready).
    pub fn build_connector_meta<'a>(
        &mut self,
        scheduled: impl Iterator<Item = ScheduledRequest<'a>>,
        preempted: &[u64],
    ) -> OffloadMeta {
        let loads = std::mem::take(&mut self.reqs_to_load);
        let mut stores = Vec::new();
        for r in scheduled {
            let ids = self.request_block_ids.entry(r.key).or_default();
            if r.resumed {
                ids.clear();
            }
            if let Some(new) = r.new_blocks {
                ids.extend_from_slice(new);
            }
            let num_blocks = (r.total_tokens / self.offloaded_block_size) as usize;
            let start = self.next_stored_block_idx.get(&r.key).copied().unwrap_or(0);
            if num_blocks <= start {
                continue;
            }
            let new_keys = self.keys(r.block_keys, start, Some(num_blocks));
            let Some((to_store, cpu_blocks)) = self.manager.prepare_store(&new_keys) else {
                self.cannot_store += 1;
                continue;
            };
            self.next_stored_block_idx.insert(r.key, num_blocks);
            if to_store.is_empty() {
                continue;
            }
            let f = self.factor;
            for (i, k) in new_keys.iter().enumerate() {
                if let Some(hash) = r.block_hashes.get((start + i) * f + f - 1)
                    && self.manager.records_events()
                    && to_store.contains(k)
                {
                    self.event_of.insert(*k, event_value(hash));
                }
            }
            let touched = self.keys(r.block_keys, 0, Some(num_blocks));
            self.manager.touch(&touched);
            let ids = &self.request_block_ids[&r.key];
            let mut gpu_blocks = Vec::with_capacity(to_store.len() * self.factor);
            for (i, k) in new_keys.iter().enumerate() {
                if to_store.contains(k) {
                    let first = (start + i) * self.factor;
                    gpu_blocks.extend_from_slice(&ids[first..first + self.factor]);
                }
            }
            stores.push(TransferSpec { key: r.key, gpu_blocks, cpu_blocks });
            self.reqs_being_stored.entry(r.key).or_default().extend(to_store);
        }
        for key in preempted {
            if let Some(keys) = self.reqs_being_stored.get_mut(key)
                && !keys.is_empty()
            {
                let keys: Vec<BlockKey> = std::mem::take(keys).into_iter().collect();
                self.manager.complete_store(&keys);
            }
        }
        OffloadMeta { loads, stores }
    }

    /// `update_connector_output`: stores of requests in `sending` and loads of requests in
    /// `recving` completed.
    pub fn update_connector_output(&mut self, sending: &[u64], recving: &[u64]) {
        for key in sending {
            if let Some(keys) = self.reqs_being_stored.remove(key)
                && !keys.is_empty()
            {
                self.manager.complete_store(&keys.into_iter().collect::<Vec<_>>());
            }
        }
        for key in recving {
            if let Some(keys) = self.reqs_being_loaded.remove(key)
                && !keys.is_empty()
            {
                if let Some(all) = &mut self.blocks_being_loaded {
                    for k in &keys {
                        all.remove(k);
                    }
                }
                self.manager.complete_load(&keys.into_iter().collect::<Vec<_>>());
            }
        }
    }

    /// `request_finished`: forget the request; its blocks are delay-freed if it ever planned a
    /// store. The connector returns no transfer parameters.
    pub fn request_finished(&mut self, key: u64) -> bool {
        self.requests.remove(&key);
        self.request_block_ids.remove(&key);
        self.next_stored_block_idx.remove(&key);
        self.reqs_being_stored.contains_key(&key)
    }

    /// CPU events since the last call, with the blocks' hashes in vLLM's event form.
    pub fn take_events(&mut self) -> Vec<ConnectorEvent> {
        self.manager
            .take_events()
            .into_iter()
            .map(|e| {
                let hashes = e.keys.iter().map(|k| self.event_of.get(k).copied().unwrap_or(0)).collect();
                ConnectorEvent { stored: e.stored, hashes, block_size: self.offloaded_block_size }
            })
            .collect()
    }

    /// Check the CPU tier against the connector's books, one line per broken rule (I12 in
    /// `docs/INVARIANTS.md`): CPU blocks are conserved (free + present = capacity, ids distinct);
    /// the blocks not ready are exactly those some request is storing; each ready block's
    /// loads in flight are the requests loading it.
    pub fn check(&self, violations: &mut Vec<String>) {
        let m = &self.manager;
        if m.num_free() as usize + m.len() != m.num_blocks() as usize {
            violations.push(format!(
                "I12 {} free + {} present CPU blocks != {} CPU blocks",
                m.num_free(),
                m.len(),
                m.num_blocks()
            ));
        }
        let recency = m.recency();
        let mut ids: Vec<u32> = recency.iter().map(|r| r.1).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != recency.len() || ids.last().is_some_and(|&i| i >= m.num_blocks()) {
            violations.push("I12 a CPU block id is held twice or out of range".to_owned());
        }
        let storing: BTreeSet<BlockKey> = self.reqs_being_stored.values().flatten().copied().collect();
        let not_ready: BTreeSet<BlockKey> = recency.iter().filter(|r| r.2 < 0).map(|r| r.0).collect();
        if storing != not_ready {
            violations.push(format!(
                "I12 {} CPU blocks are not ready but {} are being stored",
                not_ready.len(),
                storing.len()
            ));
        }
        for &(key, _, refs) in &recency {
            let loading = self.reqs_being_loaded.values().filter(|keys| keys.contains(&key)).count();
            if refs >= 0 && refs as usize != loading {
                violations.push(format!(
                    "I12 a CPU block has {refs} loads in flight but {loading} requests load it"
                ));
            }
        }
    }

    /// Requests with loads in flight (the connector's view).
    pub fn loading(&self) -> impl Iterator<Item = u64> + '_ {
        self.reqs_being_loaded.keys().copied()
    }
}

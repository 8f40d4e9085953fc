//! llm-d's precise prefix cache: the `precise-prefix-cache-producer`, which indexes the blocks
//! the engines report in their KV events, and the deprecated `precise-prefix-cache-scorer` that
//! wraps it with a `prefix-cache-scorer`.
//!
//! Upstream (llm-d-router v0.10.0): `pkg/epp/framework/plugins/requestcontrol/dataproducer/
//! preciseprefixcache/{producer,blockkeys,utils}.go`, `pkg/kvcache/{kvblock_scorer,backend}.go`,
//! `pkg/kvcache/kvblock/{token_processor,index,in_memory}.go`, `pkg/kvevents/{pool,
//! event_dedup_filter}.go` and `pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/`.
//!
//! Unlike the approximate producer, this index learns only from the engines: each
//! [`KvEventBatch`] an endpoint publishes is applied in order ([`PrecisePrefixProducer::apply_batch`],
//! upstream's `processEventBatch`). A `BlockStored` is re-keyed with the router's **own** block
//! keys, computed from its token ids ([`keys`]), and the engine's hashes are kept only as
//! identifiers, mapped to those keys so that a later `BlockRemoved` or a child's parent hash can
//! be resolved. Duplicate stores are reference-counted so only the last remove evicts. A request
//! is keyed the same way and scored by the longest run of leading keys each endpoint holds, each
//! key weighted by the best medium the endpoint holds it on (`kvCacheBackendConfigs`, GPU 1.0 and
//! CPU 0.8 by default).
//!
//! Endpoints are the caller's stable `u32` keys, standing for upstream's `address:port`.

mod config;
pub mod events;
mod index;
pub mod keys;
pub mod score;

use std::sync::Arc;

use smallvec::SmallVec;

pub use config::{
    Backend, DEFAULT_BLOCK_SIZE_TOKENS, DEFAULT_INDEX_SIZE, DEFAULT_POD_CACHE_SIZE, PRECISE_PRODUCER_TYPE,
    PRECISE_SCORER_TYPE, PreciseConfig,
};
pub use events::{KvEvent, KvEventBatch, Span};
pub use index::{KvBlockIndex, PodEntry};
pub use keys::TokenProcessor;
pub use score::{Lookup, PrefixScratch};

use crate::approx_prefix::PrefixMatchInfo;

/// The medium events without one are on (`normalizeDeviceTier`).
pub const DEFAULT_MEDIUM: &str = "gpu";

/// What the producer writes on one candidate: upstream's `PrefixCacheMatchInfo` with the
/// precise producer's extra counts.
#[derive(Clone, Debug, PartialEq)]
pub struct PreciseMatch {
    /// `matchBlocks` = ⌊Σ prompts' medium-weighted longest-prefix scores⌋, with `totalBlocks`
    /// and the router's block size.
    pub info: PrefixMatchInfo,
    /// `cachedBlockCount`: the unweighted leading keys the endpoint holds, summed over prompts.
    pub cached_blocks: u64,
    /// `cachedBlocksByTier`: per medium (by name), the leading keys held on that medium.
    pub cached_by_tier: SmallVec<[(Arc<str>, u64); 2]>,
}

/// Reference counts of one endpoint's announced stores, by (medium, engine hash)
/// (upstream's `eventDedupFilter` bucket).
type Refs = hashbrown::HashMap<(u16, u64), u32, std::hash::BuildHasherDefault<index::IdentityHasher>>;

/// Buffers reused across batches and requests.
#[derive(Clone, Debug, Default)]
struct Scratch {
    request_keys: Vec<u64>,
    kept: Vec<u64>,
    prompt_keys: Vec<u64>,
    prompt_ends: Vec<usize>,
    lookup: Lookup,
    is_candidate: Vec<bool>,
    prefix: PrefixScratch,
    started: Vec<u32>,
    aggregated: Vec<f64>,
    cached: Vec<u64>,
    by_tier: Vec<SmallVec<[(u16, u64); 2]>>,
}

/// The `precise-prefix-cache-producer`: the KV-block index fed by KV events, and its scoring.
#[derive(Clone, Debug)]
pub struct PrecisePrefixProducer {
    config: PreciseConfig,
    keys: TokenProcessor,
    index: KvBlockIndex,
    /// Media seen so far (normalised), with their weights.
    tiers: Vec<(Arc<str>, f64)>,
    refs: Vec<Refs>,
    subscribed: bool,
    scratch: Scratch,
}

impl PrecisePrefixProducer {
    /// A producer with an empty index (`config` as [`PreciseConfig::from_params`] built it).
    pub fn new(config: PreciseConfig) -> PrecisePrefixProducer {
        let keys = TokenProcessor::new(config.block_size_tokens, &config.hash_seed);
        let index = KvBlockIndex::new(config.index_size, config.pod_cache_size);
        let subscribed = !config.zmq_endpoint.is_empty();
        PrecisePrefixProducer {
            config,
            keys,
            index,
            tiers: Vec::new(),
            refs: Vec::new(),
            subscribed,
            scratch: Scratch::default(),
        }
    }

    /// Its parameters.
    pub fn config(&self) -> &PreciseConfig {
        &self.config
    }

    /// The router's block size, tokens.
    pub fn block_size(&self) -> u32 {
        self.keys.block_size()
    }

    /// Whether any engine's events reach it: in global-socket mode (`zmqEndpoint`) always; in
    /// per-endpoint mode only once the loader found it wired as an extractor of an
    /// `endpoint-notification-source` with `discoverPods` on — otherwise upstream subscribes to
    /// nothing and the index stays empty.
    pub fn subscribed(&self) -> bool {
        self.subscribed
    }

    /// Note that it is an extractor of an `endpoint-notification-source`.
    pub fn wire_endpoint_notifications(&mut self) {
        if self.config.discover_pods {
            self.subscribed = true;
        }
    }

    /// The index (for inspection).
    pub fn index(&self) -> &KvBlockIndex {
        &self.index
    }

    /// A medium's name, by the index entries' tier number.
    pub fn tier_name(&self, tier: u16) -> &str {
        &self.tiers[tier as usize].0
    }

    /// The keys the router gives `tokens` of `model` (for inspection and tests).
    pub fn block_keys(&mut self, model: &str, tokens: &[u32]) -> Vec<u64> {
        let mut out = Vec::new();
        self.keys.append_keys(None, tokens, model, &[], &mut out);
        out
    }

    /// The endpoints holding request key `key`, with the medium, least recently added first.
    pub fn holders(&self, key: u64) -> Vec<(u32, &str)> {
        self.index.entries(key).iter().map(|e| (e.endpoint, self.tier_name(e.tier))).collect()
    }

    /// `normalizeDeviceTier` (empty → `gpu`, else lower-cased), interned.
    fn tier(&mut self, medium: Option<&str>) -> u16 {
        let medium = medium.filter(|m| !m.is_empty()).unwrap_or(DEFAULT_MEDIUM);
        let lowered = |known: &str| known.chars().eq(medium.chars().flat_map(char::to_lowercase));
        if let Some(at) = self.tiers.iter().position(|(name, _)| lowered(name)) {
            return at as u16;
        }
        let name: Arc<str> = Arc::from(medium.to_lowercase());
        let weight = self.config.weight(&name);
        self.tiers.push((name, weight));
        (self.tiers.len() - 1) as u16
    }

    fn refs(&mut self, endpoint: u32) -> &mut Refs {
        let slot = endpoint as usize;
        if slot >= self.refs.len() {
            self.refs.resize_with(slot + 1, Refs::default);
        }
        &mut self.refs[slot]
    }

    /// Apply one batch `endpoint` published, serving `model` (upstream's `processEventBatch`).
    pub fn apply_batch(&mut self, endpoint: u32, model: &str, batch: &KvEventBatch) {
        for event in &batch.events {
            match event {
                KvEvent::BlockStored { hashes, parent, tokens, lora_name, medium, .. } => {
                    let tier = self.tier(medium.as_deref());
                    let entry = PodEntry { endpoint, tier };
                    let engine_keys = batch.hashes_of(*hashes);
                    let tokens = batch.tokens_of(*tokens);
                    let model = lora_name.as_deref().filter(|n| !n.is_empty()).unwrap_or(model);
                    // A parent the index cannot resolve drops the whole event.
                    let parent_key = match parent.filter(|&p| p != 0) {
                        Some(p) => match self.index.request_key(p) {
                            Some(key) => Some(key),
                            None => continue,
                        },
                        None => None,
                    };
                    let mut request_keys = std::mem::take(&mut self.scratch.request_keys);
                    request_keys.clear();
                    self.keys.append_keys(parent_key, tokens, model, &[], &mut request_keys);
                    let stored = if !request_keys.is_empty() {
                        self.index.add(Some(engine_keys), &request_keys, entry);
                        true
                    } else if tokens.is_empty() && !engine_keys.is_empty() {
                        // A medium update (e.g. an offload): the blocks' known keys gain an entry.
                        for &ek in engine_keys {
                            if let Some(rk) = self.index.request_key(ek)
                                && !request_keys.contains(&rk)
                            {
                                request_keys.push(rk);
                            }
                        }
                        let resolved = !request_keys.is_empty();
                        if resolved {
                            self.index.add(None, &request_keys, entry);
                        }
                        resolved
                    } else {
                        false
                    };
                    self.scratch.request_keys = request_keys;
                    if stored {
                        let refs = self.refs(endpoint);
                        for &h in engine_keys {
                            *refs.entry((tier, h)).or_insert(0) += 1;
                        }
                    }
                }
                KvEvent::BlockRemoved { hashes, medium } => {
                    let tier = self.tier(medium.as_deref());
                    let entry = PodEntry { endpoint, tier };
                    let mut kept = std::mem::take(&mut self.scratch.kept);
                    kept.clear();
                    let refs = self.refs(endpoint);
                    for &h in batch.hashes_of(*hashes) {
                        // Only the last reference evicts; an unknown hash passes through.
                        match refs.get_mut(&(tier, h)) {
                            Some(count) if *count > 1 => *count -= 1,
                            Some(_) => {
                                refs.remove(&(tier, h));
                                kept.push(h);
                            }
                            None => kept.push(h),
                        }
                    }
                    for &h in &kept {
                        self.index.evict_engine_key(h, entry);
                    }
                    self.scratch.kept = kept;
                }
                KvEvent::AllBlocksCleared => self.clear_endpoint(endpoint),
            }
        }
    }

    /// Forget everything `endpoint` holds, on every medium (an `AllBlocksCleared`, or the
    /// endpoint leaving the pool: `extractor.go::Extract` on delete).
    pub fn clear_endpoint(&mut self, endpoint: u32) {
        self.index.clear(endpoint);
        if let Some(refs) = self.refs.get_mut(endpoint as usize) {
            refs.clear();
        }
    }

    /// Key the request's prompts and score every candidate (upstream's `Produce`): `out` gets one
    /// [`PreciseMatch`] per candidate, in candidate order, or stays empty when no prompt fills a
    /// block (upstream then writes nothing). `endpoints` bounds the endpoint keys.
    pub fn produce(
        &mut self,
        model: &str,
        cache_salt: &[u8],
        prompts: &[&[u32]],
        candidates: &[u32],
        endpoints: usize,
        out: &mut Vec<PreciseMatch>,
    ) {
        out.clear();
        let mut s = std::mem::take(&mut self.scratch);
        s.prompt_keys.clear();
        s.prompt_ends.clear();
        for tokens in prompts {
            if self.keys.append_keys(None, tokens, model, cache_salt, &mut s.prompt_keys) > 0 {
                s.prompt_ends.push(s.prompt_keys.len());
            }
        }
        if s.prompt_ends.is_empty() {
            self.scratch = s;
            return;
        }
        s.aggregated.clear();
        s.aggregated.resize(endpoints, 0.0);
        s.cached.clear();
        s.cached.resize(endpoints, 0);
        s.is_candidate.clear();
        s.is_candidate.resize(endpoints, false);
        for &c in candidates {
            s.is_candidate[c as usize] = true;
        }
        s.by_tier.resize_with(candidates.len(), SmallVec::new);
        s.by_tier.iter_mut().for_each(SmallVec::clear);
        let mut start = 0;
        for p in 0..s.prompt_ends.len() {
            let end = s.prompt_ends[p];
            let Scratch { lookup, prompt_keys, is_candidate, .. } = &mut s;
            self.index.lookup(&prompt_keys[start..end], is_candidate, &mut lookup.entries, &mut lookup.ends);
            let tiers = &self.tiers;
            score::longest_prefix(
                &s.lookup,
                |tier| tiers[tier as usize].1,
                &mut s.prefix,
                &mut s.started,
                &mut s.aggregated,
            );
            for (i, &c) in candidates.iter().enumerate() {
                s.cached[c as usize] += score::matched_block_count(&s.lookup, c);
                score::matched_block_count_by_tier(&s.lookup, c, &mut s.by_tier[i]);
            }
            start = end;
        }
        let total_blocks = s.prompt_keys.len() as u64;
        let block_size_tokens = self.keys.block_size();
        for (i, &c) in candidates.iter().enumerate() {
            let e = c as usize;
            out.push(PreciseMatch {
                info: PrefixMatchInfo {
                    match_blocks: s.aggregated[e] as u64,
                    total_blocks,
                    block_size_tokens,
                    cached_block_count: s.cached[e],
                },
                cached_blocks: s.cached[e],
                cached_by_tier: s.by_tier[i]
                    .iter()
                    .map(|&(t, n)| (self.tiers[t as usize].0.clone(), n))
                    .collect(),
            });
        }
        self.scratch = s;
    }
}

#[cfg(test)]
mod tests;

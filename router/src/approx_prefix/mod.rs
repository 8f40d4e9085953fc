//! llm-d's approximate prefix cache: the `approx-prefix-cache-producer` and the
//! `prefix-cache-scorer` that reads what it produces.
//!
//! Upstream (llm-d-router v0.10.0, `pkg/epp/framework/plugins/`):
//! `requestcontrol/dataproducer/approximateprefix/{types,plugin,indexer}.go`,
//! `requestcontrol/dataproducer/prefixhash/hashing.go` and `scheduling/scorer/prefix/plugin.go`.
//! The router never sees engine caches here: it remembers which endpoint it *sent* each chain of
//! block hashes to, and a request's match on an endpoint is how many of its leading blocks that
//! endpoint was sent. Per request the scheduling cycle calls, in order:
//! 1. [`ApproxPrefixProducer::block_size`] with the first candidate's scraped `CacheBlockSize`;
//! 2. [`ApproxPrefixProducer::hash_request`] to hash the tokenized prompts;
//! 3. [`ApproxPrefixProducer::produce`] for one [`PrefixMatchInfo`] per candidate;
//! 4. after the pick, [`ApproxPrefixProducer::pre_request`] to record the targets. Upstream does
//!    this in a goroutine, so a request scheduled right after may not see it yet; we apply it
//!    when called, at the routing instant.
//!
//! Endpoints are the caller's stable `u32` keys. Upstream keys the index by endpoint ID, which
//! the datastore names `<pod>-rank-<i>` (`datastore.go::createEndpointNamespacedName`), so each
//! data-parallel rank has its own LRU, as each of our keys does.

mod config;
mod hashing;
mod index;
mod listings;
mod score;

use std::num::NonZeroUsize;

pub use config::{
    APPROX_PREFIX_PRODUCER_TYPE, ApproxPrefixConfig, DEFAULT_BLOCK_SIZE_TOKENS,
    DEFAULT_LRU_CAPACITY_PER_SERVER, DEFAULT_MAX_PREFIX_BLOCKS, DEFAULT_MAX_PREFIX_TOKENS,
    INACTIVE_ENDPOINT_SWEEP, MIN_BLOCK_SIZE_TOKENS,
};
pub use hashing::{
    PromptDigests, append_block_hashes, append_chain, block_digest, blocks, chain_link, chain_seed,
};
pub use score::{DEFAULT_MATCH_LENGTH_SCALE_TOKENS, PREFIX_SCORER_TYPE, PrefixScorerConfig};

use index::PrefixIndex;

/// What the producer tells the scorers about one candidate (upstream's `PrefixCacheMatchInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixMatchInfo {
    /// Leading blocks the endpoint was sent, summed over the request's prompts.
    pub match_blocks: u64,
    /// The request's blocks, summed over its prompts.
    pub total_blocks: u64,
    /// The block size the request was hashed with, tokens.
    pub block_size_tokens: u32,
    /// Leading blocks cached, unweighted by medium (upstream's `CachedBlockCount`: the precise
    /// producer's count before its medium weights; the approximate producer's is
    /// `match_blocks`). The prefix-based P/D decider reads it.
    pub cached_block_count: u64,
}

/// One request's block hashes, prompt by prompt, with the block size used; reusable across
/// requests so the per-request path does not allocate once its buffers have grown.
#[derive(Clone, Debug, Default)]
pub struct RequestHashes {
    hashes: Vec<u64>,
    /// End offset in `hashes` of each prompt that yielded at least one hash.
    prompt_ends: Vec<usize>,
    block_size: u32,
    /// [`ApproxPrefixProducer::produce`]'s scratch: matched blocks by endpoint key (dense), and
    /// the keys made non-zero, to reset.
    counts: Vec<u64>,
    touched: Vec<u32>,
}

impl RequestHashes {
    /// An empty buffer.
    pub fn new() -> RequestHashes {
        RequestHashes::default()
    }

    /// Each hashed prompt's chain, in prompt order (prompts that yielded no hash are absent, as
    /// upstream drops them).
    pub fn prompts(&self) -> impl Iterator<Item = &[u64]> + '_ {
        let starts = std::iter::once(0).chain(self.prompt_ends.iter().copied());
        starts.zip(self.prompt_ends.iter().copied()).map(|(start, end)| &self.hashes[start..end])
    }

    /// All prompts' hashes together (upstream's `totalBlocks`).
    pub fn total_blocks(&self) -> u64 {
        self.hashes.len() as u64
    }

    /// The block size the hashes were computed with, tokens.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    fn clear(&mut self, block_size: u32) {
        self.hashes.clear();
        self.prompt_ends.clear();
        self.block_size = block_size;
    }
}

/// The `approx-prefix-cache-producer`: hashes requests, matches them against the index of past
/// routing decisions, and records each decision.
#[derive(Clone, Debug)]
pub struct ApproxPrefixProducer {
    config: ApproxPrefixConfig,
    /// The block-size floor: [`MIN_BLOCK_SIZE_TOKENS`] except in tests that lower it as upstream's
    /// `disableMinBlockSizeClamp` does.
    min_block_size: u32,
    index: PrefixIndex,
}

impl ApproxPrefixProducer {
    /// A producer with an empty index (`config` as [`ApproxPrefixConfig::from_params`] built it).
    pub fn new(config: ApproxPrefixConfig) -> ApproxPrefixProducer {
        ApproxPrefixProducer { config, min_block_size: MIN_BLOCK_SIZE_TOKENS, index: PrefixIndex::default() }
    }

    /// The same producer with the block-size floor lowered (upstream's tests set it to 1).
    #[cfg(test)]
    fn with_min_block_size(mut self, floor: u32) -> ApproxPrefixProducer {
        self.min_block_size = floor;
        self
    }

    /// The producer's parameters.
    pub fn config(&self) -> &ApproxPrefixConfig {
        &self.config
    }

    /// The request's block size (upstream's `GetBlockSize`): `blockSizeTokens`, replaced under
    /// autoTune by the first candidate's `CacheBlockSize` when that is positive, then raised to the
    /// 64-token floor.
    pub fn block_size(&self, first_candidate_cache_block_size: Option<u32>) -> u32 {
        let mut size = self.config.block_size_tokens;
        if self.config.auto_tune
            && let Some(metric) = first_candidate_cache_block_size.filter(|&m| m > 0)
        {
            size = i64::from(metric);
        }
        if size < i64::from(self.min_block_size) {
            self.min_block_size
        } else {
            // Validated configs hold at most u32::MAX.
            u32::try_from(size).unwrap_or(u32::MAX)
        }
    }

    /// The block size and per-prompt block cap a request is hashed with when the first
    /// candidate scrapes `cache_block_size`: what prompt digests made ahead must be made for.
    pub fn hash_plan(&self, cache_block_size: Option<u32>) -> (u32, usize) {
        let block_size = self.block_size(cache_block_size);
        (block_size, self.max_blocks(block_size))
    }

    /// The per-prompt block cap at `block_size` (upstream's `resolveMaxBlocks`): ⌊tokens cap /
    /// block size⌋ when the token cap is set, else the block cap, both 0 meaning unlimited (and a
    /// negative block cap, which upstream accepts, hashing nothing).
    fn max_blocks(&self, block_size: u32) -> usize {
        let tokens = self.config.max_prefix_tokens_to_match;
        let capped = if tokens > 0 && block_size > 0 {
            tokens / i64::from(block_size)
        } else {
            match self.config.max_prefix_blocks_to_match {
                0 => return usize::MAX,
                blocks => blocks.max(0),
            }
        };
        usize::try_from(capped).unwrap_or(usize::MAX)
    }

    /// Hash a request's tokenized prompts into `out` (upstream's `GetBlockHashes`): every prompt
    /// chains from the seed of `model` (the target model after rewriting) and `cache_salt`.
    pub fn hash_request(
        &self,
        model: &str,
        cache_salt: &[u8],
        prompts: &[&[u32]],
        block_size: u32,
        out: &mut RequestHashes,
    ) {
        out.clear(block_size);
        let seed = chain_seed(model, cache_salt);
        let max_blocks = self.max_blocks(block_size);
        for tokens in prompts {
            if append_block_hashes(seed, tokens, block_size as usize, max_blocks, &mut out.hashes) > 0 {
                out.prompt_ends.push(out.hashes.len());
            }
        }
    }

    /// As [`Self::hash_request`] for one prompt whose block digests were made ahead, chaining
    /// them instead of reading its tokens; `false`, with nothing hashed, when they were made for
    /// another block size or cap.
    pub fn hash_digested(
        &self,
        model: &str,
        cache_salt: &[u8],
        digests: &PromptDigests,
        block_size: u32,
        out: &mut RequestHashes,
    ) -> bool {
        let Some(digests) = digests.made_for(block_size, self.max_blocks(block_size)) else {
            return false;
        };
        out.clear(block_size);
        if append_chain(chain_seed(model, cache_salt), digests.iter().copied(), &mut out.hashes) > 0 {
            out.prompt_ends.push(out.hashes.len());
        }
        true
    }

    /// One [`PrefixMatchInfo`] per candidate, in candidate order (upstream's `Produce` and
    /// `matchLongestPrefix`): per prompt, walk its hashes until one that no endpoint is listed
    /// under, crediting every listed endpoint one block per hash (it need not hold the earlier
    /// blocks); sum over prompts. `request` lends its scratch buffer.
    pub fn produce(&self, request: &mut RequestHashes, candidates: &[u32], out: &mut Vec<PrefixMatchInfo>) {
        let RequestHashes { hashes, prompt_ends, block_size, counts, touched } = request;
        let mut start = 0;
        for &end in prompt_ends.iter() {
            for &hash in &hashes[start..end] {
                let mut listed = false;
                for endpoint in self.index.holders(hash) {
                    listed = true;
                    let slot = endpoint as usize;
                    if slot >= counts.len() {
                        counts.resize(slot + 1, 0);
                    }
                    if counts[slot] == 0 {
                        touched.push(endpoint);
                    }
                    counts[slot] += 1;
                }
                if !listed {
                    break;
                }
            }
            start = end;
        }
        let total_blocks = hashes.len() as u64;
        out.clear();
        out.extend(candidates.iter().map(|&c| {
            let match_blocks = counts.get(c as usize).copied().unwrap_or(0);
            PrefixMatchInfo {
                match_blocks,
                total_blocks,
                block_size_tokens: *block_size,
                cached_block_count: match_blocks,
            }
        }));
        for endpoint in touched.drain(..) {
            counts[endpoint as usize] = 0;
        }
    }

    /// Record the routing decision (upstream's `PreRequest`): every prompt's hashes are added for
    /// each target in turn — the primary profile's first target, then the `prefill` profile's
    /// first target if that profile ran; pass none when the primary profile picked nothing
    /// (upstream then records nothing, prefill included). Each target carries its scraped
    /// `CacheNumBlocks`, which sizes its LRU if this is the endpoint's first entry.
    pub fn pre_request(&mut self, hashes: &RequestHashes, targets: &[(u32, Option<u64>)]) {
        for &(endpoint, cache_num_blocks) in targets {
            let capacity = self.lru_capacity(cache_num_blocks);
            for prompt in hashes.prompts() {
                self.index.add(endpoint, capacity, prompt);
            }
        }
    }

    /// A new LRU's capacity (upstream's `makeserver`): `CacheNumBlocks` under autoTune when
    /// positive, else `lruCapacityPerServer` when positive, else 31250.
    fn lru_capacity(&self, cache_num_blocks: Option<u64>) -> NonZeroUsize {
        const DEFAULT: NonZeroUsize = NonZeroUsize::new(DEFAULT_LRU_CAPACITY_PER_SERVER as usize).unwrap();
        // A metric beyond usize is beyond any LRU anyway (the index caps one at u32::MAX − 1).
        let from_metric = cache_num_blocks
            .filter(|_| self.config.auto_tune)
            .and_then(|n| NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX)));
        let from_config =
            usize::try_from(self.config.lru_capacity_per_server).ok().and_then(NonZeroUsize::new);
        from_metric.or(from_config).unwrap_or(DEFAULT)
    }

    /// Forget `endpoint` (upstream's `RemovePod`, run on endpoints that left the pool every
    /// [`INACTIVE_ENDPOINT_SWEEP`]); its phantom listings stay, as upstream's do.
    pub fn remove_endpoint(&mut self, endpoint: u32) {
        self.index.remove_endpoint(endpoint);
    }

    /// The endpoints the index holds an LRU for, ascending (upstream's `Pods`, for the sweep).
    pub fn tracked_endpoints(&self) -> impl Iterator<Item = u32> + '_ {
        self.index.endpoints()
    }

    /// How many blocks `endpoint`'s LRU holds (upstream's `PodBlockCounts`, for state dumps).
    pub fn indexed_blocks(&self, endpoint: u32) -> Option<usize> {
        self.index.block_count(endpoint)
    }
}

#[cfg(test)]
mod tests;

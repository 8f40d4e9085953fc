//! The producer's decisions: upstream's `approximateprefix/plugin_test.go` and
//! `prefixhash/hashing_test.go` cases re-expressed, then our own.
//!
//! Upstream's tests build `config{…}` literals, so every field they omit is Go's zero value
//! (autoTune off, both caps 0, capacity 0); [`zero`] is that literal. Tests that call upstream's
//! `disableMinBlockSizeClamp` use [`unclamped`] (floor 1).

use proptest::prelude::*;

use super::*;

const POD1: u32 = 1;
const POD2: u32 = 2;
const POD3: u32 = 3;

/// Go's zero `config{}`.
fn zero() -> ApproxPrefixConfig {
    ApproxPrefixConfig {
        auto_tune: false,
        block_size_tokens: 0,
        max_prefix_blocks_to_match: 0,
        max_prefix_tokens_to_match: 0,
        lru_capacity_per_server: 0,
    }
}

/// The config most upstream tests use: block size 1, block cap 2048, default capacity.
fn small_blocks() -> ApproxPrefixConfig {
    ApproxPrefixConfig {
        block_size_tokens: 1,
        max_prefix_blocks_to_match: DEFAULT_MAX_PREFIX_BLOCKS,
        lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        ..zero()
    }
}

/// A producer with the block-size floor lowered to 1 (upstream's `disableMinBlockSizeClamp`).
fn unclamped(config: ApproxPrefixConfig) -> ApproxPrefixProducer {
    ApproxPrefixProducer::new(config).with_min_block_size(1)
}

/// One request through block size, hashing and produce; `cache_block_size` is the first
/// candidate's scraped metric.
fn produce(
    p: &ApproxPrefixProducer,
    model: &str,
    prompts: &[&[u32]],
    candidates: &[u32],
    cache_block_size: Option<u32>,
) -> (RequestHashes, Vec<PrefixMatchInfo>) {
    let mut hashes = RequestHashes::new();
    let mut infos = Vec::new();
    p.hash_request(model, b"", prompts, p.block_size(cache_block_size), &mut hashes);
    p.produce(&mut hashes, candidates, &mut infos);
    (hashes, infos)
}

fn prompt_lens(hashes: &RequestHashes) -> Vec<usize> {
    hashes.prompts().map(<[u64]>::len).collect()
}

fn listed(p: &ApproxPrefixProducer, hash: u64) -> Vec<u32> {
    let mut v: Vec<u32> = p.index.holders(hash).collect();
    v.sort_unstable();
    v
}

fn info(match_blocks: u64, total_blocks: u64, block_size_tokens: u32) -> PrefixMatchInfo {
    PrefixMatchInfo { match_blocks, total_blocks, block_size_tokens, cached_block_count: match_blocks }
}

/// upstream: approximateprefix/plugin_test.go::TestProduce
#[test]
fn produce_on_an_empty_index() {
    let p = unclamped(small_blocks());
    let (hashes, infos) = produce(&p, "test-model1", &[&[1, 2]], &[POD1, POD2], None);
    assert_eq!(prompt_lens(&hashes), vec![2]);
    assert_eq!(infos, vec![info(0, 2, 1), info(0, 2, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestPreRequest, case "Basic cache update"
#[test]
fn pre_request_basic_cache_update() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "test-model1", &[&[1, 2]], &[POD1], None);
    p.pre_request(&hashes, &[(POD1, Some(0))]);
    for prompt in hashes.prompts() {
        for &h in prompt {
            assert_eq!(listed(&p, h), vec![POD1]);
        }
    }
}

/// upstream: approximateprefix/plugin_test.go::TestPreRequest, case "Respects
/// LRUCapacityPerServer config"
#[test]
fn pre_request_respects_lru_capacity_per_server() {
    let mut p = unclamped(ApproxPrefixConfig { lru_capacity_per_server: 2, ..small_blocks() });
    let mut first_hashes = Vec::new();
    for tokens in [[1u32], [2], [3]] {
        let (hashes, _) = produce(&p, "test-model1", &[&tokens], &[POD1], None);
        p.pre_request(&hashes, &[(POD1, Some(0))]);
        first_hashes.push(hashes.prompts().next().unwrap()[0]);
    }
    assert!(listed(&p, first_hashes[0]).is_empty());
    assert_eq!(listed(&p, first_hashes[1]), vec![POD1]);
    assert_eq!(listed(&p, first_hashes[2]), vec![POD1]);
}

/// upstream: approximateprefix/plugin_test.go::TestPrefixPluginPartialPrefixMatch
#[test]
fn partial_prefix_match() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "test-model1", &[&[1, 2]], &[POD1, POD2, POD3], None);
    assert_eq!(prompt_lens(&hashes), vec![2]);
    // pod1 picked by the primary profile, pod3 by "prefill".
    p.pre_request(&hashes, &[(POD1, None), (POD3, None)]);
    let (_, infos) = produce(&p, "test-model1", &[&[1, 3]], &[POD1, POD2, POD3], None);
    assert_eq!(infos, vec![info(1, 2, 1), info(0, 2, 1), info(1, 2, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestPrefixPluginPrefixGrowth
#[test]
fn prefix_growth() {
    let mut p = unclamped(ApproxPrefixConfig { block_size_tokens: 2, ..small_blocks() });
    let (hashes, _) = produce(&p, "test-model1", &[&[1, 2, 3, 4, 5, 6]], &[POD1], Some(0));
    assert_eq!(prompt_lens(&hashes), vec![3]);
    p.pre_request(&hashes, &[(POD1, Some(0))]);
    let grown: Vec<u32> = (1..=12).collect();
    let (hashes, infos) = produce(&p, "test-model1", &[&grown], &[POD1], Some(0));
    assert_eq!(prompt_lens(&hashes), vec![6]);
    // Upstream asserts a hit (> 0) and the total; the hit is exactly the 3 shared blocks.
    assert_eq!(infos, vec![info(3, 6, 2)]);
}

/// upstream: approximateprefix/plugin_test.go::TestPrefixPluginAutoTune (floor kept at 64)
#[test]
fn auto_tune_takes_block_size_and_capacity_from_metrics() {
    let mut p = ApproxPrefixProducer::new(ApproxPrefixConfig {
        auto_tune: true,
        block_size_tokens: 256,
        max_prefix_blocks_to_match: DEFAULT_MAX_PREFIX_BLOCKS,
        lru_capacity_per_server: 1,
        ..zero()
    });
    let tokens: Vec<u32> = (1..=192).collect();
    let (hashes, infos) = produce(&p, "test-model", &[&tokens], &[POD1], Some(128));
    assert_eq!(prompt_lens(&hashes), vec![2], "192 tokens at the pod's 128 → 2 blocks");
    assert_eq!(infos, vec![info(0, 2, 128)]);
    p.pre_request(&hashes, &[(POD1, Some(1000))]);
    assert_eq!(p.tracked_endpoints().collect::<Vec<_>>(), vec![POD1]);
    // Beyond upstream's assertion: the LRU was sized by CacheNumBlocks (1000), not the
    // configured 1, so both blocks stay.
    assert_eq!(p.indexed_blocks(POD1), Some(2));
    assert_eq!(p.index.capacity(POD1), Some(1000));
}

/// upstream: approximateprefix/plugin_test.go::TestMaxPrefixTokensToMatch
#[test]
fn max_prefix_tokens_to_match() {
    let p = unclamped(ApproxPrefixConfig {
        block_size_tokens: 1,
        max_prefix_tokens_to_match: 2,
        lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        ..zero()
    });
    let (hashes, _) = produce(&p, "test-model", &[&[1, 2, 3, 4]], &[POD1], None);
    assert_eq!(prompt_lens(&hashes), vec![2]);
    let p2 = unclamped(ApproxPrefixConfig {
        block_size_tokens: 1,
        max_prefix_blocks_to_match: 3,
        lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        ..zero()
    });
    let (hashes, _) = produce(&p2, "test-model", &[&[1, 2, 3, 4]], &[POD1], None);
    assert_eq!(prompt_lens(&hashes), vec![3]);
}

/// upstream: approximateprefix/plugin_test.go::TestMaxPrefixBothCapsZeroMatchesEverything
#[test]
fn max_prefix_both_caps_zero_matches_everything() {
    let p = unclamped(ApproxPrefixConfig {
        block_size_tokens: 1,
        lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        ..zero()
    });
    let (hashes, _) = produce(&p, "test-model", &[&[1, 2, 3, 4]], &[POD1], None);
    assert_eq!(prompt_lens(&hashes), vec![4]);
}

/// A token cap below the block size hashes nothing (upstream calls it a misconfiguration), and
/// so does a negative block cap, which upstream accepts.
#[test]
fn caps_that_hash_nothing() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig {
        max_prefix_tokens_to_match: 63,
        ..Default::default()
    });
    let tokens: Vec<u32> = (0..1000).collect();
    let (hashes, infos) = produce(&p, "m", &[&tokens], &[POD1], None);
    assert_eq!(hashes.total_blocks(), 0);
    assert_eq!(infos, vec![info(0, 0, 64)]);
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig {
        max_prefix_tokens_to_match: 0,
        max_prefix_blocks_to_match: -1,
        ..Default::default()
    });
    let (hashes, _) = produce(&p, "m", &[&tokens], &[POD1], None);
    assert_eq!(hashes.total_blocks(), 0);
    // The default token cap: ⌊131072 / 64⌋ = 2048 blocks.
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig::default());
    let long: Vec<u32> = (0..140_000).collect();
    let (hashes, _) = produce(&p, "m", &[&long], &[POD1], None);
    assert_eq!(hashes.total_blocks(), 2048);
}

/// upstream: approximateprefix/plugin_test.go::TestGetBlockSize_AutotuneClampsBelowMinimum
#[test]
fn get_block_size_autotune_clamps_below_minimum() {
    let p =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: true, block_size_tokens: 16, ..zero() });
    assert_eq!(p.block_size(Some(16)), MIN_BLOCK_SIZE_TOKENS);
}

/// upstream: approximateprefix/plugin_test.go::TestGetBlockSize_AutotuneAboveMinimumPassesThrough
#[test]
fn get_block_size_autotune_above_minimum_passes_through() {
    let p =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: true, block_size_tokens: 16, ..zero() });
    assert_eq!(p.block_size(Some(128)), 128);
}

/// upstream: approximateprefix/plugin_test.go::TestGetBlockSize_ManualConfigClampedBelowMinimum
#[test]
fn get_block_size_manual_config_clamped_below_minimum() {
    let p =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: false, block_size_tokens: 32, ..zero() });
    assert_eq!(p.block_size(None), MIN_BLOCK_SIZE_TOKENS);
}

/// upstream: approximateprefix/plugin_test.go::TestGetBlockSize_AutotuneFallbackClampsLowConfig
#[test]
fn get_block_size_autotune_fallback_clamps_low_config() {
    let p =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: true, block_size_tokens: 16, ..zero() });
    assert_eq!(p.block_size(None), MIN_BLOCK_SIZE_TOKENS);
}

/// The metric is ignored without autoTune and when it is 0; a non-positive configured size
/// (valid under autoTune) falls to the floor; large configured sizes pass.
#[test]
fn block_size_sources() {
    let manual =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: false, block_size_tokens: 96, ..zero() });
    assert_eq!(manual.block_size(Some(256)), 96);
    let tuned =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: true, block_size_tokens: 96, ..zero() });
    assert_eq!(tuned.block_size(Some(0)), 96);
    assert_eq!(tuned.block_size(Some(256)), 256);
    let zeroed =
        ApproxPrefixProducer::new(ApproxPrefixConfig { auto_tune: true, block_size_tokens: -5, ..zero() });
    assert_eq!(zeroed.block_size(None), 64);
    assert_eq!(ApproxPrefixProducer::new(ApproxPrefixConfig::default()).block_size(None), 64);
}

/// upstream: approximateprefix/plugin_test.go::TestProduce_MultiPrompt
#[test]
fn produce_multi_prompt() {
    let p = unclamped(small_blocks());
    let (hashes, infos) = produce(&p, "test-model", &[&[1, 2, 3], &[4, 5]], &[POD1], None);
    assert_eq!(prompt_lens(&hashes), vec![3, 2]);
    assert_eq!(infos, vec![info(0, 5, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestMultiPromptMatchAggregation
#[test]
fn multi_prompt_match_aggregation() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "test-model", &[&[1, 2, 3], &[4, 5]], &[POD1], None);
    p.pre_request(&hashes, &[(POD1, Some(0))]);
    let (_, infos) = produce(&p, "test-model", &[&[1, 2, 3], &[4, 5]], &[POD1], None);
    assert_eq!(infos, vec![info(5, 5, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestMultiPromptPartialMatch
#[test]
fn multi_prompt_partial_match() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "test-model", &[&[1, 2], &[3, 4]], &[POD1], None);
    p.pre_request(&hashes, &[(POD1, Some(0))]);
    let (_, infos) = produce(&p, "test-model", &[&[1, 2], &[5, 6]], &[POD1], None);
    assert_eq!(infos, vec![info(2, 4, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestPrefixPluginTokenizedRequest
#[test]
fn tokenized_request() {
    let p = unclamped(small_blocks());
    let (hashes, infos) = produce(&p, "test-model", &[&[10, 20, 30, 40]], &[POD1], None);
    assert_eq!(prompt_lens(&hashes), vec![4]);
    assert_eq!(infos, vec![info(0, 4, 1)]);
}

/// upstream: approximateprefix/plugin_test.go::TestPrefixPluginMatchesSameTokens (floor kept:
/// both requests hash as one 64-token block)
#[test]
fn matches_same_tokens() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig {
        block_size_tokens: 1,
        lru_capacity_per_server: DEFAULT_LRU_CAPACITY_PER_SERVER,
        ..zero()
    });
    let tokens = [1, 2, 3, 4, 5, 6, 7, 8];
    let (a, _) = produce(&p, "test-model", &[&tokens], &[POD1], None);
    let (b, _) = produce(&p, "test-model", &[&tokens], &[POD1], None);
    assert_eq!(a.prompts().collect::<Vec<_>>(), b.prompts().collect::<Vec<_>>());
    assert_eq!(prompt_lens(&a), vec![1]);
}

/// upstream: approximateprefix/plugin_test.go::TestDumpState (the per-pod block counts it dumps)
#[test]
fn dump_state_block_counts() {
    let mut index = PrefixIndex::default();
    let capacity = NonZeroUsize::new(100).unwrap();
    index.add(10, capacity, &[1001, 1002, 1003]);
    index.add(11, capacity, &[2001, 2002]);
    assert_eq!(index.block_count(10), Some(3));
    assert_eq!(index.block_count(11), Some(2));
    assert_eq!(index.endpoints().collect::<Vec<_>>(), vec![10, 11]);
}

/// upstream: prefixhash/hashing_test.go::TestGetBlockHashes (cases TokenizedPrompt,
/// MissingTokenizedPrompt, EmptyTokenIDs; NilRequest has no Rust counterpart)
#[test]
fn get_block_hashes() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig { max_prefix_blocks_to_match: 2048, ..zero() });
    let mut out = RequestHashes::new();
    p.hash_request("", b"", &[&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], 4, &mut out);
    assert_eq!(out.total_blocks(), 3);
    p.hash_request("", b"", &[], 4, &mut out);
    assert_eq!(out.total_blocks(), 0);
    p.hash_request("", b"", &[&[]], 4, &mut out);
    assert_eq!(out.total_blocks(), 0);
    assert_eq!(out.prompts().count(), 0);
}

/// upstream: prefixhash/hashing_test.go::TestGetBlockHashesCacheSalt
#[test]
fn get_block_hashes_cache_salt() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig { max_prefix_blocks_to_match: 2048, ..zero() });
    let (mut plain, mut salted) = (RequestHashes::new(), RequestHashes::new());
    p.hash_request("m", b"", &[&[1, 2, 3, 4]], 2, &mut plain);
    p.hash_request("m", b"salt", &[&[1, 2, 3, 4]], 2, &mut salted);
    assert_eq!(prompt_lens(&plain), prompt_lens(&salted));
    let (plain, salted): (Vec<&[u64]>, Vec<&[u64]>) = (plain.prompts().collect(), salted.prompts().collect());
    assert_ne!(plain, salted);
    // Beyond upstream's assertion: the salt changes every hash, not just the first.
    assert!(plain[0].iter().zip(salted[0]).all(|(a, b)| a != b));
}

/// upstream: prefixhash/hashing_test.go::TestGetBlockHashes_MultiPrompt (cases TwoPrompts,
/// ThreePromptsUnevenLengths, EmptyPromptSkipped)
#[test]
fn get_block_hashes_multi_prompt() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig { max_prefix_blocks_to_match: 2048, ..zero() });
    let mut out = RequestHashes::new();
    p.hash_request("model", b"", &[&[1, 2, 3, 4], &[5, 6, 7, 8]], 2, &mut out);
    assert_eq!(prompt_lens(&out), vec![2, 2]);
    p.hash_request("model", b"", &[&[1, 2, 3], &[4, 5], &[6]], 2, &mut out);
    assert_eq!(prompt_lens(&out), vec![2, 1, 1]);
    p.hash_request("model", b"", &[&[1, 2], &[], &[3, 4]], 2, &mut out);
    assert_eq!(prompt_lens(&out), vec![1, 1]);
}

/// upstream: prefixhash/hashing_test.go::TestGetBlockHashes_MultiPromptHashIndependence
#[test]
fn get_block_hashes_multi_prompt_hash_independence() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig { max_prefix_blocks_to_match: 2048, ..zero() });
    let (mut multi, mut single) = (RequestHashes::new(), RequestHashes::new());
    p.hash_request("model", b"", &[&[1, 2], &[3, 4]], 2, &mut multi);
    p.hash_request("model", b"", &[&[1, 2, 3, 4]], 2, &mut single);
    let (multi, single): (Vec<&[u64]>, Vec<&[u64]>) = (multi.prompts().collect(), single.prompts().collect());
    assert_eq!((multi.len(), single.len()), (2, 1));
    assert_eq!(multi[0][0], single[0][0]);
    assert_ne!(multi[1][0], single[0][1]);
}

/// The cap applies per prompt, not per request.
#[test]
fn block_cap_is_per_prompt() {
    let p = ApproxPrefixProducer::new(ApproxPrefixConfig { max_prefix_blocks_to_match: 2, ..zero() });
    let mut out = RequestHashes::new();
    p.hash_request("m", b"", &[&[1, 2, 3, 4], &[5, 6, 7]], 1, &mut out);
    assert_eq!(prompt_lens(&out), vec![2, 2]);
}

/// An endpoint is credited for every walked block it is listed under, even without the earlier
/// ones; the walk stops at the first block nobody is listed under, even if later ones are.
#[test]
fn the_walk_credits_holders_and_stops_at_the_first_unlisted_block() {
    let mut p = unclamped(small_blocks());
    let (abc, _) = produce(&p, "m", &[&[1, 2, 3]], &[], None);
    let chain: Vec<u64> = abc.prompts().next().unwrap().to_vec();
    // POD1 holds the whole chain; POD2 only its last two blocks (its LRU of 2 kept them).
    p.pre_request(&abc, &[(POD1, None)]);
    p.index.add(POD2, NonZeroUsize::new(2).unwrap(), &chain[1..]);
    let (_, infos) = produce(&p, "m", &[&[1, 2, 3]], &[POD2, POD1, POD3], None);
    assert_eq!(infos, vec![info(2, 3, 1), info(3, 3, 1), info(0, 3, 1)]);
    // Once nobody holds the first block, nobody matches anything.
    p.remove_endpoint(POD1);
    let (_, infos) = produce(&p, "m", &[&[1, 2, 3]], &[POD1, POD2], None);
    assert_eq!(infos, vec![info(0, 3, 1), info(0, 3, 1)]);
}

/// [Q] A prompt longer than the LRU leaves phantom listings that still count as matches.
#[test]
fn phantom_listings_count_as_matches() {
    let mut p = unclamped(ApproxPrefixConfig { lru_capacity_per_server: 2, ..small_blocks() });
    let (hashes, _) = produce(&p, "m", &[&[1, 2, 3, 4, 5]], &[POD1], None);
    p.pre_request(&hashes, &[(POD1, None)]);
    assert_eq!(p.indexed_blocks(POD1), Some(2));
    let (_, infos) = produce(&p, "m", &[&[1, 2, 3, 4, 5]], &[POD1], None);
    assert_eq!(infos, vec![info(5, 5, 1)], "all five blocks still match through the LRU of 2");
    // Even after the endpoint is removed, its first three blocks (phantoms) still match.
    p.remove_endpoint(POD1);
    let (_, infos) = produce(&p, "m", &[&[1, 2, 3, 4, 5]], &[POD1], None);
    assert_eq!(infos, vec![info(3, 5, 1)]);
}

/// Without a primary target nothing is recorded; a prefill target alone is the caller's choice.
#[test]
fn empty_targets_record_nothing() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "m", &[&[1, 2]], &[POD1], None);
    p.pre_request(&hashes, &[]);
    assert_eq!(p.tracked_endpoints().count(), 0);
    // A request with no hashes creates no LRU either (upstream never calls Add for it).
    let (empty, _) = produce(&p, "m", &[], &[POD1], None);
    p.pre_request(&empty, &[(POD1, Some(7))]);
    assert_eq!(p.tracked_endpoints().count(), 0);
}

/// LRU capacity sources, fixed when the endpoint's LRU is created.
#[test]
fn lru_capacity_sources() {
    let tuned =
        ApproxPrefixProducer::new(ApproxPrefixConfig { lru_capacity_per_server: 5, ..Default::default() });
    assert_eq!(tuned.lru_capacity(Some(900)).get(), 900);
    assert_eq!(tuned.lru_capacity(Some(0)).get(), 5);
    assert_eq!(tuned.lru_capacity(None).get(), 5);
    let manual = ApproxPrefixProducer::new(ApproxPrefixConfig {
        auto_tune: false,
        lru_capacity_per_server: 5,
        ..Default::default()
    });
    assert_eq!(manual.lru_capacity(Some(900)).get(), 5);
    let unset =
        ApproxPrefixProducer::new(ApproxPrefixConfig { lru_capacity_per_server: 0, ..Default::default() });
    assert_eq!(unset.lru_capacity(None).get(), 31_250);
    let negative =
        ApproxPrefixProducer::new(ApproxPrefixConfig { lru_capacity_per_server: -3, ..Default::default() });
    assert_eq!(negative.lru_capacity(None).get(), 31_250);
}

/// Duplicate and non-candidate endpoints: each candidate slot gets its endpoint's count, and
/// holders that are not candidates are simply not reported.
#[test]
fn candidates_may_repeat_and_holders_need_not_be_candidates() {
    let mut p = unclamped(small_blocks());
    let (hashes, _) = produce(&p, "m", &[&[1, 2]], &[], None);
    p.pre_request(&hashes, &[(POD1, None), (POD2, None)]);
    let (_, infos) = produce(&p, "m", &[&[1, 2]], &[POD2, POD2, POD3], None);
    assert_eq!(infos, vec![info(2, 2, 1), info(2, 2, 1), info(0, 2, 1)]);
}

/// Buffers are reused: after a warm-up, another request of the same shape grows nothing.
#[test]
fn buffers_are_reused_across_requests() {
    let mut p = ApproxPrefixProducer::new(ApproxPrefixConfig::default());
    let tokens: Vec<u32> = (0..2048).collect();
    let candidates = [POD1, POD2, POD3];
    let mut hashes = RequestHashes::new();
    let mut infos = Vec::new();
    let run = |p: &mut ApproxPrefixProducer, hashes: &mut RequestHashes, infos: &mut Vec<PrefixMatchInfo>| {
        p.hash_request("m", b"", &[&tokens], p.block_size(Some(16)), hashes);
        p.produce(hashes, &candidates, infos);
        p.pre_request(hashes, &[(POD2, Some(4096))]);
    };
    // Two warm-up requests: the second is the first to find the index populated.
    run(&mut p, &mut hashes, &mut infos);
    run(&mut p, &mut hashes, &mut infos);
    let shape =
        (hashes.hashes.capacity(), hashes.prompt_ends.capacity(), hashes.counts.capacity(), infos.capacity());
    let pointers = (hashes.hashes.as_ptr(), infos.as_ptr());
    run(&mut p, &mut hashes, &mut infos);
    assert_eq!(
        (hashes.hashes.capacity(), hashes.prompt_ends.capacity(), hashes.counts.capacity(), infos.capacity()),
        shape
    );
    assert_eq!((hashes.hashes.as_ptr(), infos.as_ptr()), pointers);
    assert_eq!(infos, vec![info(0, 32, 64), info(32, 32, 64), info(0, 32, 64)]);
}

proptest! {
    /// Determinism and bounds: the same request sequence gives the same infos on two producers;
    /// no endpoint matches more blocks than the request has; candidate order only permutes the
    /// output.
    #[test]
    fn decisions_are_deterministic_and_bounded(
        requests in proptest::collection::vec(
            (proptest::collection::vec(proptest::collection::vec(0u32..3, 0..9), 0..3), 0u32..4, 1i64..4),
            1..25,
        ),
    ) {
        let config = ApproxPrefixConfig { lru_capacity_per_server: 3, ..small_blocks() };
        let (mut a, mut b) = (unclamped(config.clone()), unclamped(config));
        let candidates = [0u32, 1, 2, 3];
        let reversed = [3u32, 2, 1, 0];
        for (prompts, target, block_size) in requests {
            let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let (mut ha, mut hb) = (RequestHashes::new(), RequestHashes::new());
            let (mut ia, mut ib, mut ir) = (Vec::new(), Vec::new(), Vec::new());
            a.hash_request("m", b"s", &prompts, block_size as u32, &mut ha);
            b.hash_request("m", b"s", &prompts, block_size as u32, &mut hb);
            a.produce(&mut ha, &candidates, &mut ia);
            b.produce(&mut hb, &candidates, &mut ib);
            a.produce(&mut ha, &reversed, &mut ir);
            prop_assert_eq!(&ia, &ib);
            ir.reverse();
            prop_assert_eq!(&ia, &ir);
            for i in &ia {
                prop_assert!(i.match_blocks <= i.total_blocks);
                prop_assert_eq!(i.total_blocks, ha.total_blocks());
            }
            a.pre_request(&ha, &[(target, None)]);
            b.pre_request(&hb, &[(target, None)]);
        }
    }
}

//! The precise producer's tests: upstream's own, ported (each names its upstream file and test),
//! then ours.

use std::sync::Arc;

use super::score::{Lookup, PrefixScratch, longest_prefix, matched_block_count, matched_block_count_by_tier};
use super::*;

/// A producer keying `block_size`-token blocks with seed `test`, as upstream's `newTestPool`.
fn producer(block_size: u32) -> PrecisePrefixProducer {
    PrecisePrefixProducer::new(PreciseConfig {
        block_size_tokens: block_size,
        hash_seed: "test".into(),
        ..PreciseConfig::default()
    })
}

/// `makeTokens`: `[1, 2, …, n]`.
fn tokens(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// `makeEngineKeys`: `[base, base + 1, …]`.
fn engine_keys(n: u64, base: u64) -> Vec<u64> {
    (base..base + n).collect()
}

fn medium(name: &str) -> Option<Arc<str>> {
    Some(Arc::from(name))
}

fn stored(hashes: &[u64], tokens: &[u32], medium_name: Option<&str>) -> KvEventBatch {
    let mut batch = KvEventBatch::new(0);
    batch.push_stored(hashes, None, tokens, 16, medium_name.map(Arc::from));
    batch
}

fn removed(hashes: &[u64], medium_name: Option<&str>) -> KvEventBatch {
    let mut batch = KvEventBatch::new(0);
    batch.push_removed(hashes, medium_name.map(Arc::from));
    batch
}

fn cleared() -> KvEventBatch {
    let mut batch = KvEventBatch::new(0);
    batch.push_cleared();
    batch
}

const MODEL: &str = "test-model";
const POD_A: u32 = 0;
const POD_B: u32 = 1;

// --- pkg/kvevents/pool_test.go ---

/// `pool_test.go::TestCanonicalWritePath_FallbackLegacy`: 1:1, every engine key resolves.
#[test]
fn canonical_write_path_fallback_legacy() {
    let mut p = producer(16);
    let ek = engine_keys(4, 500);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    let keys = p.block_keys(MODEL, &tokens(64));
    for (i, &e) in ek.iter().enumerate() {
        assert_eq!(p.index().mapped(e), &[keys[i]]);
    }
}

/// `pool_test.go::TestCanonicalWritePath_ManyToOne`: 8 engine keys of 16 tokens under 2 keys of 64.
#[test]
fn canonical_write_path_many_to_one() {
    let mut p = producer(64);
    let ek = engine_keys(8, 100);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(128), None));
    let keys = p.block_keys(MODEL, &tokens(128));
    assert_eq!(keys.len(), 2);
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu")]);
    }
    for (i, &e) in ek.iter().enumerate() {
        assert_eq!(p.index.request_key(e), Some(keys[i / 4]), "engine key {i}");
    }
}

/// `pool_test.go::TestCanonicalWritePath_OneToMany`: 2 engine keys of 128 tokens over 4 keys of 64;
/// evicting the first engine key evicts keys 0 and 1 only.
#[test]
fn canonical_write_path_one_to_many() {
    let mut p = producer(64);
    let ek = engine_keys(2, 200);
    p.apply_batch(POD_B, MODEL, &stored(&ek, &tokens(256), None));
    let keys = p.block_keys(MODEL, &tokens(256));
    assert_eq!(keys.len(), 4);
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_B, "gpu")]);
    }
    assert_eq!(p.index.request_key(ek[0]), Some(keys[1]), "an engine key resolves to its last key");
    assert_eq!(p.index.request_key(ek[1]), Some(keys[3]));
    p.apply_batch(POD_B, MODEL, &removed(&ek[..1], None));
    assert!(p.holders(keys[0]).is_empty() && p.holders(keys[1]).is_empty());
    assert_eq!(p.holders(keys[2]).len(), 1);
    assert_eq!(p.holders(keys[3]).len(), 1);
}

/// `pool_test.go::TestCanonicalEviction_Eager`.
#[test]
fn canonical_eviction_eager() {
    let mut p = producer(64);
    let ek = engine_keys(8, 100);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(128), None));
    let keys = p.block_keys(MODEL, &tokens(128));
    p.apply_batch(POD_A, MODEL, &removed(&ek[..1], None));
    assert!(p.holders(keys[0]).is_empty(), "key 0 goes with engine key 0");
    assert_eq!(p.holders(keys[1]), vec![(POD_A, "gpu")]);
    assert_eq!(p.index.request_key(ek[0]), None, "the evicted engine key no longer resolves");
}

/// `pool_test.go::TestCanonicalWritePath_CrossEngineScoring`: engines of block sizes 16 and 32
/// storing the same tokens land on the same keys.
#[test]
fn canonical_write_path_cross_engine_scoring() {
    let mut p = producer(64);
    p.apply_batch(POD_A, MODEL, &stored(&engine_keys(8, 100), &tokens(128), None));
    p.apply_batch(POD_B, MODEL, &stored(&engine_keys(4, 200), &tokens(128), None));
    for k in p.block_keys(MODEL, &tokens(128)) {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu"), (POD_B, "gpu")]);
    }
}

/// `pool_test.go::TestCanonicalEviction_UnknownEngineKey`.
#[test]
fn canonical_eviction_unknown_engine_key() {
    let mut p = producer(64);
    p.apply_batch(7, MODEL, &removed(&[999_999], None));
    assert!(p.index().is_empty());
}

/// `pool_test.go::TestBlockStoredEvent_OffloadingEmptyTokens`: a store with no tokens adds a medium
/// to the blocks already known.
#[test]
fn block_stored_event_offloading_empty_tokens() {
    let mut p = producer(16);
    let ek = engine_keys(4, 600);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    let keys = p.block_keys(MODEL, &tokens(64));
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu")]);
    }
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("CPU")));
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu"), (POD_A, "cpu")]);
    }
}

/// `pool_test.go::TestBlockStoredEvent_OffloadingUnknownEngineKeys`.
#[test]
fn block_stored_event_offloading_unknown_engine_keys() {
    let mut p = producer(16);
    p.apply_batch(9, MODEL, &stored(&engine_keys(4, 900), &[], Some("CPU")));
    assert!(p.index().is_empty());
}

/// `pool_test.go::TestBlockStoredEvent_EvictionOrderGPUThenCPU`.
#[test]
fn block_stored_event_eviction_order_gpu_then_cpu() {
    let mut p = producer(16);
    let ek = engine_keys(4, 700);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("CPU")));
    let keys = p.block_keys(MODEL, &tokens(64));
    for &k in &keys {
        assert_eq!(p.holders(k).len(), 2);
    }
    p.apply_batch(POD_A, MODEL, &removed(&ek, None));
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "cpu")], "the CPU copy survives the GPU eviction");
    }
    assert!(p.index.request_key(ek[0]).is_some(), "the mapping survives while the CPU copy lives");
    p.apply_batch(POD_A, MODEL, &removed(&ek, Some("CPU")));
    for &k in &keys {
        assert!(p.holders(k).is_empty());
    }
    assert_eq!(p.index.request_key(ek[0]), None);
}

/// `pool_test.go::TestCanonicalWritePath_PartialBlockDrop`: 48 tokens make no 64-token key.
#[test]
fn canonical_write_path_partial_block_drop() {
    let mut p = producer(64);
    p.apply_batch(3, MODEL, &stored(&engine_keys(3, 400), &tokens(48), None));
    assert!(p.index().is_empty());
    assert!(p.index().mapped(400).is_empty(), "no keys, so no mapping either");
}

/// `pool_test.go::TestAllBlocksCleared_Dispatch`.
#[test]
fn all_blocks_cleared_dispatch() {
    let mut p = producer(16);
    p.apply_batch(POD_A, MODEL, &stored(&engine_keys(4, 500), &tokens(64), None));
    p.apply_batch(POD_B, MODEL, &stored(&engine_keys(4, 900), &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &cleared());
    for k in p.block_keys(MODEL, &tokens(64)) {
        assert_eq!(p.holders(k), vec![(POD_B, "gpu")]);
    }
}

/// `pool_test.go::TestPool_AllBlocksClearedResetsDedup`.
#[test]
fn pool_all_blocks_cleared_resets_dedup() {
    let mut p = producer(16);
    let ek = engine_keys(4, 850);
    for _ in 0..2 {
        p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    }
    p.apply_batch(POD_A, MODEL, &cleared());
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &removed(&ek, None));
    for k in p.block_keys(MODEL, &tokens(64)) {
        assert!(p.holders(k).is_empty(), "one remove after the clear evicts");
    }
}

/// `pool_test.go::TestPool_DuplicateStoreSurvivesFirstRemove`.
#[test]
fn pool_duplicate_store_survives_first_remove() {
    let mut p = producer(16);
    let ek = engine_keys(4, 800);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    let keys = p.block_keys(MODEL, &tokens(64));
    p.apply_batch(POD_A, MODEL, &removed(&ek, None));
    for &k in &keys {
        assert_eq!(p.holders(k).len(), 1, "survives the first of two removes");
    }
    p.apply_batch(POD_A, MODEL, &removed(&ek, None));
    for &k in &keys {
        assert!(p.holders(k).is_empty());
    }
    assert_eq!(p.index.request_key(ek[0]), None);
}

/// `pool_test.go::TestPool_DuplicateCPUOffloadRemovalSurvivesFirstRemove`.
#[test]
fn pool_duplicate_cpu_offload_removal_survives_first_remove() {
    let mut p = producer(16);
    let ek = engine_keys(4, 900);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("CPU")));
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("CPU")));
    let keys = p.block_keys(MODEL, &tokens(64));
    p.apply_batch(POD_A, MODEL, &removed(&ek, Some("CPU")));
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu"), (POD_A, "cpu")]);
    }
    p.apply_batch(POD_A, MODEL, &removed(&ek, Some("CPU")));
    for &k in &keys {
        assert_eq!(p.holders(k), vec![(POD_A, "gpu")]);
    }
}

/// `pool_test.go::TestPool_DeviceTierUpdateWithNoResolvedKeysDoesNotTrack`: the unresolved
/// offload is not counted, so one CPU remove after a real CPU store evicts.
#[test]
fn pool_device_tier_update_with_no_resolved_keys_does_not_track() {
    let mut p = producer(16);
    let ek = engine_keys(4, 950);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("CPU")));
    assert!(p.refs.get(POD_A as usize).is_none_or(|r| r.is_empty()), "nothing tracked");
}

// --- pkg/kvevents/event_dedup_filter_test.go ---

/// `event_dedup_filter_test.go::TestEventDedupFilter_TierIndependence`: a GPU remove does not
/// consume a CPU store's reference.
#[test]
fn event_dedup_filter_tier_independence() {
    let mut p = producer(16);
    let ek = engine_keys(4, 10);
    p.apply_batch(POD_A, MODEL, &stored(&ek, &tokens(64), None));
    p.apply_batch(POD_A, MODEL, &stored(&ek, &[], Some("cpu")));
    p.apply_batch(POD_A, MODEL, &removed(&ek, Some("gpu")));
    for k in p.block_keys(MODEL, &tokens(64)) {
        assert_eq!(p.holders(k), vec![(POD_A, "cpu")]);
    }
}

/// `event_dedup_filter_test.go::TestEventDedupFilter_ClearIsolatesPods`.
#[test]
fn event_dedup_filter_clear_isolates_pods() {
    let mut p = producer(16);
    let ek = engine_keys(4, 10);
    for pod in [POD_A, POD_B] {
        p.apply_batch(pod, MODEL, &stored(&ek, &tokens(64), None));
        p.apply_batch(pod, MODEL, &stored(&ek, &tokens(64), None));
    }
    p.apply_batch(POD_A, MODEL, &cleared());
    p.apply_batch(POD_B, MODEL, &removed(&ek, None));
    for k in p.block_keys(MODEL, &tokens(64)) {
        assert_eq!(p.holders(k), vec![(POD_B, "gpu")], "pod B still holds one reference");
    }
}

// --- pkg/kvcache/kvblock/index_internal_test.go ---

/// `index_internal_test.go::TestEngineToRequestMapping_OneToOne`, `…_ManyToOne`, `…_OneToMany`.
#[test]
fn engine_to_request_mapping_proportions() {
    let mut index = KvBlockIndex::new(100, 10);
    let entry = PodEntry { endpoint: 0, tier: 0 };
    index.add(Some(&[1, 2]), &[10, 20], entry);
    assert_eq!((index.mapped(1), index.mapped(2)), (&[10][..], &[20][..]));
    index.add(Some(&[3, 4, 5, 6]), &[30], entry);
    for e in 3..=6 {
        assert_eq!(index.mapped(e), &[30]);
    }
    index.add(Some(&[7]), &[70, 71, 72, 73], entry);
    assert_eq!(index.mapped(7), &[70, 71, 72, 73]);
}

// --- pkg/kvcache/kvblock/in_memory_test.go ---

/// `in_memory_test.go::TestInMemoryIndexSize`: an index of size 2 keeps the two most recent keys.
#[test]
fn in_memory_index_size() {
    let mut index = KvBlockIndex::new(2, 1);
    let entry = PodEntry { endpoint: 0, tier: 0 };
    for key in [1, 2, 3] {
        index.add(None, &[key], entry);
    }
    assert_eq!(index.len(), 2);
    assert!(index.entries(1).is_empty(), "the oldest key is evicted");
    assert_eq!(index.entries(3), &[entry]);
}

/// `in_memory_test.go::TestInMemoryIndexPodCacheSize`: a key keeps its `podCacheSize` most recent
/// entries.
#[test]
fn in_memory_index_pod_cache_size() {
    let mut index = KvBlockIndex::new(10, 2);
    for pod in 0..3 {
        index.add(None, &[1], PodEntry { endpoint: pod, tier: 0 });
    }
    assert_eq!(index.entries(1), &[PodEntry { endpoint: 1, tier: 0 }, PodEntry { endpoint: 2, tier: 0 }]);
}

/// `index_test.go` "FilteredLookup": a lookup sees only the candidates.
#[test]
fn filtered_lookup() {
    let mut index = KvBlockIndex::new(10, 10);
    index.add(None, &[1], PodEntry { endpoint: 0, tier: 0 });
    index.add(None, &[1], PodEntry { endpoint: 1, tier: 0 });
    let (mut entries, mut ends) = (Vec::new(), Vec::new());
    index.lookup(&[1], &[false, true], &mut entries, &mut ends);
    assert_eq!((entries, ends), (vec![PodEntry { endpoint: 1, tier: 0 }], vec![1]));
}

// --- pkg/kvcache/kvblock_scorer_test.go ---

/// One key's entries as (endpoint, tier) pairs.
type Entries = &'static [(u32, u16)];

/// Per-tier counts, as (tier, count).
type ByTier = Vec<(u16, u64)>;

fn lookup_of(keys: &[Entries]) -> Lookup {
    let lists: Vec<Vec<PodEntry>> = keys
        .iter()
        .map(|k| k.iter().map(|&(endpoint, tier)| PodEntry { endpoint, tier }).collect())
        .collect();
    let refs: Vec<&[PodEntry]> = lists.iter().map(Vec::as_slice).collect();
    Lookup::of(&refs)
}

const GPU: u16 = 0;
const CPU: u16 = 1;

fn scores(lookup: &Lookup, cpu_weight: f64) -> Vec<f64> {
    let (mut scratch, mut started, mut out) = (PrefixScratch::default(), Vec::new(), Vec::new());
    longest_prefix(lookup, |t| if t == GPU { 1.0 } else { cpu_weight }, &mut scratch, &mut started, &mut out);
    out.resize(2, 0.0);
    out
}

/// `kvblock_scorer_test.go::TestLongestPrefixScorer`: gpu 1.0, cpu 0.5; A holds keys 1–3 (3 on both
/// media), B holds 4–5, A again 6 → A 3.0, B 0.
#[test]
fn longest_prefix_scorer() {
    let lookup = lookup_of(&[
        &[(POD_A, GPU)],
        &[(POD_A, GPU)],
        &[(POD_A, GPU), (POD_A, CPU)],
        &[(POD_B, CPU)],
        &[(POD_B, CPU)],
        &[(POD_A, GPU)],
    ]);
    assert_eq!(scores(&lookup, 0.5), vec![3.0, 0.0]);
}

/// `kvblock_scorer_test.go::TestLongestPrefixScorerDifferentTiers`: A's third key on CPU only →
/// 2.5.
#[test]
fn longest_prefix_scorer_different_tiers() {
    let lookup = lookup_of(&[
        &[(POD_A, GPU)],
        &[(POD_A, GPU)],
        &[(POD_A, CPU)],
        &[(POD_B, CPU)],
        &[(POD_B, CPU)],
        &[(POD_A, GPU)],
    ]);
    assert_eq!(scores(&lookup, 0.5), vec![2.5, 0.0]);
}

// --- preciseprefixcache/utils_test.go ---

/// `utils_test.go::TestMatchedBlockCount`, every case.
#[test]
fn matched_block_count_cases() {
    let cases: [(&str, Vec<Entries>, u64); 6] = [
        (
            "all blocks on cpu count fully",
            vec![&[(POD_A, CPU)], &[(POD_A, CPU)], &[(POD_A, CPU)], &[(POD_A, CPU)]],
            4,
        ),
        ("single cpu block counts one", vec![&[(POD_A, CPU)], &[], &[], &[]], 1),
        ("stops at the first missing block", vec![&[(POD_A, GPU)], &[(POD_A, GPU)], &[], &[(POD_A, GPU)]], 2),
        ("absent from the first block", vec![&[(POD_B, GPU)], &[(POD_A, GPU)], &[], &[]], 0),
        ("per pod", vec![&[(POD_A, GPU), (POD_B, CPU)], &[(POD_A, GPU)], &[(POD_B, CPU)], &[]], 2),
        ("empty index", vec![&[], &[], &[], &[]], 0),
    ];
    for (name, keys, want) in cases {
        assert_eq!(matched_block_count(&lookup_of(&keys), POD_A), want, "{name}");
    }
}

/// `utils_test.go::TestMatchedBlockCountByTier`, the cases without speculative entries (refused).
#[test]
fn matched_block_count_by_tier_cases() {
    let cases: [(&str, Vec<Entries>, ByTier); 5] = [
        (
            "one tier",
            vec![&[(POD_A, GPU)], &[(POD_A, GPU)], &[(POD_A, GPU)], &[(POD_A, GPU)]],
            vec![(GPU, 4)],
        ),
        (
            "dual-tier block counts once per tier",
            vec![&[(POD_A, GPU), (POD_A, CPU)], &[(POD_A, GPU)], &[], &[]],
            vec![(GPU, 2), (CPU, 1)],
        ),
        (
            "a tier's gap stops that tier only",
            vec![
                &[(POD_A, GPU), (POD_A, CPU)],
                &[(POD_A, GPU), (POD_A, CPU)],
                &[(POD_A, GPU)],
                &[(POD_A, GPU), (POD_A, CPU)],
            ],
            vec![(GPU, 4), (CPU, 2)],
        ),
        ("absent from the first block", vec![&[(POD_B, GPU)], &[(POD_A, GPU)], &[], &[]], vec![]),
        (
            "per pod",
            vec![&[(POD_A, GPU), (POD_B, CPU)], &[(POD_A, GPU), (POD_B, CPU)], &[(POD_B, CPU)], &[]],
            vec![(GPU, 2)],
        ),
    ];
    for (name, keys, want) in cases {
        let mut out = smallvec::SmallVec::new();
        matched_block_count_by_tier(&lookup_of(&keys), POD_A, &mut out);
        assert_eq!(out.to_vec(), want, "{name}");
    }
}

// --- preciseprefixcache/producer_test.go ---

/// `producer_test.go::TestProduce_UsesTokenizedPrompt`: one block on pod A → A (1, 1, 16), B (0, 1, 16).
#[test]
fn produce_uses_tokenized_prompt() {
    let mut p = producer(16);
    p.apply_batch(POD_A, MODEL, &stored(&[0xCAFE], &tokens(16), None));
    let mut out = Vec::new();
    p.produce(MODEL, &[], &[&tokens(20)], &[POD_A, POD_B], 2, &mut out);
    let infos: Vec<_> =
        out.iter().map(|m| (m.info.match_blocks, m.info.total_blocks, m.info.block_size_tokens)).collect();
    assert_eq!(infos, vec![(1, 1, 16), (0, 1, 16)]);
}

/// `producer_test.go::TestProduce_NoTokens_NoOp`, `::TestProduce_EmptyTokenizedPrompt_NoOp`,
/// `::TestProduce_MultiPromptEmptyBlockKeys_NoOp`: nothing is written.
#[test]
fn produce_without_a_full_block_writes_nothing() {
    let mut p = producer(16);
    let mut out = Vec::new();
    for prompts in
        [vec![], vec![&[][..]], vec![&[1u32, 2, 3, 4, 5, 6, 7, 8][..], &[9, 10, 11, 12, 13, 14, 15, 16][..8]]]
    {
        p.produce(MODEL, &[], &prompts, &[POD_A, POD_B], 2, &mut out);
        assert!(out.is_empty());
    }
}

/// `producer_test.go::TestProduce_MultiPromptSkipsEmptyPromptKeys`: the short prompt adds no block.
#[test]
fn produce_multi_prompt_skips_empty_prompt_keys() {
    let mut p = producer(16);
    let full: Vec<u32> = (20..36).collect();
    p.apply_batch(POD_A, MODEL, &stored(&[0xCAFE], &full, None));
    let mut out = Vec::new();
    p.produce(MODEL, &[], &[&tokens(8), &full], &[POD_A, POD_B], 2, &mut out);
    assert_eq!((out[0].info.match_blocks, out[0].info.total_blocks), (1, 1));
    assert_eq!((out[1].info.match_blocks, out[1].info.total_blocks), (0, 1));
}

/// `producer_test.go::TestProduce_WritesCachedBlocksByTier`: prompt A's block 0 on gpu and cpu,
/// block 1 on gpu; prompt B's block on both → cached 3, gpu 3, cpu 2; pod B empty.
#[test]
fn produce_writes_cached_blocks_by_tier() {
    let mut p = producer(4);
    let (prompt_a, prompt_b): (Vec<u32>, Vec<u32>) = ((1..=8).collect(), (20..24).collect());
    let mut batch = KvEventBatch::new(0);
    batch.push_stored(&[0xA1, 0xA2], None, &prompt_a, 4, None);
    batch.push_stored(&[0xA1], None, &[], 4, medium("cpu"));
    batch.push_stored(&[0xB1], None, &prompt_b, 4, None);
    batch.push_stored(&[0xB1], None, &[], 4, medium("cpu"));
    p.apply_batch(POD_A, MODEL, &batch);
    let mut out = Vec::new();
    p.produce(MODEL, &[], &[&prompt_a, &prompt_b], &[POD_A, POD_B], 2, &mut out);
    assert_eq!(out[0].cached_blocks, 3);
    assert_eq!(out[0].cached_by_tier.to_vec(), vec![(Arc::from("gpu"), 3), (Arc::from("cpu"), 2)]);
    assert_eq!(out[1].cached_blocks, 0);
    assert!(out[1].cached_by_tier.is_empty());
}

/// `producer_test.go::TestProduce_FoldsCacheSalt` ("salt only"): the salt taints block 0, so a
/// salted prompt misses what the unsalted one stored, and later blocks differ too (they chain).
#[test]
fn produce_folds_cache_salt() {
    let mut p = producer(16);
    let prompt = tokens(32);
    let mut salted = Vec::new();
    p.keys.append_keys(None, &prompt, MODEL, b"s3cr3t", &mut salted);
    let plain = p.block_keys(MODEL, &prompt);
    assert_ne!(salted[0], plain[0]);
    assert_ne!(salted[1], plain[1]);
    p.apply_batch(POD_A, MODEL, &stored(&[1, 2], &prompt, None));
    let mut out = Vec::new();
    p.produce(MODEL, b"s3cr3t", &[&prompt], &[POD_A], 1, &mut out);
    assert_eq!(out[0].info.match_blocks, 0);
    p.produce(MODEL, &[], &[&prompt], &[POD_A], 1, &mut out);
    assert_eq!(out[0].info.match_blocks, 2);
}

/// `producer_test.go::TestNew_BlockSizeFlowsViaTokenProcessor` and
/// `token_processor_test.go::TestNewChunkedTokenDatabase_Validation`,
/// `::TestBlockSizeTokensPrecedence`, `::TestBackwardCompatibility_BlockSize`.
#[test]
fn block_size_resolution() {
    let size = |params: serde_json::Value| {
        PreciseConfig::from_params(Some(&params), PRECISE_PRODUCER_TYPE).map(|(c, _)| c.block_size_tokens)
    };
    let j = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    assert_eq!(size(j(r#"{"tokenProcessorConfig":{"blockSize":64}}"#)), Ok(64));
    assert_eq!(size(j(r#"{"tokenProcessorConfig":{"blockSizeTokens":64}}"#)), Ok(64));
    assert_eq!(size(j(r#"{"tokenProcessorConfig":{"blockSizeTokens":0}}"#)), Ok(16));
    assert_eq!(size(j(r#"{"tokenProcessorConfig":{"blockSize":8,"blockSizeTokens":16}}"#)), Ok(16));
    assert_eq!(size(j(r#"{"tokenProcessorConfig":{"hashSeed":"x"}}"#)), Ok(16));
    let e = size(j(r#"{"tokenProcessorConfig":{"blockSizeTokens":-1}}"#)).unwrap_err();
    assert!(e.reason.contains("blockSizeTokens must be greater than 0, got -1"), "{e}");
    let e = size(j(r#"{"tokenProcessorConfig":{"blockSize":-5}}"#)).unwrap_err();
    assert!(e.reason.contains("blockSizeTokens must be greater than 0, got -5"), "{e}");
    assert_eq!(e.path, "tokenProcessorConfig.blockSize");
    let mut p = producer(64);
    let mut out = Vec::new();
    p.produce("m", &[], &[&tokens(64)], &[0], 1, &mut out);
    assert_eq!((out[0].info.block_size_tokens, out[0].info.total_blocks), (64, 1));
}

/// `producer_test.go::TestPluginFactory_RejectsTokenizersPoolConfig` and
/// `::TestNewRejectsUnsupportedKVEventEngineType`.
#[test]
fn plugin_factory_refusals() {
    let j = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap();
    let e = PreciseConfig::from_params(
        Some(&j(r#"{"indexerConfig":{"tokenizersPoolConfig":{"modelName":"x"}}}"#)),
        PRECISE_PRODUCER_TYPE,
    )
    .unwrap_err();
    assert!(e.reason.contains("tokenizersPoolConfig is not supported"), "{e}");
    let e = PreciseConfig::from_params(
        Some(&j(r#"{"kvEventsConfig":{"engineType":"unsupported"}}"#)),
        PRECISE_PRODUCER_TYPE,
    )
    .unwrap_err();
    assert!(e.reason.contains(r#"unsupported engine type: "unsupported""#), "{e}");
    assert_eq!(e.path, "kvEventsConfig.engineType");
    assert_eq!(e.value.as_deref(), Some("\"unsupported\""));
}

// --- pkg/kvcache/kvblock/token_processor_test.go ---

/// `token_processor_test.go::TestGetInitHash_DifferentHashesForDifferentModels`,
/// `::TestGetInitHash_DifferentSeedsProduceDifferentHashes`, `::TestGetInitHash_Deterministic`.
#[test]
fn init_hash_depends_on_model_and_seed_only() {
    let first = |seed: &str, model: &str| TokenProcessor::new(4, seed).append_keys_vec(model);
    assert_eq!(first("s", "m1"), first("s", "m1"));
    assert_ne!(first("s", "m1"), first("s", "m2"));
    assert_ne!(first("s1", "m"), first("s2", "m"));
}

impl TokenProcessor {
    fn append_keys_vec(&mut self, model: &str) -> u64 {
        let mut out = Vec::new();
        self.append_keys(None, &[1, 2, 3, 4], model, &[], &mut out);
        out[0]
    }
}

/// `token_processor_test.go::TestHeterogeneousBlockSizeSupport`: a parent key continues a chain,
/// so keying a prompt in two events equals keying it at once.
#[test]
fn a_parent_key_continues_the_chain() {
    let mut p = TokenProcessor::new(4, "");
    let (mut whole, mut split) = (Vec::new(), Vec::new());
    p.append_keys(None, &tokens(12), "m", &[], &mut whole);
    p.append_keys(None, &tokens(4), "m", &[], &mut split);
    let parent = split[0];
    p.append_keys(Some(parent), &tokens(12)[4..], "m", &[], &mut split);
    assert_eq!(whole, split);
}

// --- ours ---

/// The index after a sequence of KV events from two endpoints on two media, written out, with
/// the scores a request then gets (block size 4, gpu 1.0, cpu 0.8).
///
/// 1. A stores blocks a0 a1 a2 (engine hashes 1 2 3) on GPU; B stores a0 a1 (hashes 11 12).
/// 2. A offloads a0 a1 to CPU (a store with no tokens); A's GPU copies of a1 a2 are removed.
/// 3. B stores a2 as a child of its hash 12 (the parent resolves through the index).
/// 4. B clears everything; A's CPU copy of a1 is removed.
#[test]
fn the_index_after_stores_removes_offloads_and_a_clear_on_two_media() {
    let mut p = producer(4);
    let prompt = tokens(12);
    let k = p.block_keys(MODEL, &prompt);
    let score = |p: &mut PrecisePrefixProducer| {
        let mut out = Vec::new();
        p.produce(MODEL, &[], &[&prompt], &[POD_A, POD_B], 2, &mut out);
        out.iter().map(|m| (m.info.match_blocks, m.cached_blocks)).collect::<Vec<_>>()
    };
    let mut batch = KvEventBatch::new(0);
    batch.push_stored(&[1, 2, 3], None, &prompt, 4, medium("GPU"));
    p.apply_batch(POD_A, MODEL, &batch);
    p.apply_batch(POD_B, MODEL, &stored(&[11, 12], &prompt[..8], Some("GPU")));
    assert_eq!(p.holders(k[0]), vec![(POD_A, "gpu"), (POD_B, "gpu")]);
    assert_eq!(p.holders(k[1]), vec![(POD_A, "gpu"), (POD_B, "gpu")]);
    assert_eq!(p.holders(k[2]), vec![(POD_A, "gpu")]);
    assert_eq!(score(&mut p), vec![(3, 3), (2, 2)]);

    p.apply_batch(POD_A, MODEL, &stored(&[1, 2], &[], Some("CPU")));
    p.apply_batch(POD_A, MODEL, &removed(&[2, 3], Some("GPU")));
    assert_eq!(p.holders(k[0]), vec![(POD_A, "gpu"), (POD_B, "gpu"), (POD_A, "cpu")]);
    assert_eq!(p.holders(k[1]), vec![(POD_B, "gpu"), (POD_A, "cpu")]);
    assert!(p.holders(k[2]).is_empty());
    assert_eq!(p.index().mapped(3), &[] as &[u64], "a2's mapping went with its last copy");
    // A: 1.0 (a0 on GPU) + 0.8 (a1 on CPU) = 1.8 → 1 block; B: 2.
    assert_eq!(score(&mut p), vec![(1, 2), (2, 2)]);

    let mut child = KvEventBatch::new(0);
    child.push_stored(&[13], Some(12), &prompt[8..], 4, medium("GPU"));
    p.apply_batch(POD_B, MODEL, &child);
    assert_eq!(p.holders(k[2]), vec![(POD_B, "gpu")], "the child's key chains from its parent's");
    assert_eq!(score(&mut p), vec![(1, 2), (3, 3)]);

    p.apply_batch(POD_B, MODEL, &cleared());
    p.apply_batch(POD_A, MODEL, &removed(&[2], Some("CPU")));
    assert_eq!(p.holders(k[0]), vec![(POD_A, "gpu"), (POD_A, "cpu")]);
    assert!(p.holders(k[1]).is_empty() && p.holders(k[2]).is_empty());
    assert_eq!(score(&mut p), vec![(1, 1), (0, 0)]);
    // A child of a hash the index never saw is dropped whole.
    let mut orphan = KvEventBatch::new(0);
    orphan.push_stored(&[99], Some(98), &prompt[8..], 4, medium("GPU"));
    p.apply_batch(POD_B, MODEL, &orphan);
    assert!(p.holders(k[2]).is_empty());
}

/// Configured medium weights apply by normalised name; an unnamed medium weighs 1.
#[test]
fn medium_weights_follow_the_backend_configs() {
    let mut p = PrecisePrefixProducer::new(PreciseConfig {
        block_size_tokens: 4,
        backends: vec![
            Backend { name: "gpu".into(), weight: 1.0 },
            Backend { name: "cpu".into(), weight: 0.25 },
        ],
        ..PreciseConfig::default()
    });
    let prompt = tokens(16);
    let ek = [1, 2, 3, 4];
    p.apply_batch(POD_A, MODEL, &stored(&ek, &prompt, Some("disk")));
    p.apply_batch(POD_B, MODEL, &stored(&[5, 6, 7, 8], &prompt, Some("CPU")));
    let mut out = Vec::new();
    p.produce(MODEL, &[], &[&prompt], &[POD_A, POD_B], 2, &mut out);
    assert_eq!(out[0].info.match_blocks, 4, "disk is not configured: weight 1");
    assert_eq!(out[1].info.match_blocks, 1, "4 × 0.25");
}

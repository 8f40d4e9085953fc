//! Decision-level tests of the SGLang radix cache's subtle rules, each expected outcome written
//! out (SGLang 0.5.23, `unified_tree_core.py` and `components/full.py`).

use blis_engines::sglang::radix_cache::{
    EvictionPolicy, Insert, Inserter, ROOT, RadixCache, RadixCacheError,
};

fn cache(page_size: u32) -> RadixCache {
    RadixCache::new(page_size, EvictionPolicy::Lru).expect("a valid page size")
}

/// A request owning the first `prev_prefix_len` tokens in the tree, inserting for the first time.
fn owning(prev_prefix_len: usize) -> Inserter {
    Inserter { prev_prefix_len, inserted_len: 0, priority: 0 }
}

fn tree(cache: &RadixCache) -> Vec<(Vec<u32>, Vec<u32>, u32)> {
    cache.depth_first().iter().map(|n| (n.key.to_vec(), n.slots.to_vec(), n.lock_ref)).collect()
}

#[test]
fn keys_are_cut_to_whole_pages_on_insert_and_match() {
    let mut c = cache(4);
    let mut freed = Vec::new();
    // Ten tokens on pages of four: the tree takes eight; the caller keeps the last two slots.
    let inserted = c.insert(
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        &[11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
        owning(0),
        &mut freed,
    );
    assert_eq!(inserted.prefix_len, 0);
    assert!(freed.is_empty());
    assert_eq!(tree(&c), vec![(vec![1, 2, 3, 4, 5, 6, 7, 8], vec![11, 12, 13, 14, 15, 16, 17, 18], 0)]);
    assert_eq!(c.evictable_size(), 8);
    // Seven matching tokens match one page; three match nothing (no stamp, no split).
    assert_eq!(c.match_prefix(&[1, 2, 3, 4, 5, 6, 7]).prefix_len, 4);
    assert_eq!(tree(&c)[0].0, vec![1, 2, 3, 4]);
    assert_eq!(tree(&c)[1].0, vec![5, 6, 7, 8]);
    assert_eq!(c.match_prefix(&[1, 2, 3]).node, ROOT);
    // A page that differs in its last token does not match at all.
    assert_eq!(c.match_prefix(&[1, 2, 3, 9]).prefix_len, 0);
}

#[test]
fn a_match_ending_inside_a_node_splits_it_and_the_upper_part_is_newest() {
    let mut c = cache(1);
    let mut freed = Vec::new();
    c.insert(&[1, 2, 3, 4], &[10, 11, 12, 13], owning(0), &mut freed);
    let found = c.match_prefix(&[1, 2, 9]);
    assert_eq!(found.prefix_len, 2);
    let nodes = c.depth_first();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].id, found.node);
    assert_eq!((nodes[0].key, nodes[0].slots), (&[1, 2][..], &[10, 11][..]));
    assert_eq!((nodes[1].key, nodes[1].slots), (&[3, 4][..], &[12, 13][..]));
    // The split gives the lower part a fresh stamp, then the match stamps its path newer.
    assert!(nodes[0].last_access_time > nodes[1].last_access_time);
    let mut slots = Vec::new();
    c.prefix_slots(found.node, &mut slots);
    assert_eq!(slots, vec![10, 11]);
}

#[test]
fn an_insert_hands_back_duplicates_beyond_the_requests_own_prefix() {
    let mut c = cache(1);
    let mut freed = Vec::new();
    // Request A inserts [1 2 3 4]; request B matched nothing (prev 0) while computing the same
    // first three tokens in its own slots, then inserts [1 2 3 7]: its slots for 1 2 3 are
    // duplicates and come back; 7 becomes a leaf under the split.
    c.insert(&[1, 2, 3, 4], &[10, 11, 12, 13], owning(0), &mut freed);
    let b = c.insert(&[1, 2, 3, 7], &[20, 21, 22, 23], owning(0), &mut freed);
    assert_eq!(b.prefix_len, 3);
    assert_eq!(freed, vec![20, 21, 22]);
    // Request C matched [1 2] (prev 2): only its slot for 3 is a duplicate.
    freed.clear();
    c.insert(&[1, 2, 3, 8], &[10, 11, 32, 33], owning(2), &mut freed);
    assert_eq!(freed, vec![32]);
    assert_eq!(
        tree(&c),
        vec![
            (vec![1, 2, 3], vec![10, 11, 12], 0),
            (vec![4], vec![13], 0),
            (vec![7], vec![23], 0),
            (vec![8], vec![33], 0),
        ]
    );
    assert_eq!(c.evictable_size(), 6);
}

#[test]
fn a_lock_protects_the_whole_path_and_only_the_first_holder_moves_sizes() {
    let mut c = cache(1);
    let mut freed = Vec::new();
    c.insert(&[1, 2, 3, 4], &[10, 11, 12, 13], owning(0), &mut freed);
    let Insert { node: leaf, .. } = c.insert(&[1, 2, 5], &[10, 11, 14], owning(2), &mut freed);
    assert_eq!((c.evictable_size(), c.protected_size()), (5, 0));
    assert_eq!(c.lock(leaf), 3, "[1 2] and [5] become protected");
    assert_eq!(c.lock(leaf), 0, "a second holder moves nothing");
    assert_eq!((c.evictable_size(), c.protected_size()), (2, 3));
    assert_eq!(
        tree(&c),
        vec![(vec![1, 2], vec![10, 11], 2), (vec![3, 4], vec![12, 13], 0), (vec![5], vec![14], 2)]
    );
    // Only the unlocked branch can go, however much is asked.
    let mut evicted = Vec::new();
    assert_eq!(c.evict(100, &mut evicted), 2);
    assert_eq!(evicted, vec![12, 13]);
    c.unlock(leaf);
    assert_eq!((c.evictable_size(), c.protected_size()), (0, 3));
    c.unlock(leaf);
    assert_eq!((c.evictable_size(), c.protected_size()), (3, 0));
}

#[test]
fn eviction_takes_whole_leaves_least_recent_first_and_a_parent_only_after_its_children() {
    let mut c = cache(1);
    let mut freed = Vec::new();
    // A finished request leaves its prompt [1 2 3] with its output [4 5] as a child; an older
    // branch [7 8] was inserted first.
    c.insert(&[7, 8], &[30, 31], owning(0), &mut freed);
    c.insert(&[1, 2, 3], &[10, 11, 12], owning(0), &mut freed);
    c.insert(&[1, 2, 3, 4, 5], &[10, 11, 12, 13, 14], owning(3), &mut freed);
    assert!(freed.is_empty());
    let mut evicted = Vec::new();
    // One token asked: the least recent leaf [7 8] goes whole (overshooting to 2).
    assert_eq!(c.evict(1, &mut evicted), 2);
    assert_eq!(evicted, vec![30, 31]);
    // Next the output leaf, and only then the prompt, which became a leaf.
    evicted.clear();
    assert_eq!(c.evict(3, &mut evicted), 5);
    assert_eq!(evicted, vec![13, 14, 10, 11, 12]);
    assert!(c.depth_first().is_empty());
}

#[test]
fn a_match_refreshes_recency_so_the_other_branch_goes_first() {
    let mut c = cache(1);
    let mut freed = Vec::new();
    c.insert(&[1, 1], &[10, 11], owning(0), &mut freed);
    c.insert(&[2, 2], &[20, 21], owning(0), &mut freed);
    c.match_prefix(&[1, 1]);
    let mut evicted = Vec::new();
    c.evict(1, &mut evicted);
    assert_eq!(evicted, vec![20, 21]);
}

#[test]
fn lfu_evicts_the_least_hit_leaf_even_if_it_is_newer() {
    let mut c = RadixCache::new(1, EvictionPolicy::Lfu).expect("valid");
    let mut freed = Vec::new();
    c.insert(&[1, 1], &[10, 11], owning(0), &mut freed);
    // A second insert through [1 1] counts a hit on it (two in all), none on [2 2] (one).
    c.insert(&[1, 1], &[10, 11], owning(2), &mut freed);
    c.insert(&[2, 2], &[20, 21], owning(0), &mut freed);
    let hits: Vec<u64> = c.depth_first().iter().map(|n| n.hit_count).collect();
    assert_eq!(hits, vec![2, 1]);
    let mut evicted = Vec::new();
    c.evict(1, &mut evicted);
    assert_eq!(evicted, vec![20, 21]);
}

#[test]
fn bad_page_sizes_and_unknown_policies_are_refused_by_name() {
    assert_eq!(RadixCache::new(0, EvictionPolicy::Lru).err(), Some(RadixCacheError::PageSize(0)));
    assert_eq!(RadixCache::new(257, EvictionPolicy::Lru).err(), Some(RadixCacheError::PageSize(257)));
    let refused = EvictionPolicy::parse("tlru").expect_err("tlru is not modelled");
    assert_eq!(
        refused.to_string(),
        "radix eviction policy \"tlru\" is not modelled (lru, lfu, slru, fifo, mru, filo, priority are)"
    );
}

#[test]
fn a_finished_request_splits_its_leaf_at_the_prompt_so_outputs_are_evicted_first() {
    // checkpoint_into_tree: insert prompt + outputs, then the prompt again with
    // prev_prefix_len = inserted_len = its length and priority + 1.
    let mut c = cache(1);
    let mut freed = Vec::new();
    c.insert(&[1, 2, 3, 4, 5], &[10, 11, 12, 13, 14], owning(0), &mut freed);
    let prompt = Inserter { prev_prefix_len: 3, inserted_len: 3, priority: 1 };
    let again = c.insert(&[1, 2, 3], &[10, 11, 12], prompt, &mut freed);
    assert_eq!(again.prefix_len, 3);
    assert!(freed.is_empty(), "the request's own prefix is not a duplicate");
    let nodes: Vec<(&[u32], u64, i64)> =
        c.depth_first().iter().map(|n| (n.key, n.hit_count, n.priority)).collect();
    // The split keeps the first insert's single hit on both parts (no second hit for tokens the
    // request inserted before); only the prompt part takes the higher priority.
    assert_eq!(nodes, vec![(&[1, 2, 3][..], 1, 1), (&[4, 5][..], 1, 0)]);
    let mut evicted = Vec::new();
    assert_eq!(c.evict(1, &mut evicted), 2);
    assert_eq!(evicted, vec![13, 14]);
}

#[test]
fn a_leaf_that_gains_a_child_is_no_longer_a_candidate_for_eviction() {
    // [1 2] is an unlocked leaf; an insert that extends it walks through it (touching it first,
    // so it is older than the new leaf) and hangs [3] below it. Eviction must take [3] before
    // [1 2], never [1 2] with a child still in the tree.
    let mut c = cache(1);
    let mut freed = Vec::new();
    c.insert(&[1, 2], &[10, 11], owning(0), &mut freed);
    c.insert(&[1, 2, 3], &[10, 11, 12], owning(2), &mut freed);
    let mut evicted = Vec::new();
    assert_eq!(c.evict(1, &mut evicted), 1);
    assert_eq!(evicted, vec![12]);
    assert_eq!(tree(&c), vec![(vec![1, 2], vec![10, 11], 0)]);
}

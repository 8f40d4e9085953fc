//! Invariants of the SGLang radix cache over random request lifecycles: every KV slot is free,
//! held by a request, or owned by exactly one tree node; the evictable and protected sizes are the
//! tokens of unlocked and locked nodes; locks are counted along whole paths; and once every lock
//! is released, evicting the pool empties the tree.

use std::collections::BTreeSet;

use blis_engines::sglang::radix_cache::{EvictionPolicy, Inserter, NodeId, ROOT, RadixCache};
use proptest::prelude::*;

/// One request in flight: its tokens, its slots, the node it locked and its tree-owned prefix.
struct Live {
    tokens: Vec<u32>,
    slots: Vec<u32>,
    locked: NodeId,
    owned: usize,
}

#[derive(Clone, Debug)]
enum Op {
    Arrive { tokens: Vec<u32> },
    Finish { which: usize, prompt_cut: usize },
    Evict { tokens: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec(1u32..4, 1..24).prop_map(|tokens| Op::Arrive { tokens }),
        2 => (0usize..8, 0usize..24).prop_map(|(which, prompt_cut)| Op::Finish { which, prompt_cut }),
        1 => (1usize..48).prop_map(|tokens| Op::Evict { tokens }),
    ]
}

fn policy() -> impl Strategy<Value = EvictionPolicy> {
    prop_oneof![
        Just(EvictionPolicy::Lru),
        Just(EvictionPolicy::Lfu),
        Just(EvictionPolicy::Slru),
        Just(EvictionPolicy::Fifo),
        Just(EvictionPolicy::Mru),
        Just(EvictionPolicy::Filo),
        Just(EvictionPolicy::Priority),
    ]
}

/// Check the invariants; `free` and `live` are the allocator's and the requests' slots.
fn check(cache: &RadixCache, free: &BTreeSet<u32>, live: &[Live], pool: u32) -> Result<(), TestCaseError> {
    if let Err(e) = cache.check_eviction_index() {
        return Err(TestCaseError::fail(e));
    }
    let nodes = cache.depth_first();
    let mut owner = BTreeSet::new();
    let (mut locked, mut unlocked) = (0, 0);
    for node in &nodes {
        prop_assert!(!node.key.is_empty(), "a node without tokens");
        prop_assert_eq!(node.key.len(), node.slots.len());
        for &slot in node.slots {
            prop_assert!(owner.insert(slot), "slot {} owned by two nodes", slot);
        }
        if node.lock_ref > 0 {
            locked += node.slots.len();
        } else {
            unlocked += node.slots.len();
        }
        if node.parent != ROOT {
            let parent = nodes.iter().find(|n| n.id == node.parent).expect("a parent in the tree");
            prop_assert!(parent.lock_ref >= node.lock_ref, "a lock not counted on the whole path");
        }
    }
    prop_assert_eq!(cache.protected_size(), locked);
    prop_assert_eq!(cache.evictable_size(), unlocked);
    let mut seen: BTreeSet<u32> = free.clone();
    for slot in owner.iter().copied().chain(live.iter().flat_map(|l| l.slots[l.owned..].iter().copied())) {
        prop_assert!(seen.insert(slot), "slot {} both free or held and in the tree", slot);
    }
    prop_assert_eq!(seen.len(), pool as usize, "a slot was lost");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn slots_are_conserved_and_sizes_follow_the_locks(
        page_size in prop_oneof![Just(1u32), Just(2), Just(4)],
        policy in policy(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let pool = 96;
        let mut cache = RadixCache::new(page_size, policy).expect("a valid page size");
        let mut free: BTreeSet<u32> = (1..=pool).collect();
        let mut live: Vec<Live> = Vec::new();
        let page = page_size as usize;
        for op in ops {
            match op {
                Op::Arrive { tokens } => {
                    let found = cache.match_prefix(&tokens);
                    cache.lock(found.node);
                    let mut slots = Vec::new();
                    cache.prefix_slots(found.node, &mut slots);
                    let need = tokens.len() - slots.len();
                    if need > free.len() {
                        let mut evicted = Vec::new();
                        cache.evict(need - free.len(), &mut evicted);
                        free.extend(evicted);
                    }
                    if need > free.len() {
                        cache.unlock(found.node);
                    } else {
                        let taken: Vec<u32> = free.iter().copied().take(need).collect();
                        for slot in &taken {
                            free.remove(slot);
                        }
                        slots.extend(taken);
                        live.push(Live { tokens, slots, locked: found.node, owned: found.prefix_len });
                    }
                }
                Op::Finish { which, prompt_cut } => {
                    if live.is_empty() {
                        continue;
                    }
                    let done = live.remove(which % live.len());
                    let aligned = done.tokens.len() / page * page;
                    let mut freed = Vec::new();
                    let inserted = cache.insert(
                        &done.tokens,
                        &done.slots[..aligned],
                        Inserter { prev_prefix_len: done.owned, inserted_len: 0, priority: 0 },
                        &mut freed,
                    );
                    let prompt = prompt_cut.min(done.tokens.len()) / page * page;
                    if 0 < prompt && prompt < aligned {
                        let again = Inserter { prev_prefix_len: prompt, inserted_len: prompt, priority: 1 };
                        cache.insert(&done.tokens[..prompt], &done.slots[..prompt], again, &mut freed);
                    }
                    freed.extend_from_slice(&done.slots[aligned..]);
                    free.extend(freed);
                    cache.unlock(done.locked);
                    cache.lock(inserted.node);
                    cache.unlock(inserted.node);
                }
                Op::Evict { tokens } => {
                    let mut evicted = Vec::new();
                    let count = cache.evict(tokens, &mut evicted);
                    prop_assert_eq!(count, evicted.len());
                    free.extend(evicted);
                }
            }
            check(&cache, &free, &live, pool)?;
        }
        for done in live.drain(..) {
            cache.unlock(done.locked);
            free.extend(done.slots[done.owned..].iter().copied());
        }
        let mut evicted = Vec::new();
        cache.evict(pool as usize, &mut evicted);
        free.extend(evicted);
        prop_assert!(cache.depth_first().is_empty(), "an unlocked tree did not empty");
        prop_assert_eq!(free.len(), pool as usize);
        prop_assert_eq!((cache.evictable_size(), cache.protected_size()), (0, 0));
    }
}

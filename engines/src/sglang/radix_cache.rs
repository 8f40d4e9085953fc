//! SGLang's radix cache: the prefix tree of KV slots a plain (FULL-attention) model shares.
//!
//! Ported from 0.5.23's `UnifiedRadixCache` with its `UnifiedTreeCore` and FULL component
//! (`mem_cache/unified_radix_cache.py`, `unified_cache/unified_tree_core.py`,
//! `unified_cache/components/full.py`). Keys are token ids cut to whole pages; each node holds a
//! segment of tokens and the KV slots that hold them. A match splits the node it ends inside
//! and stamps its path as recently used; an insert walks the same way, hands back the caller's
//! slots for tokens the tree already holds, and adds the rest as a new leaf; a lock protects a
//! node and its ancestors from eviction; eviction frees whole unlocked leaves in the order of the
//! configured policy, a parent joining the candidates once its last child is gone. Recency is a
//! logical counter, as upstream: one tick per node created, per node touched by an insert, per
//! split, and per match (whose path gets the newest stamp at its end and 1e-5 less per ancestor).
//! Host tiers, sessions, hybrid (SWA, Mamba) components and KV events are not part of this port.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A node of the tree; stable while the node lives (a split keeps it on the lower part).
pub type NodeId = u32;

/// The root: holds no tokens, is always locked and never evicted.
pub const ROOT: NodeId = 0;

/// The largest page size accepted: SGLang's attention backends use pages of at most 256 tokens.
pub const MAX_PAGE_SIZE: u32 = 256;

/// `--radix-eviction-policy`: which unlocked leaf goes first (`mem_cache/evict_policy.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Least recently used (the default).
    Lru,
    /// Fewest hits, then least recently used.
    Lfu,
    /// Segmented LRU: nodes with fewer than two hits before the rest, LRU within each.
    Slru,
    /// Oldest created first.
    Fifo,
    /// Most recently used first.
    Mru,
    /// Newest created first.
    Filo,
    /// Lowest request priority first, then least recently used.
    Priority,
}

impl EvictionPolicy {
    /// The policy named as SGLang's CLI and factory name it.
    pub fn parse(name: &str) -> Result<Self, RadixCacheError> {
        Ok(match name {
            "lru" => Self::Lru,
            "lfu" => Self::Lfu,
            "slru" => Self::Slru,
            "fifo" => Self::Fifo,
            "mru" => Self::Mru,
            "filo" => Self::Filo,
            "priority" => Self::Priority,
            other => return Err(RadixCacheError::UnknownPolicy(other.to_owned())),
        })
    }
}

/// Why a radix cache cannot be built as asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RadixCacheError {
    /// The page size is zero or above [`MAX_PAGE_SIZE`].
    PageSize(u32),
    /// An eviction policy this port does not model (`tlru` needs the branch depths SGLang keeps
    /// only for it) or one SGLang does not know.
    UnknownPolicy(String),
}

impl fmt::Display for RadixCacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PageSize(size) => write!(f, "page size {size} is not in 1..={MAX_PAGE_SIZE}"),
            Self::UnknownPolicy(name) => write!(
                f,
                "radix eviction policy {name:?} is not modelled (lru, lfu, slru, fifo, mru, filo, priority are)"
            ),
        }
    }
}

impl std::error::Error for RadixCacheError {}

/// What a match found: how many tokens the tree holds and the deepest node holding them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    /// Matched tokens (`device_prefix_len`), a whole number of pages.
    pub prefix_len: usize,
    /// The node the match ends on (`last_device_node`); [`ROOT`] when nothing matched.
    pub node: NodeId,
}

/// What an insert did: how much of the key the tree already held and where the key now ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insert {
    /// Tokens already in the tree before this insert (`prefix_len`).
    pub prefix_len: usize,
    /// The node the key ends on (`last_device_node`).
    pub node: NodeId,
}

/// Who inserts: what of the key the request already owns in the tree and already inserted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inserter {
    /// The request's tree-owned prefix (`cache_protected_len`): its slots there are the tree's.
    pub prev_prefix_len: usize,
    /// Tokens the request inserted before (`cache_inserted_len`): no second hit for them.
    pub inserted_len: usize,
    /// The request's priority; nodes on the path keep the highest.
    pub priority: i64,
}

/// One node as seen from outside: for traces, timelines and tests.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    /// The node.
    pub id: NodeId,
    /// Its parent ([`ROOT`] for a top-level node).
    pub parent: NodeId,
    /// Its segment of token ids.
    pub key: &'a [u32],
    /// The KV slots holding them.
    pub slots: &'a [u32],
    /// Holders of this node or of a node below it.
    pub lock_ref: u32,
    /// The recency stamp eviction orders by.
    pub last_access_time: f64,
    /// Inserts that passed through it.
    pub hit_count: u64,
    /// The highest priority of the requests that inserted through it.
    pub priority: i64,
}

#[derive(Clone, Debug)]
struct Node {
    parent: NodeId,
    children: BTreeMap<Vec<u32>, NodeId>,
    /// Its place among its siblings: upstream's children are a dict, iterated in insertion order.
    sibling_order: u64,
    key: Vec<u32>,
    slots: Vec<u32>,
    lock_ref: u32,
    last_access_time: f64,
    creation_time: f64,
    hit_count: u64,
    priority: i64,
    live: bool,
    /// Its key in the eviction index while it is an evictable leaf.
    evict_key: Option<Candidate>,
}

/// The radix cache of one SGLang instance.
#[derive(Clone, Debug)]
pub struct RadixCache {
    page_size: usize,
    policy: EvictionPolicy,
    nodes: Vec<Node>,
    free_ids: Vec<NodeId>,
    clock: f64,
    insertions: u64,
    evictable: usize,
    protected: usize,
    /// The nodes eviction may take now (`evictable_device_leaves`), in eviction order (the
    /// greatest first), kept as they and their keys change, so eviction never walks them all.
    evictable_leaves: BTreeSet<Candidate>,
}

/// A candidate leaf in eviction order: the policy's key, then recency (as upstream's heap
/// compares its nodes on a tie).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    primary: f64,
    secondary: f64,
    recency: f64,
    node: NodeId,
}

impl Candidate {
    fn cmp_key(&self, other: &Self) -> Ordering {
        self.primary
            .total_cmp(&other.primary)
            .then(self.secondary.total_cmp(&other.secondary))
            .then(self.recency.total_cmp(&other.recency))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    /// Reversed, so that `BinaryHeap` pops the first to evict.
    fn cmp(&self, other: &Self) -> Ordering {
        other.cmp_key(self).then(other.node.cmp(&self.node))
    }
}

impl RadixCache {
    /// An empty tree with pages of `page_size` tokens, evicting by `policy`.
    pub fn new(page_size: u32, policy: EvictionPolicy) -> Result<Self, RadixCacheError> {
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(RadixCacheError::PageSize(page_size));
        }
        let mut cache = Self {
            page_size: page_size as usize,
            policy,
            nodes: Vec::new(),
            free_ids: Vec::new(),
            clock: 0.0,
            insertions: 0,
            evictable: 0,
            protected: 0,
            evictable_leaves: BTreeSet::new(),
        };
        let root = cache.new_node(ROOT, Vec::new(), Vec::new(), 0);
        debug_assert_eq!(root, ROOT);
        cache.nodes[ROOT as usize].lock_ref = 1;
        Ok(cache)
    }

    /// Tokens in unlocked nodes (`evictable_size`).
    pub fn evictable_size(&self) -> usize {
        self.evictable
    }

    /// Tokens in locked nodes (`protected_size`).
    pub fn protected_size(&self) -> usize {
        self.protected
    }

    /// The eviction index holds exactly the evictable leaves, each under its current key; the
    /// first broken rule, if any.
    pub fn check_eviction_index(&self) -> Result<(), String> {
        let mut leaves = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            let id = id as NodeId;
            match (self.is_leaf(id), node.evict_key) {
                (true, Some(key)) if key == self.candidate(id) && self.evictable_leaves.contains(&key) => {
                    leaves += 1
                }
                (false, None) => {}
                (leaf, key) => {
                    return Err(format!("radix node {id}: evictable leaf {leaf}, indexed as {key:?}"));
                }
            }
        }
        if leaves != self.evictable_leaves.len() {
            return Err(format!("{} indexed leaves, {leaves} evictable", self.evictable_leaves.len()));
        }
        Ok(())
    }

    /// The longest cached prefix of `tokens`, whole pages only; splits the node it ends inside
    /// and marks the path as just used.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> Match {
        let key = self.aligned(tokens);
        if key.is_empty() {
            return Match { prefix_len: 0, node: ROOT };
        }
        let mut node = ROOT;
        let mut offset = 0;
        while offset < key.len() {
            let Some(child) = self.child(node, &key[offset..]) else { break };
            let matched = self.common_pages(&self.nodes[child as usize].key, &key[offset..]);
            if matched < self.nodes[child as usize].key.len() {
                node = self.split(child, matched);
                offset += matched;
                break;
            }
            node = child;
            offset += matched;
        }
        let mut stamp = self.tick();
        let mut cursor = node;
        loop {
            self.nodes[cursor as usize].last_access_time = stamp;
            self.refresh_leaf(cursor);
            stamp -= 0.00001;
            if cursor == ROOT {
                break;
            }
            cursor = self.nodes[cursor as usize].parent;
        }
        Match { prefix_len: offset, node }
    }

    /// The slots of the path from the root down to `node`, root first.
    pub fn prefix_slots(&self, node: NodeId, slots: &mut Vec<u32>) {
        let start = slots.len();
        let mut cursor = node;
        while cursor != ROOT {
            let segment = &self.nodes[cursor as usize].slots;
            slots.extend(segment.iter().rev());
            cursor = self.nodes[cursor as usize].parent;
        }
        slots[start..].reverse();
    }

    /// Lock `node` and its ancestors against eviction; returns the tokens that became
    /// protected.
    pub fn lock(&mut self, node: NodeId) -> usize {
        let mut delta = 0;
        let mut cursor = node;
        while cursor != ROOT {
            let entry = &mut self.nodes[cursor as usize];
            if entry.lock_ref == 0 {
                let tokens = entry.slots.len();
                self.evictable -= tokens;
                self.protected += tokens;
                delta += tokens;
            }
            entry.lock_ref += 1;
            let parent = entry.parent;
            self.refresh_leaf(cursor);
            cursor = parent;
        }
        delta
    }

    /// Release a lock taken on `node`.
    pub fn unlock(&mut self, node: NodeId) {
        let mut cursor = node;
        while cursor != ROOT {
            let entry = &mut self.nodes[cursor as usize];
            assert!(entry.lock_ref > 0, "radix cache: unlock of node {cursor} without a lock");
            if entry.lock_ref == 1 {
                let tokens = entry.slots.len();
                self.evictable += tokens;
                self.protected -= tokens;
            }
            entry.lock_ref -= 1;
            let parent = entry.parent;
            self.refresh_leaf(cursor);
            cursor = parent;
        }
    }

    /// Insert `tokens` (cut to whole pages) held in `slots`: the caller's slots for tokens the
    /// tree already holds beyond `owner.prev_prefix_len` (its own tree-owned prefix) are pushed
    /// to `freed`, and the rest becomes a new leaf owned by the tree. Nodes ending beyond
    /// `owner.inserted_len` (what the request inserted before) count a hit.
    pub fn insert(&mut self, tokens: &[u32], slots: &[u32], owner: Inserter, freed: &mut Vec<u32>) -> Insert {
        let Inserter { prev_prefix_len, inserted_len, priority } = owner;
        let key = self.aligned(tokens);
        let slots = &slots[..key.len().min(slots.len())];
        assert_eq!(slots.len(), key.len(), "radix cache: an insert needs a slot per token");
        self.touch(ROOT);
        let root = &mut self.nodes[ROOT as usize];
        root.priority = root.priority.max(priority);
        if key.is_empty() {
            return Insert { prefix_len: 0, node: ROOT };
        }
        let mut node = ROOT;
        let mut offset = 0;
        while offset < key.len() {
            let Some(child) = self.child(node, &key[offset..]) else { break };
            self.touch(child);
            let matched = self.common_pages(&self.nodes[child as usize].key, &key[offset..]);
            let reached = if matched < self.nodes[child as usize].key.len() {
                self.split(child, matched)
            } else {
                child
            };
            let entry = &mut self.nodes[reached as usize];
            entry.priority = entry.priority.max(priority);
            let duplicates_from = prev_prefix_len.saturating_sub(offset);
            if duplicates_from < matched {
                freed.extend_from_slice(&slots[offset + duplicates_from..offset + matched]);
            }
            if offset + matched > inserted_len {
                entry.hit_count += 1;
            }
            self.refresh_leaf(reached);
            node = reached;
            offset += matched;
        }
        let prefix_len = offset;
        if offset < key.len() {
            let leaf = self.new_node(node, key[offset..].to_vec(), slots[offset..].to_vec(), priority);
            let child_key = self.child_key(&key[offset..]).to_vec();
            self.nodes[node as usize].children.insert(child_key, leaf);
            self.nodes[leaf as usize].sibling_order = self.next_sibling_order();
            self.refresh_leaf(leaf);
            self.refresh_leaf(node);
            self.evictable += key.len() - offset;
            if key.len() > inserted_len {
                self.nodes[leaf as usize].hit_count += 1;
            }
            self.refresh_leaf(leaf);
            node = leaf;
        }
        Insert { prefix_len, node }
    }

    /// Evict whole unlocked leaves, first by the policy, until at least `tokens` are freed or
    /// none is left; their slots are pushed to `freed` in eviction order. Returns the tokens
    /// evicted (`num_tokens_evicted`), which may overshoot `tokens`.
    pub fn evict(&mut self, tokens: usize, freed: &mut Vec<u32>) -> usize {
        let mut evicted = 0;
        if tokens == 0 {
            return 0;
        }
        // Upstream heapifies every evictable leaf and pops; the index is kept in that order, and
        // a parent left childless joins it as it would join the heap.
        while evicted < tokens {
            let Some(victim) = self.evictable_leaves.last().copied() else { break };
            evicted += self.delete_leaf(victim.node, freed);
        }
        evicted
    }

    /// The `dfs-weight` order of requests ending at `nodes` (`_dfs_weight_order`): a node's
    /// weight is the requests ending at or below it; the walk visits heavier children first
    /// (ties in insertion order) and emits a node's requests after its subtree's.
    pub fn dfs_weight_order(&self, nodes: &[NodeId]) -> Vec<usize> {
        let mut ending: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (index, &node) in nodes.iter().enumerate() {
            ending.entry(node).or_default().push(index);
        }
        let mut weight: BTreeMap<NodeId, usize> = ending.iter().map(|(&n, v)| (n, v.len())).collect();
        let mut stack = vec![(ROOT, false)];
        while let Some((node, visited)) = stack.pop() {
            let children = self.children_in_order(node);
            if visited {
                let total = weight.get(&node).copied().unwrap_or(0)
                    + children.iter().map(|c| weight.get(c).copied().unwrap_or(0)).sum::<usize>();
                weight.insert(node, total);
                continue;
            }
            stack.push((node, true));
            stack.extend(children.iter().rev().map(|&c| (c, false)));
        }
        let mut order = Vec::with_capacity(nodes.len());
        let mut stack = vec![(ROOT, false)];
        while let Some((node, visited)) = stack.pop() {
            if visited {
                order.extend(ending.get(&node).into_iter().flatten().copied());
                continue;
            }
            let mut children = self.children_in_order(node);
            children.sort_by_key(|c| std::cmp::Reverse(weight.get(c).copied().unwrap_or(0)));
            stack.push((node, true));
            stack.extend(children.iter().rev().map(|&c| (c, false)));
        }
        order
    }

    /// Every node but the root, depth first, children in ascending order of their first page.
    pub fn depth_first(&self) -> Vec<NodeView<'_>> {
        let mut out = Vec::new();
        let mut stack: Vec<NodeId> = self.nodes[ROOT as usize].children.values().rev().copied().collect();
        while let Some(id) = stack.pop() {
            let node = &self.nodes[id as usize];
            out.push(NodeView {
                id,
                parent: node.parent,
                key: &node.key,
                slots: &node.slots,
                lock_ref: node.lock_ref,
                last_access_time: node.last_access_time,
                hit_count: node.hit_count,
                priority: node.priority,
            });
            stack.extend(node.children.values().rev().copied());
        }
        out
    }

    fn next_sibling_order(&mut self) -> u64 {
        self.insertions += 1;
        self.insertions
    }

    /// The children of `node` in upstream's dict order.
    fn children_in_order(&self, node: NodeId) -> Vec<NodeId> {
        let mut children: Vec<NodeId> = self.nodes[node as usize].children.values().copied().collect();
        children.sort_by_key(|&c| self.nodes[c as usize].sibling_order);
        children
    }

    fn aligned<'a>(&self, tokens: &'a [u32]) -> &'a [u32] {
        &tokens[..tokens.len() / self.page_size * self.page_size]
    }

    /// The child of `node` whose segment starts with the first page of `key`.
    fn child(&self, node: NodeId, key: &[u32]) -> Option<NodeId> {
        self.nodes[node as usize].children.get(self.child_key(key)).copied()
    }

    fn child_key<'a>(&self, key: &'a [u32]) -> &'a [u32] {
        &key[..self.page_size]
    }

    /// Tokens `a` and `b` share from their start, rounded down to whole pages.
    fn common_pages(&self, a: &[u32], b: &[u32]) -> usize {
        let shared = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        shared / self.page_size * self.page_size
    }

    fn tick(&mut self) -> f64 {
        let now = self.clock;
        self.clock += 1.0;
        now
    }

    fn touch(&mut self, node: NodeId) {
        self.nodes[node as usize].last_access_time = self.tick();
        self.refresh_leaf(node);
    }

    fn new_node(&mut self, parent: NodeId, key: Vec<u32>, slots: Vec<u32>, priority: i64) -> NodeId {
        let last_access_time = self.tick();
        let creation_time = self.tick();
        let node = Node {
            parent,
            children: BTreeMap::new(),
            sibling_order: 0,
            key,
            slots,
            lock_ref: 0,
            last_access_time,
            creation_time,
            hit_count: 0,
            priority,
            live: true,
            evict_key: None,
        };
        match self.free_ids.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }

    /// Split `child` after `at` tokens: a new node takes the upper part (and the child's
    /// place, locks, hits and creation time); the child keeps the rest and a fresh stamp.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let (parent, priority) = {
            let node = &self.nodes[child as usize];
            (node.parent, node.priority)
        };
        let upper = self.new_node(parent, Vec::new(), Vec::new(), priority);
        let page_size = self.page_size;
        let (upper_key, upper_slots, lower_child_key, lock_ref, hit_count, creation_time) = {
            let node = &mut self.nodes[child as usize];
            let upper_key: Vec<u32> = node.key.drain(..at).collect();
            let upper_slots: Vec<u32> = node.slots.drain(..at).collect();
            node.parent = upper;
            (
                upper_key,
                upper_slots,
                node.key[..page_size].to_vec(),
                node.lock_ref,
                node.hit_count,
                node.creation_time,
            )
        };
        let parent_child_key = upper_key[..page_size].to_vec();
        let child_order = self.nodes[child as usize].sibling_order;
        let lower_order = self.next_sibling_order();
        let entry = &mut self.nodes[upper as usize];
        entry.key = upper_key;
        entry.slots = upper_slots;
        entry.lock_ref = lock_ref;
        entry.hit_count = hit_count;
        entry.creation_time = creation_time;
        entry.children.insert(lower_child_key, child);
        entry.sibling_order = child_order;
        self.nodes[child as usize].sibling_order = lower_order;
        self.nodes[parent as usize].children.insert(parent_child_key, upper);
        self.touch(child);
        self.refresh_leaf(upper);
        self.refresh_leaf(child);
        upper
    }

    /// Keep `evictable_leaves` true of `id` after a change to it, its key's fields or its
    /// children.
    fn refresh_leaf(&mut self, id: NodeId) {
        if let Some(old) = self.nodes[id as usize].evict_key.take() {
            self.evictable_leaves.remove(&old);
        }
        if self.is_leaf(id) {
            let key = self.candidate(id);
            self.evictable_leaves.insert(key);
            self.nodes[id as usize].evict_key = Some(key);
        }
    }

    /// An evictable leaf: not the root, unlocked, and without children.
    fn is_leaf(&self, id: NodeId) -> bool {
        let node = &self.nodes[id as usize];
        id != ROOT && node.live && node.lock_ref == 0 && node.children.is_empty()
    }

    fn candidate(&self, id: NodeId) -> Candidate {
        let node = &self.nodes[id as usize];
        let recency = node.last_access_time;
        let (primary, secondary) = match self.policy {
            EvictionPolicy::Lru => (recency, 0.0),
            EvictionPolicy::Lfu => (node.hit_count as f64, recency),
            EvictionPolicy::Slru => (if node.hit_count >= 2 { 1.0 } else { 0.0 }, recency),
            EvictionPolicy::Fifo => (node.creation_time, 0.0),
            EvictionPolicy::Mru => (-recency, 0.0),
            EvictionPolicy::Filo => (-node.creation_time, 0.0),
            EvictionPolicy::Priority => (node.priority as f64, recency),
        };
        Candidate { primary, secondary, recency, node: id }
    }

    /// Remove an evictable leaf, freeing its slots; returns its tokens.
    fn delete_leaf(&mut self, id: NodeId, freed: &mut Vec<u32>) -> usize {
        let (parent, child_key, slots) = {
            let node = &mut self.nodes[id as usize];
            node.live = false;
            let child_key = node.key[..self.page_size].to_vec();
            node.key.clear();
            (node.parent, child_key, std::mem::take(&mut node.slots))
        };
        self.nodes[parent as usize].children.remove(&child_key);
        self.refresh_leaf(id);
        self.refresh_leaf(parent);
        self.evictable -= slots.len();
        freed.extend_from_slice(&slots);
        self.free_ids.push(id);
        slots.len()
    }
}

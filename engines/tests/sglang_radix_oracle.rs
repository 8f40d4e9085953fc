//! Replays SGLang 0.5.23's own radix cache, operation by operation.
//!
//! Each `traces/sglang-0.5.23/radix-*.jsonl` was recorded by `traces/harness/record_sglang_radix.py`
//! from the release's `UnifiedRadixCache` over a real allocator (format:
//! `traces/harness/sglang-radix-trace-format.md`). The port must give the same answer to every
//! operation — matched length and slots, lock deltas, inserted prefix and freed duplicates,
//! evicted tokens and slots in order — and leave the same tree after it: every node's key, slots,
//! lock count, hits, priority and place in the recency order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use blis_engines::sglang::radix_cache::{EvictionPolicy, Inserter, NodeId, ROOT, RadixCache};
use serde_json::{Value, json};

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces/sglang-0.5.23");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the SGLang traces are in the repository")
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("radix-")))
        .collect();
    paths.sort();
    paths
}

fn tokens(value: &Value) -> Vec<u32> {
    value.as_array().expect("a token list").iter().map(|t| t.as_u64().expect("a token") as u32).collect()
}

/// The allocator SGLang's cache frees into: slots 1..=pool, each handed out or free once.
struct Slots {
    free: BTreeSet<u32>,
}

impl Slots {
    fn take(&mut self, slots: &[u32]) {
        for slot in slots {
            assert!(self.free.remove(slot), "slot {slot} handed out twice");
        }
    }

    fn give_back(&mut self, slots: &[u32]) {
        for &slot in slots {
            assert!(self.free.insert(slot), "slot {slot} freed twice");
        }
    }
}

/// The tree as the trace dumps it, and each node's place in that order.
fn dump(cache: &RadixCache) -> (Value, BTreeMap<NodeId, i64>) {
    let nodes = cache.depth_first();
    let index: BTreeMap<NodeId, i64> = nodes.iter().enumerate().map(|(i, n)| (n.id, i as i64)).collect();
    let mut by_recency: Vec<(f64, NodeId)> = nodes.iter().map(|n| (n.last_access_time, n.id)).collect();
    by_recency.sort_by(|a, b| a.0.total_cmp(&b.0));
    let rank: BTreeMap<NodeId, usize> = by_recency.iter().enumerate().map(|(r, &(_, id))| (id, r)).collect();
    let tree = nodes
        .iter()
        .map(|n| {
            json!([
                if n.parent == ROOT { -1 } else { index[&n.parent] },
                n.key,
                n.slots,
                n.lock_ref,
                rank[&n.id],
                n.hit_count,
                n.priority
            ])
        })
        .collect();
    (tree, index)
}

fn node_ref(index: &BTreeMap<NodeId, i64>, node: NodeId) -> i64 {
    if node == ROOT { -1 } else { index[&node] }
}

fn node_at(index: &BTreeMap<NodeId, i64>, at: i64) -> NodeId {
    if at == -1 {
        return ROOT;
    }
    *index.iter().find(|(_, i)| **i == at).expect("the trace names a node of the tree").0
}

/// Replay one trace; returns its operation count, or the first difference.
fn replay(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).expect("a readable trace");
    let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"));
    let header = lines.next().expect("a header line");
    let workload = &header["workload"];
    let page_size = workload["page_size"].as_u64().expect("page_size") as u32;
    let policy =
        EvictionPolicy::parse(workload["policy"].as_str().unwrap_or("lru")).expect("a modelled policy");
    let pool = workload["pool"].as_u64().expect("pool") as u32;
    let mut cache = RadixCache::new(page_size, policy).expect("a valid page size");
    let mut slots = Slots { free: (1..=pool).collect() };
    let mut handles: BTreeMap<String, NodeId> = BTreeMap::new();
    let mut count = 0;
    for (number, expected) in lines.enumerate() {
        let (_, index_before) = dump(&cache);
        let mut got = serde_json::Map::new();
        let op = expected["op"].as_str().expect("an op");
        got.insert("op".into(), json!(op));
        let mut answer_node = None;
        match op {
            "match" => {
                let key = tokens(&expected["tokens"]);
                let found = cache.match_prefix(&key);
                let mut indices = Vec::new();
                cache.prefix_slots(found.node, &mut indices);
                got.insert("tokens".into(), json!(key));
                got.insert("prefix_len".into(), json!(found.prefix_len));
                got.insert("indices".into(), json!(indices));
                answer_node = Some(found.node);
            }
            "lock" => {
                let handle = expected["handle"].as_str().expect("a handle").to_owned();
                let node = node_at(&index_before, expected["node"].as_i64().expect("a node"));
                let delta = cache.lock(node);
                handles.insert(handle.clone(), node);
                got.insert("handle".into(), json!(handle));
                got.insert("delta".into(), json!(delta));
                answer_node = Some(node);
            }
            "unlock" => {
                let handle = expected["handle"].as_str().expect("a handle");
                cache.unlock(handles.remove(handle).expect("a held lock"));
                got.insert("handle".into(), json!(handle));
            }
            "alloc" => {
                let taken = tokens(&expected["slots"]);
                slots.take(&taken);
                got.insert("slots".into(), json!(taken));
            }
            "insert" => {
                let key = tokens(&expected["tokens"]);
                let value = tokens(&expected["value"]);
                let prev = expected["prev_prefix_len"].as_u64().expect("prev_prefix_len") as usize;
                let inserted_len = expected["inserted_len"].as_u64().expect("inserted_len") as usize;
                let priority = expected["priority"].as_i64().expect("priority");
                let mut freed = Vec::new();
                let inserted = cache.insert(
                    &key,
                    &value,
                    Inserter { prev_prefix_len: prev, inserted_len, priority },
                    &mut freed,
                );
                slots.give_back(&freed);
                got.insert("tokens".into(), json!(key));
                got.insert("value".into(), json!(value));
                got.insert("prev_prefix_len".into(), json!(prev));
                got.insert("inserted_len".into(), json!(inserted_len));
                got.insert("priority".into(), json!(priority));
                got.insert("prefix_len".into(), json!(inserted.prefix_len));
                got.insert("freed".into(), json!(freed));
                answer_node = Some(inserted.node);
            }
            "free" => {
                let value = tokens(&expected["value"]);
                slots.give_back(&value);
                got.insert("value".into(), json!(value));
                got.insert("freed".into(), json!(value));
            }
            "evict" => {
                let want = expected["tokens"].as_u64().expect("tokens") as usize;
                let mut freed = Vec::new();
                let evicted = cache.evict(want, &mut freed);
                slots.give_back(&freed);
                got.insert("tokens".into(), json!(want));
                got.insert("evicted".into(), json!(evicted));
                got.insert("freed".into(), json!(freed));
            }
            other => return Err(format!("line {}: unknown op {other}", number + 2)),
        }
        got.insert("evictable".into(), json!(cache.evictable_size()));
        got.insert("protected".into(), json!(cache.protected_size()));
        got.insert("available".into(), json!(slots.free.len()));
        let (tree, index_after) = dump(&cache);
        if let Some(node) = answer_node {
            got.insert("node".into(), json!(node_ref(&index_after, node)));
        }
        got.insert("tree".into(), tree);
        let got = Value::Object(got);
        if got != expected {
            return Err(format!(
                "{} line {}:\n  expected {expected}\n  port     {got}",
                path.display(),
                number + 2
            ));
        }
        count += 1;
    }
    Ok(count)
}

#[test]
fn the_port_answers_every_recorded_operation_as_sglang_does() {
    let paths = traces();
    assert!(paths.len() >= 18, "expected the 18 recorded radix workloads, found {}", paths.len());
    let mut operations = 0;
    let mut failures = Vec::new();
    for path in &paths {
        match replay(path) {
            Ok(n) => operations += n,
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} traces diverge:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
    assert!(operations > 3_000, "only {operations} operations replayed");
}

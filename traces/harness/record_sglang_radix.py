"""Record SGLang 0.5.23's radix cache, operation by operation, for the Rust port to replay.

Usage:  /work/venv-sglang/bin/python traces/harness/record_sglang_radix.py [--only NAME ...] [--check]

What is real: `UnifiedRadixCache` (FULL component only, the tree a plain model uses) with its
Python `UnifiedTreeCore`, and a real CPU `TokenToKVPoolAllocator` that hands out and takes back
the KV slot indices. Every workload is also run on the default Rust `TreeCore` (the binary in the
wheel), and the public results of both cores must agree, so the trace describes what a
production server does, not only the Python reference.

Nothing is replaced: no model, no KV tensors and no GPU are needed to drive the cache.

Each trace (`traces/sglang-0.5.23/radix-<name>.jsonl`) is a header line, then one line per
operation with its inputs and what the cache answered, then the state after it: the evictable
and protected sizes, the allocator's free slots, and the whole tree in a canonical order (each
node's key, slots, lock count and rank in the eviction order). Format:
`traces/harness/sglang-radix-trace-format.md`.
"""

import argparse
import json
import random
import sys
import tempfile
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_check import exit_with_verdict  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402

import sglang  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "traces" / f"sglang-{sglang.__version__}"
FULL = ComponentType.FULL


def key(tokens):
    return RadixKey(array("q", tokens))


class Cache:
    """One radix cache over one allocator, recording every slot the allocator takes back."""

    def __init__(self, backend, pool, page_size, policy):
        self.req_pool = ReqToTokenPool(
            size=4, max_context_len=4096, device="cpu", enable_memory_saver=False
        )
        self.alloc = TokenToKVPoolAllocator(
            size=pool, dtype=torch.bfloat16, device="cpu", kvcache=None, need_sort=False
        )
        self.tree = UnifiedRadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=self.req_pool,
                token_to_kv_pool_allocator=self.alloc,
                page_size=page_size,
                tree_components=(FULL,),
                tree_core_backend=backend,
                eviction_policy=policy,
            )
        )
        self.freed = []
        free = self.alloc.free

        def recording_free(indices):
            self.freed.extend(int(i) for i in indices.tolist())
            return free(indices)

        self.alloc.free = recording_free

    def take_freed(self):
        freed, self.freed = self.freed, []
        return freed

    def sizes(self):
        return {
            "evictable": int(self.tree.evictable_size()),
            "protected": int(self.tree.protected_size()),
            "available": int(self.alloc.available_size()),
        }

    def dump(self):
        """The tree (Python core only): DFS by child key; per node key, slots, locks, LRU rank."""
        core = self.tree.tree_core
        nodes = []

        def walk(node):
            for child_key in sorted(node.children, key=_sortable):
                child = node.children[child_key]
                nodes.append(child)
                walk(child)

        walk(core.root_node)
        order = sorted(nodes, key=lambda n: n.last_access_time)
        rank = {n.id: i for i, n in enumerate(order)}
        index = {n.id: i for i, n in enumerate(nodes)}
        out = []
        for n in nodes:
            cd = n.component_data[FULL]
            out.append(
                [
                    index[n.parent.id] if n.parent is not core.root_node else -1,
                    list(n.key.token_ids),
                    None if cd.value is None else [int(v) for v in cd.value.tolist()],
                    int(cd.lock_ref),
                    rank[n.id],
                    int(n.hit_count),
                    int(n.priority),
                ]
            )
        return out, index


def _sortable(child_key):
    return child_key if isinstance(child_key, tuple) else (child_key,)


def node_ref(cache, node_id, index):
    """A node as its canonical DFS index (-1 for the root)."""
    core = cache.tree.tree_core
    if hasattr(core, "root_node") and node_id == core.root_node.id:
        return -1
    return index[node_id]


class Recorder:
    """Runs one workload's operations on a cache and keeps what was asked and answered."""

    def __init__(self, cache, with_tree):
        self.cache = cache
        self.with_tree = with_tree
        self.handles = {}
        self.lines = []

    def after(self, line, node_ids=()):
        line.update(self.cache.sizes())
        if self.with_tree:
            tree, index = self.cache.dump()
            for field, node_id in node_ids:
                line[field] = node_ref(self.cache, node_id, index)
            line["tree"] = tree
        self.lines.append(line)

    def match(self, tokens):
        r = self.cache.tree.match_prefix(MatchPrefixParams(key=key(tokens)))
        indices = self.cache.tree.tree_core.collect_full_device_indices(
            r.last_device_node, self.cache.tree.tree_core.root_node_handle()
        )
        line = {
            "op": "match",
            "tokens": tokens,
            "prefix_len": int(r.device_prefix_len),
            "indices": [int(i) for i in indices.tolist()],
        }
        self.after(line, [("node", r.last_device_node)])
        return r

    def lock(self, handle, node_id):
        receipt = self.cache.tree.inc_lock_ref(node_id)
        self.handles[handle] = receipt
        self.after({"op": "lock", "handle": handle, "delta": int(receipt.delta or 0)}, [("node", node_id)])

    def unlock(self, handle):
        receipt = self.handles.pop(handle)
        self.cache.tree.dec_lock_ref(receipt.node_id, receipt)
        self.after({"op": "unlock", "handle": handle})

    def alloc(self, count):
        slots = self.cache.alloc.alloc(count)
        assert slots is not None, "workloads evict before they allocate"
        slots = [int(s) for s in slots.tolist()]
        self.after({"op": "alloc", "slots": slots})
        return slots

    def insert(self, tokens, value, prev_prefix_len, priority, inserted_len=0):
        r = self.cache.tree.insert(
            InsertParams(
                key=key(tokens),
                value=torch.tensor(value, dtype=torch.int64),
                prev_prefix_len=prev_prefix_len,
                inserted_len=inserted_len,
                priority=priority,
            )
        )
        line = {
            "op": "insert",
            "tokens": tokens,
            "value": value,
            "prev_prefix_len": prev_prefix_len,
            "inserted_len": inserted_len,
            "priority": priority,
            "prefix_len": int(r.prefix_len),
            "freed": self.cache.take_freed(),
        }
        self.after(line, [("node", r.last_device_node)])
        return r

    def free(self, value):
        if value:
            self.cache.alloc.free(torch.tensor(value, dtype=torch.int64))
        self.after({"op": "free", "value": value, "freed": self.cache.take_freed()})

    def evict(self, tokens):
        r = self.cache.tree.evict(EvictParams(num_tokens=tokens))
        line = {
            "op": "evict",
            "tokens": tokens,
            "evicted": int(r.num_tokens_evicted),
            "freed": self.cache.take_freed(),
        }
        self.after(line)


def run_workload(spec, backend, with_tree):
    """Drive one workload's request lifecycles (match, lock, allocate, insert, release, evict)."""
    rng = random.Random(spec["seed"])
    page = spec["page_size"]
    cache = Cache(backend, spec["pool"], page, spec.get("policy", "lru"))
    rec = Recorder(cache, with_tree)
    prefixes = [
        [rng.randrange(1, spec["vocab"] + 1) for _ in range(rng.randrange(1, spec["max_prefix"] + 1))]
        for _ in range(spec["prefixes"])
    ]
    live = []  # (handle, tokens, value, protected_len)
    next_handle = 0
    for _ in range(spec["requests"]):
        action = rng.random()
        if live and (action < spec.get("finish", 0.35) or len(live) >= spec["max_live"]):
            handle, tokens, value, protected = live.pop(rng.randrange(len(live)))
            aligned = len(tokens) // page * page
            priority = rng.choice(spec.get("priorities", [0]))
            r = rec.insert(tokens, value[:aligned], protected, priority)
            # checkpoint_into_tree: the prompt is inserted again (as already owned and inserted,
            # one priority higher), which splits the leaf at the prompt boundary.
            prompt = len(tokens[: rng.randrange(1, len(tokens) + 1)]) // page * page
            if 0 < prompt < aligned:
                rec.insert(tokens[:prompt], value[:prompt], prompt, priority + 1, inserted_len=prompt)
            rec.free(value[aligned:])
            rec.unlock(handle)
            new_handle = f"h{next_handle}"
            next_handle += 1
            rec.lock(new_handle, r.last_device_node)
            rec.unlock(new_handle)
            continue
        if action < spec.get("finish", 0.35) + spec.get("evict", 0.1):
            rec.evict(rng.randrange(1, spec["max_evict"] + 1))
            continue
        prefix = rng.choice(prefixes)
        base = prefix[: rng.randrange(1, len(prefix) + 1)]
        tokens = base + [rng.randrange(1, spec["vocab"] + 1) for _ in range(rng.randrange(1, spec["max_suffix"] + 1))]
        r = rec.match(tokens)
        handle = f"h{next_handle}"
        next_handle += 1
        rec.lock(handle, r.last_device_node)
        matched = rec.lines[-2]["indices"]
        need = len(tokens) - len(matched)
        available = cache.alloc.available_size()
        if need > available:
            rec.evict(need - available)
        if need > cache.alloc.available_size():
            rec.unlock(handle)
            continue
        value = matched + rec.alloc(need)
        live.append((handle, tokens, value, r.device_prefix_len))
    for handle, tokens, value, protected in live:
        aligned = len(tokens) // page * page
        rec.insert(tokens, value[:aligned], protected, 0)
        rec.free(value[aligned:])
        rec.unlock(handle)
    rec.evict(spec["pool"])
    return rec.lines


def public(line):
    return {k: v for k, v in line.items() if k not in ("tree", "node")}


def workloads():
    """The recorded workloads: page sizes, vocabularies (so prefixes collide), pressure, policies."""
    base = dict(vocab=4, prefixes=4, max_prefix=24, max_suffix=12, max_live=4, max_evict=40, requests=60)
    out = []

    def add(name, **over):
        spec = dict(base, name=name, seed=len(out) + 1)
        spec.update(over)
        out.append(spec)

    add("lru-roomy", page_size=1, pool=400)
    add("lru-tight", page_size=1, pool=80)
    add("lru-tiny-vocab", page_size=1, pool=120, vocab=2)
    add("lru-many-live", page_size=1, pool=160, max_live=8, requests=90)
    add("lru-long-prefixes", page_size=1, pool=300, max_prefix=64, max_suffix=32)
    add("lru-evict-heavy", page_size=1, pool=120, evict=0.3, max_evict=80)
    add("lru-priority-insert", page_size=1, pool=120, priorities=[0, 1, 5])
    add("page4-roomy", page_size=4, pool=400)
    add("page4-tight", page_size=4, pool=96)
    add("page16-tight", page_size=16, pool=400, prefixes=2, max_prefix=80, max_suffix=40, vocab=3)
    add("page2-tiny-vocab", page_size=2, pool=100, vocab=2)
    add("lfu-tight", page_size=1, pool=90, policy="lfu")
    add("fifo-tight", page_size=1, pool=90, policy="fifo")
    add("mru-tight", page_size=1, pool=90, policy="mru")
    add("filo-tight", page_size=1, pool=90, policy="filo")
    add("priority-tight", page_size=1, pool=90, policy="priority", priorities=[0, 1, 2, 9])
    add("lru-one-prefix", page_size=1, pool=100, prefixes=1, max_prefix=40)
    add("page4-lfu", page_size=4, pool=120, prefixes=2, policy="lfu")
    add("slru-tight", page_size=1, pool=90, policy="slru", vocab=3)
    add("fifo-splits", page_size=1, pool=70, policy="fifo", vocab=2, evict=0.3, max_evict=12, requests=120)
    add("filo-splits", page_size=1, pool=70, policy="filo", vocab=2, evict=0.3, max_evict=12, requests=120)
    return out


def record(specs, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        lines = run_workload(spec, "python", with_tree=True)
        rust = run_workload(spec, "rust", with_tree=False)
        ours = [public(line) for line in lines]
        if ours != rust:
            first = next(i for i, (a, b) in enumerate(zip(ours, rust)) if a != b)
            raise SystemExit(f"{spec['name']}: the Python and Rust TreeCores differ at op {first}: {ours[first]} vs {rust[first]}")
        header = {
            "format": "sglang-radix-trace/1",
            "sglang": sglang.__version__,
            "workload": spec,
            "cores_agree": ["python", "rust"],
        }
        path = out_dir / f"radix-{spec['name']}.jsonl"
        with open(path, "w") as f:
            f.write(json.dumps(header, separators=(",", ":")) + "\n")
            for line in lines:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
        print(f"{path.name}: {len(lines)} operations", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    specs = [s for s in workloads() if not args.only or s["name"] in args.only]
    if not args.check:
        record(specs, OUT)
        return
    tmp = Path(tempfile.mkdtemp(prefix="sglang-radix-check-"))
    record(specs, tmp)
    exit_with_verdict([f"radix-{s['name']}.jsonl" for s in specs], tmp, OUT)

if __name__ == "__main__":
    main()

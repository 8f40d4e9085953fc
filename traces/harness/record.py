#!/usr/bin/env python3
"""Oracle harness: run vLLM 0.15.1's own V1 Scheduler / AsyncScheduler and
KVCacheManager on CPU, feed them the workloads of workloads.py and write one
JSONL trace per (workload, mode) to traces/vllm-0.15.1/.

Only the scheduler's environment is replaced (see manifest.md): there is no
GPU, no model, no tokenizer and no network.  The model runner is replaced by a
fake ModelRunnerOutput built from the rule documented in README.md; in async
mode EngineCore.step_with_batch_queue (batch queue depth 2) is emulated.
Nothing in vLLM is monkey-patched.

Usage (see README.md):
    /work/.venv-vllm/bin/python traces/harness/record.py            # all traces
    /work/.venv-vllm/bin/python traces/harness/record.py --only burst
    /work/.venv-vllm/bin/python traces/harness/record.py --check    # re-record to a temp dir, compare bytes

Standard library + vllm only.
"""

import os
import sys

# --------------------------------------------------------------------------
# Environment: fixed before vllm is imported.  If the process was started
# without it, re-execute with it, so a re-record is always byte-identical.
# --------------------------------------------------------------------------
FIXED_ENV = {
    "PYTHONHASHSEED": "0",            # NONE_HASH = hash_fn("0"); set iteration order
    "HF_HUB_OFFLINE": "1",            # no network: config.json is read from a local dir
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_USE_V2_MODEL_RUNNER": "0",  # the 0.15.1 default, pinned explicitly
    "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "1",  # the 0.15.1 default, pinned explicitly
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TOKENIZERS_PARALLELISM": "false",
}
if any(os.environ.get(k) != v for k, v in FIXED_ENV.items()):
    env = dict(os.environ)
    env.update(FIXED_ENV)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import argparse  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import workloads as W  # noqa: E402

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventPublisher,
    EventPublisherFactory,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

VLLM_VERSION = "0.15.1"
assert vllm.__version__ == VLLM_VERSION, vllm.__version__

REPO_TRACES = os.path.dirname(HERE)
OUT_DIR = os.path.join(REPO_TRACES, "vllm-" + VLLM_VERSION)

EOS_TOKEN_ID = 2
OUTPUT_BASE = 20000
OUTPUT_STRIDE = 1000
BATCH_QUEUE_SIZE = 2  # EngineCore.batch_queue_size under async scheduling
MAX_STEPS = 50000

# A tiny Llama config.json: the scheduler only reads max_model_len,
# is_encoder_decoder, multimodal and pooling facts from the model config.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 131072,  # above every token id the workloads use
    "max_position_embeddings": 32768,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": EOS_TOKEN_ID,
}
NUM_LAYERS = TINY_LLAMA["num_hidden_layers"]
HEAD_SIZE = TINY_LLAMA["hidden_size"] // TINY_LLAMA["num_attention_heads"]


def output_token(req_index, k):
    return OUTPUT_BASE + OUTPUT_STRIDE * req_index + k


def fnv1a64(ids):
    """FNV-1a 64 over the ASCII bytes of the ids joined by ','."""
    h = 0xCBF29CE484222325
    for b in ",".join(str(i) for i in ids).encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def hash_hex(h):
    """Event hashes are ints (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1)."""
    if h is None:
        return None
    assert isinstance(h, int), type(h)
    return "%016x" % h


def block_hash_int(b):
    # the same conversion as kv_cache_utils.maybe_convert_block_hash
    return int.from_bytes(b, byteorder="big") & ((1 << 64) - 1)


class RecordingPublisher(EventPublisher):
    """In-process replacement of the ZMQ publisher: keeps every KVEventBatch."""

    def __init__(self, data_parallel_rank=0, **_config):
        super().__init__(data_parallel_rank)
        self.batches = []

    def publish(self, events):
        self.batches.append(events)

    def shutdown(self):
        pass


_PUBLISHER_NAME = "oracle-harness-recorder"
EventPublisherFactory.register_publisher(_PUBLISHER_NAME, RecordingPublisher)

_MODEL_DIR = None


def model_dir():
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = tempfile.mkdtemp(prefix="tiny-llama-")
        with open(os.path.join(_MODEL_DIR, "config.json"), "w") as f:
            json.dump(TINY_LLAMA, f)
    return _MODEL_DIR


# --------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------

def build_scheduler(c, mode):
    model_config = ModelConfig(
        model=model_dir(),
        dtype="float16",
        skip_tokenizer_init=True,
        max_model_len=c["max_model_len"],
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=c["max_num_seqs"],
        max_num_batched_tokens=c["max_num_batched_tokens"],
        max_model_len=c["max_model_len"],
        enable_chunked_prefill=c["enable_chunked_prefill"],
        long_prefill_token_threshold=c["long_prefill_token_threshold"],
        max_num_partial_prefills=c["max_num_partial_prefills"],
        policy=c["policy"],
        async_scheduling=(mode == "async"),
        is_encoder_decoder=False,
    )
    cache_config = CacheConfig(
        block_size=c["block_size"],
        enable_prefix_caching=c["enable_prefix_caching"],
        prefix_caching_hash_algo=c["prefix_caching_hash_algo"],
        swap_space=0,
        cache_dtype="auto",
    )
    kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        kv_events_config=kv_events_config,
        device_config=DeviceConfig(device="cpu"),
    )
    # The publisher is chosen after validation (the config's Literal type only
    # names "null" and "zmq"); the factory's registry is vLLM's own extension point.
    vllm_config.kv_events_config.publisher = _PUBLISHER_NAME
    sc = vllm_config.scheduler_config
    assert sc.async_scheduling == (mode == "async")
    kv_cache_config = KVCacheConfig(
        num_blocks=c["num_gpu_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["model.layers.%d.self_attn.attn" % i for i in range(NUM_LAYERS)],
                FullAttentionSpec(
                    block_size=c["block_size"],
                    num_kv_heads=TINY_LLAMA["num_key_value_heads"],
                    head_size=HEAD_SIZE,
                    dtype=torch.float16,
                ),
            )
        ],
    )
    vllm_config.cache_config.num_gpu_blocks = c["num_gpu_blocks"]
    cls = AsyncScheduler if mode == "async" else Scheduler
    assert sc.get_scheduler_cls() is cls
    sched = cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=c["block_size"],
        log_stats=True,
    )
    assert isinstance(sched.kv_event_publisher, RecordingPublisher)
    hasher = None
    none_hash = None
    if vllm_config.cache_config.enable_prefix_caching:
        # exactly what EngineCore.__init__ does
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        none_hash = kv_cache_utils.NONE_HASH.hex()
        hasher = get_request_block_hasher(c["block_size"], hash_fn)
    effective = {
        "block_size": vllm_config.cache_config.block_size,
        "num_gpu_blocks": c["num_gpu_blocks"],
        "usable_blocks": c["num_gpu_blocks"] - 1,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_model_len": vllm_config.model_config.max_model_len,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "max_num_partial_prefills": sc.max_num_partial_prefills,
        "max_long_partial_prefills": sc.max_long_partial_prefills,
        "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
        "policy": sc.policy,
        "prefix_caching_hash_algo": vllm_config.cache_config.prefix_caching_hash_algo,
        "none_hash_seed": os.environ["PYTHONHASHSEED"] if hasher else None,
        "none_hash": none_hash,
        "async_scheduling": sc.async_scheduling,
        "scheduler_class": cls.__name__,
        "batch_queue_size": BATCH_QUEUE_SIZE if mode == "async" else 1,
        "num_spec_tokens": sched.num_spec_tokens,
        "num_lookahead_tokens": sched.num_lookahead_tokens,
        "kv_cache_groups": 1,
        "kv_cache_spec": "FullAttention",
        "log_stats": True,
        "eos_token_id": EOS_TOKEN_ID,
        "use_v2_model_runner": bool(sched.use_v2_model_runner),
        "pipeline_parallel_size": 1,
        "kv_connector": None,
        "lora": None,
        "enable_kv_cache_events": True,
        "kv_event_hashes": "int: low 64 bits (last 8 bytes, big-endian) of the block hash; written as 16 hex digits",
    }
    return sched, hasher, effective


# --------------------------------------------------------------------------
# One trace
# --------------------------------------------------------------------------

def resolve_abort_step(a, mode):
    if isinstance(a, dict):
        return a[mode]
    return a


def resolve_prompts(specs):
    """Prompts of follow-up requests: parent prompt + parent's outputs + extra."""
    prompts = []
    index = {}
    for i, s in enumerate(specs):
        rid = "r%d" % i
        index[rid] = i
        if s["after"] is None:
            assert s["prompt"] is not None and s["extra"] is None
            p = list(s["prompt"])
        else:
            j = index[s["after"]]
            assert specs[j]["abort_step"] is None, "a follow-up's parent must not be aborted"
            outs = [output_token(j, k) for k in range(specs[j]["max_tokens"])]
            p = prompts[j] + outs + list(s["extra"])
        assert all(isinstance(t, int) and 3 <= t for t in p)
        prompts.append(p)
    return prompts


class Trace:
    def __init__(self, workload, mode):
        self.w = workload
        self.mode = mode
        self.c = workload["config"]
        self.sched, self.hasher, self.effective = build_scheduler(self.c, mode)
        self.specs = workload["requests"]
        self.prompts = resolve_prompts(self.specs)
        self.ids = ["r%d" % i for i in range(len(self.specs))]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
        self.objs = {}  # rid -> Request (kept after finish)
        self.finished = {}  # rid -> reason
        self.hash_owner = {}  # int hash -> (rid, block index)
        self.hash_seen = {}  # rid -> number of block hashes scanned
        self.lines = []
        self.on_step_start = None  # optional hook(step), used by tools only
        self.stats = {"preemptions": 0, "aborts": [], "max_running": 0}
        # For the header: the max_model_len cap is part of the rule for a request
        for s, p in zip(self.specs, self.prompts):
            assert len(p) < self.c["max_model_len"], "prompt must be shorter than max_model_len"
            assert s["max_tokens"] < OUTPUT_STRIDE

    # ----- header ---------------------------------------------------------
    def header(self):
        return self.header_fields() | (
            {"stop_after_steps": self.w["stop_after_steps"]} if "stop_after_steps" in self.w else {})

    def header_fields(self):
        reqs = []
        for i, s in enumerate(self.specs):
            reqs.append({
                "id": self.ids[i],
                "prompt": self.prompts[i],
                "max_tokens": s["max_tokens"],
                "arrival_step": s["arrival_step"],
                "after": s["after"],
                "extra": s["extra"],
                "priority": s["priority"],
                "abort_step": resolve_abort_step(s["abort_step"], self.mode),
            })
        return {
            "kind": "header",
            "vllm_version": VLLM_VERSION,
            "workload": self.w["name"],
            "description": self.w["description"],
            "mode": self.mode,
            "config": self.effective,
            "requests": reqs,
            "output_rule": "token k (0-based) of request with index i is 20000 + 1000*i + k",
            "sample_rule": (
                "sync: a scheduled request gets one token iff after schedule() "
                "num_computed_tokens >= num_tokens; async: iff its num_output_placeholders "
                "went up in that schedule(); every other scheduled request gets []"
            ),
            "arrival_rule": (
                "a request with arrival_step S is added at step S before schedule(); a request "
                "with after=rK is added at step F+1 where F is the step whose update lists rK "
                "in finished; its prompt (given in full) is rK's prompt + rK's max_tokens "
                "outputs + extra; arrival_time = float(step added); several requests added in "
                "one step are added in request-index order"
            ),
            "abort_rule": (
                "at step S, after the adds, each request with abort_step S is aborted in "
                "request-index order by its own scheduler.finish_requests([id], "
                "FINISHED_ABORTED) call"
            ),
            "step_rule": (
                "sync: if has_requests(): schedule(); update_from_output(). async: "
                "EngineCore.step_with_batch_queue with queue depth 2, a batch is never done "
                "before the next schedule() returns. A step where neither ran is idle."
            ),
        }

    # ----- helpers ----------------------------------------------------------
    def request_state(self, rid):
        r = self.objs.get(rid)
        if r is None:
            return "not_added"
        st = r.status
        if st == RequestStatus.RUNNING:
            return "running"
        if st == RequestStatus.WAITING:
            return "waiting"
        if st == RequestStatus.PREEMPTED:
            return "preempted"
        if RequestStatus.is_finished(st):
            return "finished"
        return str(st)

    def add_request(self, i, step):
        rid = self.ids[i]
        s = self.specs[i]
        if s["after"] is not None:
            # The follow-up's prompt must be what the parent really produced.
            parent = self.objs[s["after"]]
            actual = list(parent.prompt_token_ids) + list(parent.output_token_ids) + list(s["extra"])
            assert actual == self.prompts[i], (rid, "follow-up prompt mismatch")
        r = Request(
            request_id=rid,
            prompt_token_ids=list(self.prompts[i]),
            sampling_params=SamplingParams(max_tokens=s["max_tokens"]),
            pooling_params=None,
            eos_token_id=EOS_TOKEN_ID,
            arrival_time=float(step),
            priority=s["priority"],
            block_hasher=self.hasher,
        )
        self.objs[rid] = r
        self.sched.add_request(r)

    def free_queue_digest(self):
        q = self.sched.kv_cache_manager.block_pool.free_block_queue
        return fnv1a64(b.block_id for b in q.get_all_free_blocks())

    def num_free(self):
        return self.sched.kv_cache_manager.block_pool.get_num_free_blocks()

    def scan_hashes(self):
        for rid, r in self.objs.items():
            n0 = self.hash_seen.get(rid, 0)
            hs = r.block_hashes
            for j in range(n0, len(hs)):
                self.hash_owner.setdefault(block_hash_int(hs[j]), (rid, j))
            self.hash_seen[rid] = len(hs)

    def encode_events(self, batches):
        out = []
        if not batches:
            return out
        self.scan_hashes()
        bs = self.c["block_size"]
        for batch in batches:
            for ev in batch.events:
                if isinstance(ev, BlockStored):
                    assert ev.block_size == bs and ev.medium == "GPU"
                    assert ev.lora_id is None and ev.lora_name is None
                    # The last hash of a chain fixes the whole chain, so its
                    # owner holds exactly these blocks.
                    n = len(ev.block_hashes)
                    rid, jl = self.hash_owner[ev.block_hashes[-1]]
                    j = jl - n + 1
                    r = self.objs[rid]
                    assert list(ev.token_ids) == list(r.all_token_ids[j * bs:(j + n) * bs])
                    for t, h in enumerate(ev.block_hashes):
                        assert block_hash_int(r.block_hashes[j + t]) == h
                    if j == 0:
                        assert ev.parent_block_hash is None
                    else:
                        assert ev.parent_block_hash == block_hash_int(r.block_hashes[j - 1])
                    out.append(["S", rid, j, n, [hash_hex(h) for h in ev.block_hashes],
                                hash_hex(ev.parent_block_hash)])
                elif isinstance(ev, BlockRemoved):
                    assert ev.medium == "GPU"
                    out.append(["R", [hash_hex(h) for h in ev.block_hashes]])
                elif isinstance(ev, AllBlocksCleared):
                    out.append(["C"])
                else:
                    raise AssertionError(type(ev))
        return out

    # ----- schedule / update ------------------------------------------------
    def do_schedule(self, rec):
        sched = self.sched
        pre_running = [r.request_id for r in sched.running]
        pre_placeholders = {rid: r.num_output_placeholders for rid, r in sched.requests.items()}
        so = sched.schedule()
        c = self.c
        assert so.total_num_scheduled_tokens <= c["max_num_batched_tokens"]
        assert len(sched.running) <= c["max_num_seqs"]
        self.stats["max_running"] = max(self.stats["max_running"], len(sched.running))

        scheduled = [[rid, n] for rid, n in so.num_scheduled_tokens.items()]
        new = [[nr.req_id, nr.num_computed_tokens, list(nr.block_ids[0])]
               for nr in so.scheduled_new_reqs]
        cd = so.scheduled_cached_reqs
        cached = []
        for k, rid in enumerate(cd.req_ids):
            nb = cd.new_block_ids[k]
            cached.append([rid, 1 if rid in cd.resumed_req_ids else 0, cd.num_computed_tokens[k],
                           cd.num_output_tokens[k], list(nb[0]) if nb is not None else None])
        # Order of preemption (SchedulerOutput only carries a set).
        pset = set(so.preempted_req_ids)
        if not pset:
            preempted = []
        elif sched.policy.value == "fcfs":
            # each victim was prepended to `waiting`, and admission is skipped
            # in a step with preemptions, so the head of waiting is the
            # victims in reverse order
            head = [r.request_id for r in list(sched.waiting)[:len(pset)]]
            assert set(head) == pset
            preempted = list(reversed(head))
        else:
            # priority: each victim is max((priority, arrival_time)) over the
            # remaining running list (first in list order on ties), so victims
            # come out in decreasing key order, ties in running order
            pos = {rid: k for k, rid in enumerate(pre_running)}
            objs = self.objs
            preempted = sorted(pset, key=lambda rid: (-objs[rid].priority,
                                                      -objs[rid].arrival_time, pos[rid]))
        self.stats["preemptions"] += len(preempted)

        # which scheduled requests get a sampled token from the fake runner
        sampled = []
        for rid, _n in scheduled:
            r = sched.requests[rid]
            if self.mode == "sync":
                if r.num_computed_tokens >= r.num_tokens:
                    sampled.append(rid)
            else:
                if r.num_output_placeholders > pre_placeholders.get(rid, 0):
                    assert r.num_output_placeholders == pre_placeholders.get(rid, 0) + 1
                    sampled.append(rid)

        rec["scheduled"] = scheduled
        rec["total"] = so.total_num_scheduled_tokens
        rec["new"] = new
        rec["cached"] = cached
        rec["preempted"] = preempted
        rec["finished_prev"] = sorted(so.finished_req_ids, key=lambda rid: self.index[rid])
        rec["common_prefix"] = so.num_common_prefix_blocks[0]
        rec["running"] = [r.request_id for r in sched.running]
        rec["waiting"] = [r.request_id for r in sched.waiting]
        rec["free_blocks"] = self.num_free()
        rec["free_q"] = self.free_queue_digest()
        return so, sampled

    def do_update(self, step_of, so, sampled):
        sched = self.sched
        req_ids = list(so.num_scheduled_tokens.keys())
        sset = set(sampled)
        toks = []
        sampled_ids = []
        for rid in req_ids:
            if rid in sset:
                r = self.objs[rid]
                t = output_token(self.index[rid], r.num_output_tokens)
                toks.append([rid, t])
                sampled_ids.append([t])
            else:
                sampled_ids.append([])
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: k for k, rid in enumerate(req_ids)},
            sampled_token_ids=sampled_ids,
        )
        pub = sched.kv_event_publisher
        n_batches = len(pub.batches)
        outs = sched.update_from_output(so, mro)
        finished = []
        stats = None
        for _client, eco in outs.items():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    finished.append([o.request_id, str(o.finish_reason)])
                    self.finished[o.request_id] = str(o.finish_reason)
            if eco.scheduler_stats is not None:
                assert stats is None
                stats = eco.scheduler_stats
        assert stats is not None
        pc = stats.prefix_cache_stats
        assert not pc.reset
        new_batches = pub.batches[n_batches:]
        assert len(new_batches) <= 1
        upd = {
            "of_step": step_of,
            "tokens": toks,
            "finished": finished,
            "stats": [stats.num_running_reqs, stats.num_waiting_reqs, stats.kv_cache_usage,
                      pc.requests, pc.queries, pc.hits,
                      pc.preempted_requests, pc.preempted_queries, pc.preempted_hits],
            "free_blocks": self.num_free(),
            "free_q": self.free_queue_digest(),
            "kv_events": self.encode_events(new_batches),
            "cached_tokens": [[rid, self.objs[rid].num_cached_tokens] for rid, _ in finished],
        }
        return upd

    def end_line(self):
        """Each request's finish reason and num_cached_tokens (-1: never admitted), by index."""
        return {"kind": "end", "requests": [
            [rid, self.finished.get(rid), self.objs[rid].num_cached_tokens if rid in self.objs else None]
            for rid in self.ids]}

    # ----- main loop ----------------------------------------------------------
    def run(self):
        sched = self.sched
        n = len(self.specs)
        static = {}
        children = {}
        aborts = {}
        for i, s in enumerate(self.specs):
            if s["after"] is None:
                static.setdefault(s["arrival_step"], []).append(i)
            else:
                children.setdefault(s["after"], []).append(i)
            a = resolve_abort_step(s["abort_step"], self.mode)
            if a is not None:
                aborts.setdefault(a, []).append(i)
        added_count = 0
        ready = []  # follow-ups to add at the next step
        queue = deque()  # async batch queue: (step, SchedulerOutput, sampled)
        step = 0
        self.lines.append(self.header())
        stop_after = self.w.get("stop_after_steps")
        while True:
            if stop_after is not None and step == stop_after:
                break
            assert step < MAX_STEPS, "runaway workload"
            rec = {"step": step, "added": [], "aborted": []}
            if self.on_step_start is not None:
                self.on_step_start(step)
            todo = sorted(static.pop(step, []) + ready)
            ready = []
            for i in todo:
                self.add_request(i, step)
                rec["added"].append(self.ids[i])
                added_count += 1
            for i in aborts.pop(step, []):
                rid = self.ids[i]
                state = self.request_state(rid)
                exp = self.specs[i].get("expect_abort")
                assert exp is None or exp == state, (self.w["name"], self.mode, rid, step, state, exp)
                sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                rec["aborted"].append([rid, state])
                self.stats["aborts"].append(state)
                if state in ("waiting", "running", "preempted"):
                    self.finished[rid] = "abort"
            for key in ("scheduled", "total", "new", "cached", "preempted", "finished_prev",
                        "common_prefix", "running", "waiting", "free_blocks", "free_q"):
                rec[key] = None
            rec["update"] = None

            busy = sched.has_requests() or bool(queue)
            if not busy:
                if added_count == n and not static and not aborts:
                    break
                if not static and not aborts:
                    raise AssertionError("a follow-up whose parent never finishes")
                self.lines.append(rec)
                step += 1
                continue

            finished_now = []
            if self.mode == "sync":
                so, sampled = self.do_schedule(rec)
                rec["update"] = self.do_update(step, so, sampled)
                finished_now = rec["update"]["finished"]
            else:
                do_pop = True
                if sched.has_requests():
                    so, sampled = self.do_schedule(rec)
                    queue.appendleft((step, so, sampled))
                    if so.total_num_scheduled_tokens > 0 and len(queue) < BATCH_QUEUE_SIZE:
                        do_pop = False
                if do_pop:
                    s_of, so_old, sampled_old = queue.pop()
                    rec["update"] = self.do_update(s_of, so_old, sampled_old)
                    finished_now = rec["update"]["finished"]
            for rid, _reason in finished_now:
                ready.extend(children.pop(rid, []))
            self.lines.append(rec)
            step += 1

        if stop_after is not None:
            # A livelock: the requests are still there.
            assert sched.has_requests(), "the workload finished before stop_after_steps"
            assert not self.finished, "a request finished"
            self.stats["steps"] = step
            self.lines.append(self.end_line())
            return self.lines
        # Final checks: every request finished, outputs follow the rule
        assert not children, children
        for i, rid in enumerate(self.ids):
            r = self.objs[rid]
            assert r.is_finished(), (rid, r.status)
            reason = self.finished.get(rid)
            assert reason is not None, rid
            outs = list(r.output_token_ids)
            assert outs == [output_token(i, k) for k in range(len(outs))], rid
            if reason == "length":
                assert len(outs) == self.specs[i]["max_tokens"] or \
                    r.num_tokens >= self.c["max_model_len"], rid
        assert not sched.requests and not sched.running and len(sched.waiting) == 0
        assert self.num_free() == self.c["num_gpu_blocks"] - 1
        self.stats["steps"] = step
        self.lines.append(self.end_line())
        return self.lines


def dump_lines(lines, path):
    with open(path, "w") as f:
        for obj in lines:
            f.write(json.dumps(obj, separators=(",", ":"), allow_nan=False))
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR, help="output directory (default: %(default)s)")
    ap.add_argument("--only", nargs="*", help="workload names to record")
    ap.add_argument("--mode", choices=["sync", "async"], help="record only this mode")
    ap.add_argument("--check", action="store_true",
                    help="record into a temporary directory and compare byte for byte with --out")
    args = ap.parse_args()

    target = args.out
    out = tempfile.mkdtemp(prefix="oracle-check-") if args.check else target
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    index = []
    total_steps = 0
    for w in W.WORKLOADS:
        if args.only and w["name"] not in args.only:
            continue
        for mode in w["modes"]:
            if args.mode and mode != args.mode:
                continue
            t = time.time()
            tr = Trace(w, mode)
            lines = tr.run()
            name = "%s-%s.jsonl" % (w["name"], mode)
            path = os.path.join(out, name)
            dump_lines(lines, path)
            size = os.path.getsize(path)
            st = tr.stats
            total_steps += st["steps"]
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            hits = sum(line["update"]["stats"][5] + line["update"]["stats"][8]
                       for line in lines[1:] if line.get("update"))
            index.append((name, st["steps"], len(tr.specs), st["preemptions"],
                          ",".join(st["aborts"]) or "-", hits, size, digest))
            print("%-48s steps %5d  reqs %3d  preempt %4d  aborts %-26s hit_tokens %6d  %7d B  %.1fs"
                  % (name, st["steps"], len(tr.specs), st["preemptions"],
                     ",".join(st["aborts"]) or "-", hits, size, time.time() - t), flush=True)
    if not args.only and not args.mode:
        with open(os.path.join(out, "INDEX.tsv"), "w") as f:
            f.write("file\tsteps\trequests\tpreemptions\taborts\tprefix_hit_tokens\tbytes\tsha256\n")
            for row in index:
                f.write("\t".join(str(x) for x in row) + "\n")
    print("total steps %d, %d traces, %.1fs" % (total_steps, len(index), time.time() - t0))
    if args.check:
        bad = []
        for row in index:
            a, b = os.path.join(out, row[0]), os.path.join(target, row[0])
            if not (os.path.exists(b) and filecmp.cmp(a, b, shallow=False)):
                bad.append(row[0])
        if not args.only and not args.mode:
            a, b = os.path.join(out, "INDEX.tsv"), os.path.join(target, "INDEX.tsv")
            if not (os.path.exists(b) and filecmp.cmp(a, b, shallow=False)):
                bad.append("INDEX.tsv")
        shutil.rmtree(out)
        if bad:
            print("DIFFERENT: " + " ".join(bad))
            sys.exit(1)
        print("identical: %d traces" % len(index))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Oracle harness: SGLang 0.5.23's real scheduler batch forming on CPU.

Real upstream code driven here (see sglang-trace-format.md, MANIFEST):
Scheduler.get_next_batch_to_run / _get_new_batch_prefill_raw /
update_running_batch / _reqs_finishing_inflight / is_disable_overlap_for_batch /
_add_request_to_queue / init_req_max_new_tokens / abort_request /
process_pending_chunked_abort / is_fully_idle, SchedulePolicy, PrefillAdder,
ScheduleBatch (init_new, prepare_for_extend, mix_with_running,
prepare_for_decode, merge/filter, check_decode_mem, retract_decode, copy),
UnifiedRadixCache (Rust TreeCore by default), TokenToKVPoolAllocator /
PagedTokenToKVPoolAllocator, ReqToTokenPool, NewTokenRatioTracker,
mem_cache.common.checkpoint_kv_cache / release_kv_cache.

Replaced: the model forward (a deterministic output rule), the parts of
Scheduler.run_batch and BatchResultProcessor.process_batch_result_{prefill,decode}
that touch scheduler state (re-implemented line by line for the plain path),
on_idle (only its new_token_ratio reset), the event loops (re-written in the
same order, one iteration = one trace step), and stubbed collaborators.

Usage:
  /work/venv-sglang/bin/python record_sglang.py              # record all, write INDEX.tsv
  /work/venv-sglang/bin/python record_sglang.py --check      # re-record to a temp dir, compare bytes
  options: --only NAME ..., --out DIR, --tree-core rust|python
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXED_ENV = {
    "PYTHONHASHSEED": "0",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "SGLANG_ENABLE_WAITING_PREFIX_REFRESH": "1",
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "4096",
    "SGLANG_RETRACT_DECODE_STEPS": "20",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "0.7",
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "0.14",
    "SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP": "0",
    "SGLANG_RADIX_FORCE_MISS": "0",
}
UNSET_ENV = ["SGLANG_MAX_NEW_TOKENS_LIMIT", "SGLANG_TEST_RETRACT", "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS",
             "IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD", "IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD"]
if any(os.environ.get(k) != v for k, v in FIXED_ENV.items()) or any(k in os.environ for k in UNSET_ENV):
    env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV}
    env.update(FIXED_ENV)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from collections import deque  # noqa: E402
from array import array  # noqa: E402
from types import SimpleNamespace as NS  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402

import sglang  # noqa: E402
from sglang.srt import runtime_context as rc  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.disaggregation.utils import DisaggregationMode  # noqa: E402
from sglang.srt.managers.io_struct import AbortReq  # noqa: E402
from sglang.srt.managers.utils import validate_input_length  # noqa: E402
from sglang.srt.managers.schedule_batch import (  # noqa: E402
    FINISH_ABORT, FINISH_LENGTH, FINISH_MATCHED_STR, FINISH_MATCHED_TOKEN, Req, ScheduleBatch,
)
from sglang.srt.managers.schedule_policy import SchedulePolicy  # noqa: E402
from sglang.srt.managers.scheduler import Scheduler  # noqa: E402
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import base as component_base  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

sys.path.insert(0, HERE)
import sglang_workloads as SW  # noqa: E402
from trace_check import exit_with_verdict  # noqa: E402

VERSION = "0.5.23"
assert sglang.__version__ == VERSION, sglang.__version__
MODEL_DIR = os.path.join(HERE, "sglang-tiny-model")
OUT_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "traces", "sglang-" + VERSION)
EOS = 2
VOCAB = 32000
MAX_STEPS = 5000

logging.getLogger("sglang").setLevel(logging.ERROR)
for _name in list(logging.root.manager.loggerDict):
    if _name.startswith("sglang"):
        logging.getLogger(_name).setLevel(logging.ERROR)

OUTPUT_RULE = ("output token k (0-based) of the request with index i is 1000 + (131*i + k) % 30000, "
               "except that k == eos_at gives the EOS token 2; the value is taken when the result is "
               "processed, k = len(req.output_ids) at that moment")
ARRIVAL_RULE = ("at the top of step S (ingest): every request with arrival == S is created, "
                "init_req_max_new_tokens clips max_new_tokens, and _add_request_to_queue appends it, in "
                "request order; then every request with abort == S is aborted with "
                "abort_request(AbortReq(rid=rid)), in request order")
STEP_RULE = {
    False: ("event_loop_normal: ingest; get_next_batch_to_run; if a batch: run (fake) and "
            "process its result at once, else on_idle; last_batch = batch"),
    True: ("event_loop_overlap: ingest; get_next_batch_to_run forms batch k; if "
           "is_disable_overlap_for_batch: process k-1 now; if a batch: run (fake) and push "
           "(batch.copy(), result); then if last_batch: process k-1 (unless done), elif no batch: "
           "on_idle; last_batch = batch"),
}


def output_token(i, k, eos_at):
    return EOS if eos_at is not None and k == eos_at else 1000 + (131 * i + k) % 30000


def reason_name(r):
    if r is None:
        return None
    if isinstance(r, FINISH_LENGTH):
        return "length"
    if isinstance(r, FINISH_MATCHED_TOKEN):
        return "stop"
    if isinstance(r, FINISH_MATCHED_STR):
        return "stop_str"
    if isinstance(r, FINISH_ABORT):
        return "abort"
    return type(r).__name__


def dump_lines(lines, path):
    with open(path, "w") as f:
        for obj in lines:
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")


class Trace:
    def __init__(self, w, tree_core):
        self.w = w
        self.c = c = w["config"]
        self.tree_core = tree_core
        self.specs = w["requests"]
        self.index = {s["rid"]: i for i, s in enumerate(self.specs)}
        self.lines = []
        self.stats = dict(retractions=0, oom_aborts=0, aborts=0, hit_tokens=0, kinds={})
        self._build()

    # ------------------------------------------------------------ construction
    def _build(self):
        c = self.c
        # Per-trace process state that upstream keeps in module globals.
        component_base._LAST_ACCESS_TIME_COUNTER_FLOAT = component_base.float64(1.0)
        for k in component_base._COMPONENT_UUID_COUNTERS:
            component_base._COMPONENT_UUID_COUNTERS[k] = 0
        random.seed(c["random_seed"])
        os.environ["SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS"] = str(c["decay_steps"])

        sa = ServerArgs(
            model_path=MODEL_DIR, device="cpu", skip_tokenizer_init=True,
            chunked_prefill_size=c["chunk"], max_prefill_tokens=c["max_prefill_tokens"],
            schedule_policy=c["policy"], page_size=c["page_size"],
            max_running_requests=c["max_running"], max_total_tokens=c["pool"],
            enable_mixed_chunk=c["mixed"], disable_overlap_schedule=not c["overlap"],
        )
        rc.publish(sa, role="scheduler")
        rc.get_context().override("scheduler.pp_max_micro_batch_size_default",
                                  pp_max_micro_batch_size=c["max_running"])
        sched_cfg = rc.get_schedule()
        mc = ModelConfig.from_server_args(sa)
        P = c["page_size"]
        pool = c["pool"]
        assert pool % P == 0
        # kv_cache_configurator.resolve_max_num_reqs: min(max_running_requests, tokens // 2)
        assert c["max_running"] <= pool // 2, "max_running would be lowered"
        self.req_pool = ReqToTokenPool(size=c["max_running"], max_context_len=mc.context_len + 4,
                                       device="cpu", enable_memory_saver=False)
        if P == 1:
            self.alloc = TokenToKVPoolAllocator(size=pool, dtype=torch.bfloat16, device="cpu",
                                                kvcache=None, need_sort=False)
        else:
            self.alloc = PagedTokenToKVPoolAllocator(size=pool, page_size=P, dtype=torch.bfloat16,
                                                     device="cpu", kvcache=None, need_sort=False)
        self.tree = UnifiedRadixCache(CacheInitParams(
            disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.alloc,
            page_size=P, tree_components=(ComponentType.FULL,), tree_core_backend=self.tree_core))
        self.aborted_out = []
        noop = lambda *a, **k: None  # noqa: E731
        max_req_len = min(mc.context_len - 1, pool - 1)
        s = Scheduler.__new__(Scheduler)
        s.__dict__.update(dict(
            waiting_queue=[], running_batch=ScheduleBatch(reqs=[], batch_is_full=False),
            last_batch=None, chunked_req=None, _pending_chunked_abort_req=None,
            req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.alloc,
            tree_cache=self.tree, page_size=P,
            schedule_policy=sched_cfg.schedule_policy,
            max_prefill_tokens=sched_cfg.max_prefill_tokens,
            max_running_requests=c["max_running"], max_queued_requests=None,
            priority_scheduling_preemption_threshold=10, processed_tokens_counter=0,
            forward_ct=0, _sched_idled=False,
            max_new_tokens_limit=None, max_req_len=max_req_len, max_req_input_len=max_req_len - 5,
            max_total_num_tokens=pool, kv_shard_widening=1, sliding_window_size=None,
            dllm_config=None, enable_hisparse=False, hisparse_coordinator=None,
            enable_hierarchical_cache=False, enable_unified_cache_external_linker=False,
            enable_lmcache=False, enable_hicache_storage=False, enable_lora=False,
            enable_priority_scheduling=False, enable_priority_preemption=False,
            schedule_low_priority_values_first=False, abort_on_priority_when_disabled=False,
            is_hybrid_swa=False,
            enable_overlap=c["overlap"], enable_skip_finishing_decode=c["overlap"],
            result_queue=deque(), require_mlp_sync=False, prefill_delayer=None,
            min_free_slots_delayer=None, dynamic_chunk_sizer=None, truncation_align_size=None,
            decode_offload_manager=None, _prefill_decode_interval_remaining=0,
            prefill_decode_interval=0, disaggregation_mode=DisaggregationMode.NULL,
            spec_algorithm=SpeculativeAlgorithm.from_string(None), model_config=mc,
            scheduler_stage_metrics=None, mm_receiver=None, enable_continuous_input_polling=False,
            _engine_paused=False, is_generation=True,
            grammar_manager=NS(has_waiting_grammars=lambda: False, grammar_queue=[],
                               abort_requests=noop),
            dllm_manager=NS(any_staging_reqs=lambda: False),
            beam_coordinator=NS(pending_member_rows=lambda b: 0, retire_group=noop),
            tp_worker=NS(model_runner=NS(attn_backend=object(), prefill_aware_swa=False)),
            load_inquirer=NS(_get_num_pending_tokens=lambda **k: 0),
            dp_attn_adapter=NS(maybe_prepare_mlp_sync_batch=lambda b, need_sync=False: b,
                               maybe_convert_decode_to_extend=lambda b: b),
            ngram_embedding_manager=NS(prepare_for_forward=lambda b, chunked_req=None: b),
            metrics_reporter=NS(num_retracted_reqs=0, enable_metrics=False),
            send_abort_output=lambda abort_req, req: self.aborted_out.append(req.rid),
        ))
        # Real initialisers: chunk size (<= 0 -> None), is_mixed_chunk, policy, ratio tracker.
        s.init_chunked_prefill()
        s.init_schedule_policy()
        self.s = s
        self.max_req_len = max_req_len
        # Capture retract_decode's return value for the trace (the call itself is upstream).
        self.retract_log = []
        orig = ScheduleBatch.retract_decode
        log = self.retract_log

        def retract_decode(batch):
            ret = orig(batch)
            log.append(([r.rid for r in ret[0]], [r.rid for r in ret[2]]))
            return ret
        self._orig_retract = orig
        ScheduleBatch.retract_decode = retract_decode
        tr = s.new_token_ratio_tracker
        self.effective = dict(
            page_size=P, max_total_num_tokens=pool, chunked_prefill_size=s.chunked_prefill_size,
            max_prefill_tokens=sched_cfg.max_prefill_tokens, max_running_requests=c["max_running"],
            pp_max_micro_batch_size=rc.get_parallel().pp_max_micro_batch_size,
            req_to_token_pool_size=self.req_pool.size, schedule_policy=sched_cfg.schedule_policy,
            enable_mixed_chunk=s.is_mixed_chunk, overlap=c["overlap"],
            event_loop="event_loop_overlap" if c["overlap"] else "event_loop_normal",
            enable_skip_finishing_decode=c["overlap"],
            schedule_conservativeness=sched_cfg.schedule_conservativeness,
            new_token_ratio=dict(init=tr.init, min=tr.min, decay=tr.decay, decay_steps=c["decay_steps"]),
            retract_decode_steps=20, clip_max_new_tokens_estimation=4096,
            retraction_policy=sched_cfg.retraction_policy,
            context_len=mc.context_len, max_req_len=max_req_len, max_req_input_len=max_req_len - 5,
            tree_core=self.tree_core, radix_eviction_policy="lru", disable_radix_cache=False,
            in_batch_prefix_check_threshold=32, in_batch_prefix_deprioritize_threshold=32,
            waiting_queue_prefix_match_max=128, waiting_prefix_refresh_interval=32,
            random_seed=c["random_seed"], eos_token_id=EOS, vocab_size=VOCAB,
        )

    def close(self):
        ScheduleBatch.retract_decode = self._orig_retract

    # ------------------------------------------------------------ helpers
    def make_req(self, i):
        sp_ = self.specs[i]
        sp = SamplingParams(max_new_tokens=sp_["max_new"], ignore_eos=sp_["ignore_eos"])
        sp.normalize(None)
        r = Req(sp_["rid"], "", array("q", sp_["prompt"]), sp, eos_token_ids={EOS}, vocab_size=VOCAB)
        assert len(sp_["prompt"]) < self.max_req_len - 5, "prompt would be rejected"
        return r

    def state_of(self, rid):
        s = self.s
        r = self.objs.get(rid)
        if r is None:
            return "unknown"
        if r.finished() or rid in self.final:
            return "finished"
        if r is s.chunked_req:
            return "chunked"
        if r in s.waiting_queue:
            return "retracted" if r.is_retracted else "waiting"
        return "running"

    def sizes(self):
        return [self.alloc.available_size(), self.tree.evictable_size(), self.tree.protected_size(),
                self.req_pool.available_size()]

    # ------------------------------------------------------------ fake forward + result processing
    def run_batch(self, batch):
        """The scheduler-state part of Scheduler.run_batch; the forward is replaced."""
        s = self.s
        s.forward_ct += 1
        batch.forward_iter = s.forward_ct
        s._sched_idled = False
        if batch.extend_num_tokens:
            s.processed_tokens_counter += batch.extend_num_tokens
        return NS(of_step=self.step)

    def tok(self, req):
        i = self.index[req.rid]
        return output_token(i, len(req.output_ids), self.specs[i]["eos_at"])

    def process_result(self, batch, result):
        """BatchResultProcessor.process_batch_result_{prefill,decode}, plain path, state only."""
        tree, alloc = self.tree, self.alloc
        finished = []
        alloc.free_group_begin()
        if batch.forward_mode.is_decode():
            for req in batch.reqs:
                if self.s.enable_overlap and (req.finished() or req.is_retracted):
                    continue
                req.output_ids.append(self.tok(req))
                req.update_finish_state(1)
                if req.finished():
                    release_kv_cache(req, tree, checkpoint=True)
                    finished.append(req)
        else:
            assert batch.forward_mode.is_extend()
            dec = batch.decoding_reqs
            for req in batch.reqs:
                if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                    continue
                if req.inflight_middle_chunks <= 0:
                    req.output_ids.append(self.tok(req))
                    req.update_finish_state()
                    if req.finished():
                        release_kv_cache(req, tree, checkpoint=True)
                        finished.append(req)
                    elif not dec or req not in dec:
                        checkpoint_kv_cache(req, tree)
                else:
                    req.inflight_middle_chunks -= 1
        alloc.free_group_end()
        tree.flush_pending_backups()  # as Scheduler.process_batch_result (a no-op without HiCache)
        out = []
        for req in finished:
            self.final[req.rid] = (reason_name(req.finished_reason), len(req.output_ids))
            out.append([req.rid, reason_name(req.finished_reason), len(req.output_ids)])
        return dict(of_step=result.of_step, finished=out, sizes=self.sizes())

    def on_idle(self):
        """Scheduler.on_idle: only the fully-idle new_token_ratio reset has scheduler state."""
        if self.s.is_fully_idle():
            self.s.new_token_ratio_tracker.reset()
            return True
        return False

    # ------------------------------------------------------------ recording
    def describe_batch(self, batch, chunk_before):
        if batch is None:
            return "idle", [], []
        fm = batch.forward_mode
        if fm.is_decode():
            return "decode", [], [r.rid for r in batch.reqs]
        dec = list(batch.decoding_reqs or [])
        rows = []
        for r in batch.reqs:
            if r in dec:
                continue
            ext = r.extend_end - r.prefix_len
            cont = r is chunk_before
            if not cont:
                self.stats["hit_tokens"] += r.prefix_len
            rows.append([r.rid, r.prefix_len, ext, int(r is self.s.chunked_req), int(cont),
                         int(bool(r.retracted_stain))])
        kind = "mixed" if fm.is_mixed() else "extend"
        return kind, rows, [r.rid for r in dec]

    def header(self):
        reqs = []
        for i, sp in enumerate(self.specs):
            reqs.append(dict(rid=sp["rid"], prompt=sp["prompt"], max_new_tokens=sp["max_new"],
                             arrival_step=sp["arrival"], abort_step=sp["abort"], eos_at=sp["eos_at"],
                             ignore_eos=sp["ignore_eos"]))
        return dict(kind="header", sglang_version=VERSION, workload=self.w["name"],
                    description=self.w["description"], config=self.effective, requests=reqs,
                    output_rule=OUTPUT_RULE, arrival_rule=ARRIVAL_RULE, step_rule=STEP_RULE[self.c["overlap"]])

    def run(self):
        s = self.s
        overlap = self.c["overlap"]
        arrivals, aborts = {}, {}
        for i, sp in enumerate(self.specs):
            arrivals.setdefault(sp["arrival"], []).append(i)
            if sp["abort"] is not None:
                aborts.setdefault(sp["abort"], []).append(i)
        last_event = max(list(arrivals) + list(aborts))
        self.objs, self.final = {}, {}
        self.lines.append(self.header())
        step = 0
        while True:
            assert step < MAX_STEPS, "runaway"
            self.step = step
            rec = dict(step=step, added=[], aborted=[])
            # ---- ingest
            for i in arrivals.get(step, []):
                r = self.make_req(i)
                s.init_req_max_new_tokens(r)
                assert validate_input_length(r, s.max_req_input_len, False) is None, r.rid
                self.objs[r.rid] = r
                s._add_request_to_queue(r)
                rec["added"].append([r.rid, r.sampling_params.max_new_tokens])
            for i in aborts.get(step, []):
                rid = self.specs[i]["rid"]
                st = self.state_of(rid)
                before = len(s.waiting_queue)
                s.abort_request(AbortReq(rid=rid))
                if st in ("waiting", "retracted"):
                    assert len(s.waiting_queue) == before - 1
                    self.final[rid] = ("abort", len(self.objs[rid].output_ids))
                rec["aborted"].append([rid, st])
                self.stats["aborts"] += 1
            rec["ratio_before"] = s.new_token_ratio_tracker.current
            # ---- form the batch
            del self.retract_log[:]
            del self.aborted_out[:]
            chunk_before = s.chunked_req
            plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
            s.running_batch = plan.running_batch
            batch = plan.batch_to_run
            kind, rows, dec_rows = self.describe_batch(batch, chunk_before)
            self.stats["kinds"][kind] = self.stats["kinds"].get(kind, 0) + 1
            retracted = [x for rs, _ in self.retract_log for x in rs]
            oom = [x for _, ab in self.retract_log for x in ab]
            self.stats["retractions"] += len(retracted)
            self.stats["oom_aborts"] += len(oom)
            for rid in oom:
                r = self.objs[rid]
                self.final[rid] = ("abort", len(r.output_ids))
            chunked_abort = [x for x in self.aborted_out if x not in oom]
            for rid in chunked_abort:
                self.final[rid] = ("abort", len(self.objs[rid].output_ids))
            rec.update(kind=kind, extend=rows, decode=dec_rows, retracted=retracted, oom_aborted=oom,
                       chunked_aborted=chunked_abort,
                       ratio_formed=s.new_token_ratio_tracker.current,
                       batch_is_full=bool(s.running_batch.batch_is_full),
                       chunked=getattr(s.chunked_req, "rid", None),
                       waiting=[r.rid for r in s.waiting_queue],
                       running=[r.rid for r in s.running_batch.reqs],
                       sizes=self.sizes())
            # ---- self-checks (budgets the scheduler must respect)
            P, chunk = self.c["page_size"], s.chunked_prefill_size
            if chunk is not None:
                assert sum(-(-r[2] // P) * P for r in rows) <= chunk, (step, rows)
            live = len(set(r[0] for r in rows) | set(dec_rows) | set(rec["running"]))
            assert live <= self.c["max_running"], (step, live)
            assert not (set(rec["waiting"]) & (set(r[0] for r in rows) | set(dec_rows)))
            # ---- run / process
            results = []
            idle_reset = False
            if not overlap:
                if batch is not None:
                    res = self.run_batch(batch)
                    results.append(self.process_result(batch, res))
                else:
                    s._sched_idled = True
                    idle_reset = self.on_idle()
            else:
                disable = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
                if disable:
                    b, r_ = s.result_queue.popleft()
                    results.append(self.process_result(b, r_))
                if batch is not None:
                    res = self.run_batch(batch)
                    s.result_queue.append((batch.copy(), res))
                else:
                    s._sched_idled = True
                if s.last_batch:
                    if not disable:
                        b, r_ = s.result_queue.popleft()
                        results.append(self.process_result(b, r_))
                elif batch is None:
                    idle_reset = self.on_idle()
            s.last_batch = batch
            rec["results"] = results
            rec["idle_reset"] = idle_reset
            rec["ratio_after"] = s.new_token_ratio_tracker.current
            self.lines.append(rec)
            step += 1
            # Stop after the first fully-idle on_idle once every request is done and no
            # arrival or abort is left (that step is recorded: it resets new_token_ratio).
            if step > last_event and len(self.final) == len(self.specs) and idle_reset:
                break
        self.stats["steps"] = step
        self.finish_checks()
        return self.lines

    def finish_checks(self):
        s = self.s
        assert s.is_fully_idle()
        free, ev, prot, rows = self.sizes()
        assert prot == 0, prot
        assert rows == self.req_pool.size
        assert free + ev == self.c["pool"], (free, ev, self.c["pool"])
        assert self.req_pool.available_size() == self.req_pool.size
        for i, sp in enumerate(self.specs):
            r = self.objs[sp["rid"]]
            reason, n = self.final[sp["rid"]]
            if reason == "length":
                assert n == r.sampling_params.max_new_tokens, (sp["rid"], n)
            if reason == "stop":
                assert sp["eos_at"] is not None and n == sp["eos_at"] + 1
        self.lines.append(dict(
            kind="end", steps=self.stats["steps"],
            finished=[[sp["rid"], *self.final[sp["rid"]]] for sp in self.specs],
            sizes=[free, ev, prot, rows], forward_ct=s.forward_ct,
            processed_tokens=s.processed_tokens_counter,
            ratio=s.new_token_ratio_tracker.current))


def record_all(names, out, tree_core):
    rows = []
    for w in SW.WORKLOADS:
        if names and w["name"] not in names:
            continue
        tr = Trace(w, tree_core)
        try:
            lines = tr.run()
        finally:
            tr.close()
        path = os.path.join(out, w["name"] + ".jsonl")
        dump_lines(lines, path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        st = tr.stats
        kinds = ",".join("%s:%d" % (k, st["kinds"][k]) for k in ("extend", "mixed", "decode", "idle")
                         if k in st["kinds"])
        rows.append((w["name"] + ".jsonl", st["steps"], len(tr.specs), st["retractions"], st["oom_aborts"],
                     st["aborts"], st["hit_tokens"], kinds, os.path.getsize(path), digest, w["description"]))
        print("%-28s steps %4d reqs %3d retract %2d oom %d aborts %d hit %5d %s" % rows[-1][:8], flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tree-core", default="rust", choices=["rust", "python"])
    ap.add_argument("--compare-core", action="store_true",
                    help="record with the Python TreeCore and compare with the stored (Rust) traces, "
                         "ignoring only the header's config.tree_core")
    args = ap.parse_args()
    if args.compare_core:
        tmp = tempfile.mkdtemp(prefix="sglang-core-")
        rows = record_all(args.only, tmp, "python")
        bad = []
        for r in rows:
            a = open(os.path.join(tmp, r[0])).read().splitlines()
            b = open(os.path.join(args.out, r[0])).read().splitlines()
            ha, hb = json.loads(a[0]), json.loads(b[0])
            assert ha["config"].pop("tree_core") == "python" and hb["config"].pop("tree_core") == "rust"
            if ha != hb or a[1:] != b[1:]:
                bad.append(r[0])
        shutil.rmtree(tmp)
        print("DIFFERENT (python vs rust TreeCore): " + " ".join(bad) if bad
              else "python TreeCore == rust TreeCore: %d traces" % len(rows))
        sys.exit(1 if bad else 0)
    out = tempfile.mkdtemp(prefix="sglang-check-") if args.check else args.out
    os.makedirs(out, exist_ok=True)
    rows = record_all(args.only, out, args.tree_core)
    if args.check:
        exit_with_verdict([r[0] for r in rows], out, args.out)
    if not args.only:
        with open(os.path.join(out, "INDEX.tsv"), "w") as f:
            f.write("\t".join(["file", "steps", "requests", "retracted", "oom_aborts", "aborts",
                               "prefix_hit_tokens", "step_kinds", "bytes", "sha256", "covers"]) + "\n")
            for row in rows:
                f.write("\t".join(str(x) for x in row) + "\n")
        print("total steps %d in %d traces" % (sum(r[1] for r in rows), len(rows)))


if __name__ == "__main__":
    main()

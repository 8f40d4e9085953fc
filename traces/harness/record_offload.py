#!/usr/bin/env python3
"""Oracle harness for KV offloading: vLLM 0.15.1's own Scheduler with its own
OffloadingConnector (scheduler side) and its own OffloadingConnectorWorker
(worker-side bookkeeping), on CPU, for the workloads of offload_workloads.py.
Writes traces/vllm-0.15.1/offload-*.jsonl and appends them to INDEX.tsv.

Replaced (see manifest.md, "Offloading"): the model runner (as record.py), the
copy handlers under OffloadingConnectorWorker (fake GPU->CPU and CPU->GPU
handlers that complete a job at its N-th poll, and report a chosen load's
destination block invalid), and the multiproc executor's per-step driving of
the worker connector (done here in gpu_model_runner's order).

Usage:  /work/venv-vllm/bin/python traces/harness/record_offload.py [--only NAME ...] [--check]
"""

import record as R  # noqa: E402  (re-executes with record.py's fixed environment)

import argparse  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig,
)
from vllm.distributed.kv_events import BlockRemoved, BlockStored  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor  # noqa: E402
from vllm.v1.kv_offload.mediums import CPULoadStoreSpec, GPULoadStoreSpec  # noqa: E402
from vllm.v1.kv_offload.worker.worker import OffloadingHandler  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

import offload_workloads as OW  # noqa: E402

ENGINE_ID = "oracle-offload"


class FakeHandler(OffloadingHandler):
    """Completes each job at its N-th get_finished poll (wait() makes it the next)."""

    def __init__(self, polls, on_done=None):
        self.polls = polls
        self.jobs = []  # [job_id, polls_left, spec]
        self.on_done = on_done

    def transfer_async(self, job_id, spec):
        self.jobs.append([job_id, self.polls, spec])
        return True

    def get_finished(self):
        done, keep = [], []
        for job in self.jobs:
            job[1] -= 1
            (done if job[1] <= 0 else keep).append(job)
        self.jobs = keep
        for job in done:
            if self.on_done is not None:
                self.on_done(job[0], job[2])
        return [(job[0], True) for job in done]

    def wait(self, job_ids):
        for job in self.jobs:
            if job[0] in job_ids:
                job[1] = 0


def page_size_bytes(c):
    # FullAttentionSpec: 2 (K, V) x block_size x kv_heads x head_size x 2 bytes (float16)
    return 2 * c["block_size"] * R.TINY_LLAMA["num_key_value_heads"] * R.HEAD_SIZE * 2


def build_connector_scheduler(c, mode, kv_transfer_config):
    """A Scheduler (sync) or AsyncScheduler (async) for config `c` with `kv_transfer_config`,
    the block hasher EngineCore gives every request when a connector exists, and the header's
    effective config (the keys both connectors' traces share, in their order)."""
    model_config = ModelConfig(model=R.model_dir(), dtype="float16", skip_tokenizer_init=True,
                               max_model_len=c["max_model_len"])
    scheduler_config = SchedulerConfig(
        max_num_seqs=c["max_num_seqs"], max_num_batched_tokens=c["max_num_batched_tokens"],
        max_model_len=c["max_model_len"], enable_chunked_prefill=c["enable_chunked_prefill"],
        long_prefill_token_threshold=c["long_prefill_token_threshold"],
        max_num_partial_prefills=c["max_num_partial_prefills"], policy=c["policy"],
        async_scheduling=(mode == "async"), is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=c["block_size"], enable_prefix_caching=c["enable_prefix_caching"],
                               prefix_caching_hash_algo=c["prefix_caching_hash_algo"], swap_space=0,
                               cache_dtype="auto")
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config,
                             kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null"),
                             kv_transfer_config=kv_transfer_config, device_config=DeviceConfig(device="cpu"))
    vllm_config.kv_events_config.publisher = R._PUBLISHER_NAME
    layers = ["model.layers.%d.self_attn.attn" % i for i in range(R.NUM_LAYERS)]
    kv_cache_config = KVCacheConfig(
        num_blocks=c["num_gpu_blocks"],
        kv_cache_tensors=[KVCacheTensor(size=page_size_bytes(c) * c["num_gpu_blocks"], shared_by=[name])
                          for name in layers],
        kv_cache_groups=[KVCacheGroupSpec(layers, FullAttentionSpec(
            block_size=c["block_size"], num_kv_heads=R.TINY_LLAMA["num_key_value_heads"],
            head_size=R.HEAD_SIZE, dtype=torch.float16))])
    vllm_config.cache_config.num_gpu_blocks = c["num_gpu_blocks"]
    cls = AsyncScheduler if mode == "async" else Scheduler
    assert vllm_config.scheduler_config.get_scheduler_cls() is cls
    sched = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=c["block_size"], log_stats=True)
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(c["block_size"], hash_fn)
    effective = {
        "block_size": c["block_size"], "num_gpu_blocks": c["num_gpu_blocks"],
        "usable_blocks": c["num_gpu_blocks"] - 1, "max_num_seqs": scheduler_config.max_num_seqs,
        "max_num_batched_tokens": scheduler_config.max_num_batched_tokens,
        "max_model_len": vllm_config.model_config.max_model_len,
        "enable_chunked_prefill": scheduler_config.enable_chunked_prefill,
        "long_prefill_token_threshold": scheduler_config.long_prefill_token_threshold,
        "max_num_partial_prefills": scheduler_config.max_num_partial_prefills,
        "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
        "policy": scheduler_config.policy,
        "prefix_caching_hash_algo": vllm_config.cache_config.prefix_caching_hash_algo,
        "none_hash": kv_cache_utils.NONE_HASH.hex(),
        "async_scheduling": mode == "async", "scheduler_class": cls.__name__,
        "batch_queue_size": R.BATCH_QUEUE_SIZE if mode == "async" else 1,
    }
    return sched, hasher, vllm_config, kv_cache_config, effective


def build_offload_scheduler(c, o, mode):
    factor = o["block_size"] // c["block_size"]
    per_offloaded_block = page_size_bytes(c) * R.NUM_LAYERS * 1 * factor
    kv_transfer_config = KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both", engine_id=ENGINE_ID,
        kv_connector_extra_config={"cpu_bytes_to_use": o["cpu_blocks"] * per_offloaded_block,
                                   "block_size": o["block_size"], "eviction_policy": "lru"})
    sched, hasher, vllm_config, kv_cache_config, effective = build_connector_scheduler(c, mode, kv_transfer_config)
    assert isinstance(sched.connector, OffloadingConnector)
    assert sched.connector.connector_scheduler.manager.backend.num_blocks == o["cpu_blocks"]
    worker = OffloadingConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    effective.update({
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": kv_transfer_config.kv_connector_extra_config,
        "cpu_blocks": o["cpu_blocks"], "offloaded_block_size": o["block_size"],
        "store_polls": o["store_polls"], "load_polls": o["load_polls"], "fail_loads": o["fail_loads"],
        "disable_hybrid_kv_cache_manager": vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
        "enable_kv_cache_events": True,
        "kv_event_hashes": "GPU: int low 64 bits; CPU: the raw 32-byte hash's last 8 bytes; 16 hex digits",
    })
    return sched, hasher, worker, effective


class OffloadTrace(R.Trace):
    def __init__(self, workload, mode):
        self.w = workload
        self.mode = mode
        self.c = workload["config"]
        self.o = workload["offload"]
        self.sched, self.hasher, self.worker, self.effective = build_offload_scheduler(self.c, self.o, mode)
        self.specs = workload["requests"]
        self.prompts = R.resolve_prompts(self.specs)
        self.ids = ["r%d" % i for i in range(len(self.specs))]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
        self.objs, self.finished, self.hash_owner, self.hash_seen = {}, {}, {}, {}
        self.lines = []
        self.on_step_start = None
        self.stats = {"preemptions": 0, "aborts": [], "max_running": 0}
        self.invalid = set()
        self.failed_once = set()
        wc = self.worker.connector_worker
        wc.worker.register_handler(GPULoadStoreSpec, CPULoadStoreSpec, FakeHandler(self.o["store_polls"]))
        wc.worker.register_handler(CPULoadStoreSpec, GPULoadStoreSpec,
                                   FakeHandler(self.o["load_polls"], self.load_done))
        self.cpu_loads = 0
        self.cpu_stores = 0
        self.cpu_evicted = 0
        self.ext_hits = 0

    def load_done(self, job_id, spec):
        rid, store = self.worker.connector_worker._jobs[job_id]
        assert not store
        k = self.o["fail_loads"].get(rid)
        if k is not None and rid not in self.failed_once:
            self.failed_once.add(rid)
            self.invalid.add(int(spec[1].block_ids[k]))

    def header(self):
        h = self.header_fields()
        if "stop_after_steps" in self.w:
            h["stop_after_steps"] = self.w["stop_after_steps"]
        h["offload_rule"] = (
            "before each update_from_output(batch) (sync: right after that batch's schedule(); async: when "
            "the batch is popped from the queue of depth 2, so the worker runs batches in order), the "
            "worker connector (vLLM's OffloadingConnectorWorker) runs "
            "handle_preemptions(preempted) if any, bind_connector_metadata, start_load_kv, "
            "wait_for_save if tokens were scheduled, get_finished(finished_req_ids), clear; "
            "fake handlers complete a job at its store_polls/load_polls-th get_finished poll "
            "(a preemption's wait makes it the next); finished_sending and finished_recving are "
            "lists in request-index order; the first load of a request in fail_loads "
            "reports its k-th destination block invalid; the KVConnectorOutput is attached to the "
            "ModelRunnerOutput, or dropped when empty on a zero-token step")
        return h

    def request_state(self, rid):
        r = self.objs.get(rid)
        if r is not None and r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            return "waiting_for_remote_kvs"
        return super().request_state(rid)

    def encode_events(self, batches):
        gpu, cpu = [], []
        for batch in batches:
            g = [e for e in batch.events if getattr(e, "medium", "GPU") == "GPU"]
            for e in batch.events:
                if getattr(e, "medium", "GPU") == "CPU":
                    hs = sorted("%016x" % R.block_hash_int(h[-8:]) for h in e.block_hashes)
                    if isinstance(e, BlockStored):
                        assert e.block_size == self.o["block_size"] and e.parent_block_hash is None
                        cpu.append(["S", hs])
                        self.cpu_stores += len(hs)
                    else:
                        assert isinstance(e, BlockRemoved)
                        cpu.append(["R", hs])
                        self.cpu_evicted += len(hs)
            batch.events = g
            gpu.append(batch)
        self.cpu_events = cpu
        return super().encode_events(gpu)

    def do_schedule(self, rec):
        so, sampled = super().do_schedule(rec)
        meta = so.kv_connector_metadata
        rec["loads"] = [[rid, [int(x) for x in s[0].block_ids], [int(x) for x in s[1].block_ids]] for rid, s in meta.reqs_to_load.items()]
        rec["stores"] = [[rid, [int(x) for x in s[0].block_ids], [int(x) for x in s[1].block_ids]] for rid, s in meta.reqs_to_store.items()]
        self.cpu_loads += sum(len(x[1]) for x in rec["loads"])
        return so, sampled

    def run_worker(self, so):
        """The worker side of one batch's execute_model; returns the KVConnectorOutput (or None)."""
        meta = so.kv_connector_metadata
        wc = self.worker
        if so.preempted_req_ids:
            wc.handle_preemptions(so.preempted_req_ids)
        wc.bind_connector_metadata(meta)
        wc.start_load_kv(None)
        if so.total_num_scheduled_tokens > 0:
            wc.wait_for_save()
        self.invalid = set()
        sending, recving = wc.get_finished(so.finished_req_ids)
        wc.clear_connector_metadata()
        # The transport reports finished requests in request-index order (a list, where the
        # multiproc aggregator hands the scheduler a set, whose order is the hash table's).
        sending = sorted(sending, key=self.index.get)
        recving = sorted(recving, key=self.index.get)
        kvo = KVConnectorOutput(finished_sending=sending, finished_recving=recving,
                                invalid_block_ids=set(self.invalid))
        if so.total_num_scheduled_tokens == 0 and kvo.is_empty():
            kvo = None
        self.xfer = None if kvo is None else [sending, recving, sorted(self.invalid)]
        return kvo

    def do_update(self, step_of, so, sampled):
        sched = self.sched
        kvo = self.run_worker(so)
        orig = sched.update_from_output

        def with_kvo(so_, mro):
            mro.kv_connector_output = kvo
            return orig(so_, mro)
        sched.update_from_output = with_kvo
        try:
            upd = super().do_update(step_of, so, sampled)
        finally:
            sched.update_from_output = orig
        upd["cpu_events"] = self.cpu_events
        return upd

    def run(self):
        sched = self.sched
        n = len(self.specs)
        static, children, aborts = {}, {}, {}
        for i, s in enumerate(self.specs):
            if s["after"] is None:
                static.setdefault(s["arrival_step"], []).append(i)
            else:
                children.setdefault(s["after"], []).append(i)
            if s["abort_step"] is not None:
                aborts.setdefault(s["abort_step"], []).append(i)
        added, ready, step = 0, [], 0
        queue = R.deque()
        self.lines.append(self.header())
        stats_hook = sched.make_stats

        def make_stats(*a, **k):
            st = stats_hook(*a, **k)
            if st is not None:
                cp = st.connector_prefix_cache_stats
                self.connector_pc = [cp.requests, cp.queries, cp.hits, cp.preempted_requests,
                                     cp.preempted_queries, cp.preempted_hits] if cp is not None else None
            return st
        sched.make_stats = make_stats
        stop_after = self.w.get("stop_after_steps")
        while True:
            if stop_after is not None and step == stop_after:
                break
            assert step < R.MAX_STEPS
            rec = {"step": step, "added": [], "aborted": []}
            todo = sorted(static.pop(step, []) + ready)
            ready = []
            for i in todo:
                self.add_request(i, step)
                rec["added"].append(self.ids[i])
                added += 1
            for i in aborts.pop(step, []):
                rid = self.ids[i]
                state = self.request_state(rid)
                exp = self.specs[i].get("expect_abort")
                assert exp is None or exp == state, (self.w["name"], rid, step, state, exp)
                sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                rec["aborted"].append([rid, state])
                self.stats["aborts"].append(state)
                if state in ("waiting", "running", "preempted", "waiting_for_remote_kvs"):
                    self.finished[rid] = "abort"
            for key in ("scheduled", "total", "new", "cached", "preempted", "finished_prev", "common_prefix",
                        "running", "waiting", "free_blocks", "free_q", "loads", "stores", "xfer"):
                rec[key] = None
            rec["update"] = None
            if not sched.has_requests() and not queue:
                if added == n and not static and not aborts:
                    break
                self.lines.append(rec)
                step += 1
                continue
            finished_now = []
            update_of = None
            if self.mode == "sync":
                so, sampled = self.do_schedule(rec)
                update_of = (step, so, sampled)
            else:
                do_pop = True
                if sched.has_requests():
                    so, sampled = self.do_schedule(rec)
                    queue.appendleft((step, so, sampled))
                    if so.total_num_scheduled_tokens > 0 and len(queue) < R.BATCH_QUEUE_SIZE:
                        do_pop = False
                if do_pop:
                    update_of = queue.pop()
            if update_of is not None:
                self.connector_pc = None
                upd = self.do_update(*update_of)
                rec["xfer"] = self.xfer
                upd["connector_pc"] = self.connector_pc
                if self.connector_pc:
                    self.ext_hits += self.connector_pc[2] + self.connector_pc[5]
                rec["update"] = upd
                finished_now = upd["finished"]
            for rid, _reason in finished_now:
                ready.extend(children.pop(rid, []))
            self.lines.append(rec)
            step += 1
        if stop_after is not None:
            assert sched.has_unfinished_requests(), "the workload finished before stop_after_steps"
        else:
            assert not children
            for i, rid in enumerate(self.ids):
                assert self.objs[rid].is_finished(), rid
                assert self.finished.get(rid) is not None, rid
        # Requests still held (their stores not reported before the engine went idle) keep
        # their blocks: recorded, and checked by the replay.
        held = sorted(sched.requests, key=self.index.get)
        end = self.end_line()
        end.update({"held": held, "free_blocks": self.num_free(),
                    "cpu_blocks_present": len(sched.connector.connector_scheduler.manager.blocks)})
        self.lines.append(end)
        self.stats["steps"] = step
        return self.lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=R.OUT_DIR)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="offload-check-") if args.check else args.out
    os.makedirs(out, exist_ok=True)
    rows = []
    for w in OW.WORKLOADS:
        if args.only and w["name"] not in args.only:
            continue
        for mode in w["modes"]:
            tr = OffloadTrace(w, mode)
            lines = tr.run()
            name = "%s-%s.jsonl" % (w["name"], mode)
            path = os.path.join(out, name)
            R.dump_lines(lines, path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            st = tr.stats
            rows.append((name, st["steps"], len(tr.specs), st["preemptions"], ",".join(st["aborts"]) or "-",
                         tr.ext_hits, os.path.getsize(path), digest))
            print("%-36s steps %4d reqs %2d preempt %2d aborts %-40s cpu: loaded %3d stored %3d evicted %3d ext_hit_tokens %5d"
                  % (name, st["steps"], len(tr.specs), st["preemptions"], ",".join(st["aborts"]) or "-",
                     tr.cpu_loads, tr.cpu_stores, tr.cpu_evicted, tr.ext_hits), flush=True)
    if args.check:
        bad = [r[0] for r in rows if not filecmp.cmp(os.path.join(out, r[0]), os.path.join(args.out, r[0]), shallow=False)]
        shutil.rmtree(out)
        print("DIFFERENT: " + " ".join(bad) if bad else "identical: %d traces" % len(rows))
        sys.exit(1 if bad else 0)
    if not args.only:
        index = os.path.join(out, "INDEX.tsv")
        with open(index) as f:
            kept = [line for line in f if not line.startswith("offload-")]
        with open(index, "w") as f:
            f.writelines(kept)
            for row in rows:
                f.write("\t".join(str(x) for x in row) + "\n")


if __name__ == "__main__":
    main()

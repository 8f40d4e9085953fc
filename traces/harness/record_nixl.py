#!/usr/bin/env python3
"""Oracle harness for P/D disaggregation: two of vLLM 0.15.1's own Schedulers (or
AsyncSchedulers) in one process, P ("oracle-p") and D ("oracle-d"), each with
vLLM's own NixlConnector (scheduler role, NixlConnectorScheduler), on CPU, for
the workloads of nixl_workloads.py.  Writes traces/vllm-0.15.1/nixl-*.jsonl and
appends them to INDEX.tsv.  The trace format is traces/harness/nixl-trace-format.md
(copied into manifest.md, "NIXL").

Replaced (see manifest.md, "NIXL"): the model runner (as record.py), and the
NIXL worker (NixlConnectorWorker needs the nixl package, a TP group and an
attention backend): FakeNixlWorker below keeps the worker's scheduler-visible
bookkeeping (_reqs_to_process, _reqs_to_send, notifications, reads) with time
counted in polls and global steps instead of perf_counter.  The harness is the
proxy / sidecar between P and D: P's returned kv_transfer_params go to D.

Usage:  /work/venv-vllm/bin/python traces/harness/record_nixl.py [--only NAME ...] [--check]
"""

import record as R  # noqa: E402  (re-executes with record.py's fixed environment)

import argparse  # noqa: E402
import copy  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

from vllm.config import KVTransferConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.nixl_connector import (  # noqa: E402
    NixlConnector, NixlConnectorMetadata,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

import nixl_workloads as NW  # noqa: E402
import record_offload as RO  # noqa: E402
from trace_check import exit_with_verdict  # noqa: E402

ENGINE_P = "oracle-p"
ENGINE_D = "oracle-d"
SIDES = ("P", "D")
SCHED_KEYS = ("scheduled", "total", "new", "cached", "preempted", "finished_prev", "common_prefix",
              "running", "waiting", "free_blocks", "free_q",
              "recvs", "sends", "in_batch", "not_processed", "xfer")


def build_nixl_scheduler(c, mode, engine_id):
    kv_transfer_config = KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both", engine_id=engine_id)
    sched, hasher, vllm_config, _kv_cache_config, effective = RO.build_connector_scheduler(
        c, mode, kv_transfer_config)
    assert vllm_config.kv_transfer_config.kv_load_failure_policy == "recompute"
    assert isinstance(sched.connector, NixlConnector)
    cs = sched.connector.connector_scheduler
    assert cs is not None and cs.engine_id == engine_id and not cs.use_host_buffer
    effective.update({
        "kv_connector": "NixlConnector", "kv_role": "kv_both",
        "disable_hybrid_kv_cache_manager": vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
        "enable_kv_cache_events": True,
        "kv_event_hashes": "GPU: int low 64 bits; 16 hex digits",
        "engine_id": engine_id,
    })
    return sched, hasher, effective


class FakeNixlWorker:
    """What NixlConnectorWorker does that the scheduler can see, per execute_model
    (start_load_kv, then get_finished), with time in polls and global steps.

    start_load_kv: every reqs_to_recv entry starts a read (EMPTY local ids: no read,
    the notification is sent to P at once, nothing is reported on D); reqs_in_batch
    join _reqs_to_process, reqs_not_processed leave it (and must not have an expiry),
    reqs_to_send get an expiry (finish step + expiry_steps) only if in _reqs_to_process.
    get_finished: notifications queued for this engine (unknown ids dropped, as the
    real worker logs "Potentially invalid KV blocks for unrecognized request" and
    skips them); reads polled, done at their read_steps-th poll (then notify the
    reading request's P); then expiries, oldest first, stopping at the first not due.
    The NIXL handshake with P is taken as done before the first request.
    """

    def __init__(self, h, side):
        self.h = h
        self.side = side
        self.to_process = set()
        self.to_send = {}  # rid -> expiry step or None (insertion order = finish order)
        self.reads = []  # [rid, polls_left, local_block_ids, remote_engine_id, remote_request_id]
        self.failed_once = set()
        self.dropped_notifs = []
        self.expired = []
        self.early_notifs = []  # accepted before reqs_to_send reached this worker

    def execute(self, so, step):
        h = self.h
        meta = so.kv_connector_metadata
        assert isinstance(meta, NixlConnectorMetadata)
        assert not meta.reqs_to_save
        # ---- start_load_kv
        for rid, m in meta.reqs_to_recv.items():
            assert m.remote is not None and m.tp_size == 1
            if not m.local_block_ids:
                h.notifs[m.remote.engine_id].append(m.remote.request_id)
            else:
                assert len(m.local_block_ids) <= len(m.remote.block_ids)
                self.reads.append([rid, h.nixl["read_steps"], list(m.local_block_ids),
                                   m.remote.engine_id, m.remote.request_id])
        for rid in meta.reqs_in_batch:
            self.to_process.add(rid)
        for rid in meta.reqs_not_processed:
            self.to_process.discard(rid)
            assert rid not in self.to_send
        for rid in sorted(meta.reqs_to_send, key=h.index.get):
            if rid in self.to_process:
                self.to_send[rid] = h.expiry.get(rid)
        # ---- get_finished
        sending = set()
        queue = h.notifs[h.engine_ids[self.side]]
        for rid in queue:
            if rid not in self.to_send and rid not in self.to_process:
                self.dropped_notifs.append([step, rid])
                continue
            sending.add(rid)
            self.to_process.remove(rid)
            if self.to_send.pop(rid, "unarmed") == "unarmed":
                self.early_notifs.append([step, rid])
        queue.clear()
        recving = set()
        invalid = set()
        keep = []
        for rd in self.reads:
            rd[1] -= 1
            if rd[1] > 0:
                keep.append(rd)
                continue
            rid = rd[0]
            recving.add(rid)
            k = h.nixl["fail_reads"].get(rid)
            if k is not None and rid not in self.failed_once:
                self.failed_once.add(rid)
                assert k < len(rd[2]), ("fail_reads index past the read's local blocks", rid, k, rd[2])
                invalid.add(rd[2][k])
            h.notifs[rd[3]].append(rd[4])
        self.reads = keep
        while self.to_send:
            rid, exp = next(iter(self.to_send.items()))
            if exp is None or step < exp:
                break
            self.to_process.remove(rid)
            del self.to_send[rid]
            sending.add(rid)
            self.expired.append([step, rid])
        sending = sorted(sending, key=h.index.get)
        recving = sorted(recving, key=h.index.get)
        kvo = KVConnectorOutput(finished_sending=sending, finished_recving=recving,
                                invalid_block_ids=set(invalid))
        if so.total_num_scheduled_tokens == 0 and kvo.is_empty():
            return None, None
        return kvo, [sending, recving, sorted(invalid)]


class Side(R.Trace):
    """One engine (P or D): record.py's per-step recording on a NIXL scheduler."""

    def __init__(self, h, side, c):
        self.h = h
        self.side = side
        self.w = h.w
        self.mode = h.mode
        self.c = c
        self.sched, self.hasher, self.effective = build_nixl_scheduler(c, h.mode, h.engine_ids[side])
        self.specs = h.specs
        self.prompts = h.prompts
        self.ids = h.ids
        self.index = h.index
        self.objs, self.finished, self.hash_owner, self.hash_seen = {}, {}, {}, {}
        self.lines = []
        self.on_step_start = None
        self.stats = {"preemptions": 0, "aborts": [], "max_running": 0}
        self.worker = FakeNixlWorker(h, side)
        self.queue = R.deque()
        self.local_hits = 0
        self.ext_hits = 0
        self.params_out = {}  # rid -> returned kv_transfer_params (P)
        stats_hook = self.sched.make_stats

        def make_stats(*a, **k):
            st = stats_hook(*a, **k)
            if st is not None:
                cp = st.connector_prefix_cache_stats
                self.connector_pc = [cp.requests, cp.queries, cp.hits, cp.preempted_requests,
                                     cp.preempted_queries, cp.preempted_hits] if cp is not None else None
            return st
        self.sched.make_stats = make_stats

    def request_state(self, rid):
        r = self.objs.get(rid)
        if r is not None and r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            return "waiting_for_remote_kvs"
        return super().request_state(rid)

    def add_nixl_request(self, i, step, max_tokens, params):
        rid = self.ids[i]
        if params is None:
            sp = SamplingParams(max_tokens=max_tokens)
        elif self.side == "P":
            sp = SamplingParams(max_tokens=1, min_tokens=1, extra_args={"kv_transfer_params": params})
        else:
            sp = SamplingParams(max_tokens=max_tokens, extra_args={"kv_transfer_params": params})
        r = Request(request_id=rid, prompt_token_ids=list(self.prompts[i]), sampling_params=sp,
                    pooling_params=None, eos_token_id=R.EOS_TOKEN_ID, arrival_time=float(step),
                    priority=0, block_hasher=self.hasher)
        if params is not None:
            assert r.kv_transfer_params is params
        self.objs[rid] = r
        self.sched.add_request(r)

    def do_schedule(self, rec):
        so, sampled = super().do_schedule(rec)
        meta = so.kv_connector_metadata
        idx = self.index.get
        rec["recvs"] = [[rid, [int(x) for x in m.local_block_ids], [int(x) for x in m.remote.block_ids]]
                        for rid, m in sorted(meta.reqs_to_recv.items(), key=lambda kv: idx(kv[0]))]
        rec["sends"] = sorted(meta.reqs_to_send, key=idx)
        rec["in_batch"] = sorted(meta.reqs_in_batch, key=idx)
        rec["not_processed"] = sorted(meta.reqs_not_processed, key=idx)
        return so, sampled

    def do_update(self, step_of, so, sampled, step=None):
        sched = self.sched
        kvo, xfer = self.worker.execute(so, step)
        self.xfer = xfer
        orig = sched.update_from_output
        captured = []

        def with_kvo(so_, mro):
            mro.kv_connector_output = kvo
            outs = orig(so_, mro)
            captured.append(outs)
            return outs
        sched.update_from_output = with_kvo
        self.connector_pc = None
        try:
            upd = super().do_update(step_of, so, sampled)
        finally:
            sched.update_from_output = orig
        upd["connector_pc"] = self.connector_pc
        if self.connector_pc:
            self.ext_hits += self.connector_pc[2] + self.connector_pc[5]
        self.local_hits += upd["stats"][5] + upd["stats"][8]
        params = []
        for _client, eco in captured[0].items():
            for o in eco.outputs:
                p = o.kv_transfer_params
                if p is None:
                    continue
                assert self.side == "P" and o.finish_reason is not None, (self.side, o)
                params.append([o.request_id, p["do_remote_prefill"], p["do_remote_decode"],
                               [int(x) for x in p["remote_block_ids"]], p["remote_engine_id"],
                               p["remote_request_id"], p["tp_size"]])
                self.params_out[o.request_id] = (str(o.finish_reason), p)
        upd["params"] = params
        return upd

    def step(self, rec, step):
        """One engine step (EngineCore.step / step_with_batch_queue); returns the update or None."""
        sched = self.sched
        update_of = None
        if self.mode == "sync":
            so, sampled = self.do_schedule(rec)
            update_of = (step, so, sampled)
        else:
            do_pop = True
            if sched.has_requests():
                so, sampled = self.do_schedule(rec)
                self.queue.appendleft((step, so, sampled))
                if so.total_num_scheduled_tokens > 0 and len(self.queue) < R.BATCH_QUEUE_SIZE:
                    do_pop = False
            if do_pop:
                update_of = self.queue.pop()
        if update_of is None:
            return None
        upd = self.do_update(*update_of, step=step)
        rec["xfer"] = self.xfer
        rec["update"] = upd
        return upd

    def side_end(self):
        held = sorted(self.sched.requests, key=self.index.get)
        return {"requests": [[rid, self.finished.get(rid),
                              self.objs[rid].num_cached_tokens if rid in self.objs else None]
                             for rid in self.ids],
                "held": held, "free_blocks": self.num_free()}


def resolve_static_abort(a, mode):
    if isinstance(a, dict) and ("sync" in a or "async" in a):
        return a[mode]
    return a


class NixlTrace:
    def __init__(self, workload, mode):
        self.w = workload
        self.mode = mode
        self.nixl = workload["nixl"]
        self.specs = workload["requests"]
        self.prompts = [list(s["prompt"]) for s in self.specs]
        self.ids = ["r%d" % i for i in range(len(self.specs))]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
        self.engine_ids = {"P": ENGINE_P, "D": ENGINE_D}
        self.notifs = {ENGINE_P: [], ENGINE_D: []}
        self.expiry = {}  # P rid -> global step at which its blocks expire
        c_p = dict(workload["config"])
        c_d = dict(c_p)
        c_d.update(workload.get("config_d", {}))
        self.sides = {"P": Side(self, "P", c_p), "D": Side(self, "D", c_d)}
        self.abort_step = {}  # rid index -> resolved absolute step
        self.lines = []
        self.stats = {"preemptions": 0, "aborts": []}
        for s, p in zip(self.specs, self.prompts):
            assert len(p) < min(c_p["max_model_len"], c_d["max_model_len"])
            assert s["max_tokens"] < R.OUTPUT_STRIDE
            assert all(isinstance(t, int) and 3 <= t < R.OUTPUT_BASE for t in p)

    def header(self):
        reqs = []
        for i, s in enumerate(self.specs):
            reqs.append({"id": self.ids[i], "prompt": self.prompts[i], "max_tokens": s["max_tokens"],
                         "arrival_step": s["arrival_step"], "abort_step": self.abort_step.get(i),
                         "abort_side": s["abort_side"] if i in self.abort_step else None,
                         "direct": s["direct"]})
        h = {
            "kind": "header", "vllm_version": R.VLLM_VERSION, "workload": self.w["name"],
            "description": self.w["description"], "mode": self.mode,
            "config": self.sides["P"].effective, "config_d": self.sides["D"].effective,
            "nixl": {"read_steps": self.nixl["read_steps"], "expiry_steps": self.nixl["expiry_steps"],
                     "fail_reads": self.nixl["fail_reads"]},
            "requests": reqs,
        }
        if "stop_after_steps" in self.w:
            h["stop_after_steps"] = self.w["stop_after_steps"]
        return h

    def run(self):
        P, D = self.sides["P"], self.sides["D"]
        static = {"P": {}, "D": {}}
        aborts = {}  # step -> [index]
        relative = {}  # ("d_add"|"p_finish", index) -> k
        for i, s in enumerate(self.specs):
            static["D" if s["direct"] else "P"].setdefault(s["arrival_step"], []).append(i)
            a = s["abort_step"]
            if a is None:
                continue
            if isinstance(a, dict) and ("d_add" in a or "p_finish" in a):
                (kind, k), = a.items()
                relative[(kind, i)] = k
            else:
                a = resolve_static_abort(a, self.mode)
                self.abort_step[i] = a
                aborts.setdefault(a, []).append(i)
        pending_d = []  # (index) to add to D at the next step
        expected_p = sum(1 for s in self.specs if not s["direct"])
        p_added = 0
        step = 0
        stop_after = self.w.get("stop_after_steps")
        while True:
            if stop_after is not None and step == stop_after:
                break
            assert step < R.MAX_STEPS
            rec = {"step": step, "P": None, "D": None}
            srec = {}

            def side_rec(name):
                if name not in srec:
                    o = {"added": [], "aborted": []}
                    for key in SCHED_KEYS:
                        o[key] = None
                    o["update"] = None
                    srec[name] = o
                return srec[name]
            # 1. arrivals: P, then D (P's finishes of the previous step, and direct ones)
            for i in sorted(static["P"].pop(step, [])):
                P.add_nixl_request(i, step, 1, {"do_remote_decode": True})
                side_rec("P")["added"].append(self.ids[i])
                p_added += 1
            todo = sorted(pending_d + static["D"].pop(step, []))
            pending_d = []
            for i in todo:
                rid = self.ids[i]
                if self.specs[i]["direct"]:
                    D.add_nixl_request(i, step, self.specs[i]["max_tokens"], None)
                else:
                    _reason, p = P.params_out[rid]
                    D.add_nixl_request(i, step, self.specs[i]["max_tokens"], copy.deepcopy(p))
                side_rec("D")["added"].append(rid)
                k = relative.pop(("d_add", i), None)
                if k is not None:
                    assert k >= 0
                    self.abort_step[i] = step + k
                    aborts.setdefault(step + k, []).append(i)
            # 2. aborts
            for i in sorted(aborts.pop(step, [])):
                rid = self.ids[i]
                side = self.specs[i]["abort_side"]
                sd = self.sides[side]
                state = sd.request_state(rid)
                exp = self.specs[i].get("expect_abort")
                assert exp is None or exp == state, (self.w["name"], self.mode, rid, step, side, state, exp)
                sd.sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                side_rec(side)["aborted"].append([rid, state])
                self.stats["aborts"].append(side + ":" + state)
                if state in ("waiting", "running", "preempted", "waiting_for_remote_kvs"):
                    sd.finished[rid] = "abort"
            # 3./4. engine steps
            for name in SIDES:
                sd = self.sides[name]
                if not sd.sched.has_requests() and not sd.queue:
                    continue
                o = side_rec(name)
                upd = sd.step(o, step)
                if upd is None:
                    continue
                for rid, reason in upd["finished"]:
                    if name != "P":
                        continue
                    i = self.index[rid]
                    k = relative.pop(("p_finish", i), None)
                    if k is not None:
                        assert k >= 1
                        self.abort_step[i] = step + k
                        aborts.setdefault(step + k, []).append(i)
                    if rid in P.params_out:
                        assert reason == "length", (rid, reason)
                        pending_d.append(i)
                        if self.nixl["expiry_steps"] is not None:
                            self.expiry[rid] = step + self.nixl["expiry_steps"]
            for name in SIDES:
                if name in srec:
                    rec[name] = srec[name]
            busy = any(sd.sched.has_requests() or sd.queue for sd in (P, D))
            if not busy and not srec and not pending_d and not static["P"] and not static["D"] \
                    and not aborts:
                break
            self.lines.append(rec)
            step += 1
        self.steps = step
        assert not relative, relative
        if stop_after is not None:
            assert D.sched.has_unfinished_requests(), "the workload finished before stop_after_steps"
            return self.finish_lines(P, D)
        # checks
        assert p_added == expected_p
        for i, rid in enumerate(self.ids):
            s = self.specs[i]
            for name in SIDES:
                sd = self.sides[name]
                r = sd.objs.get(rid)
                if r is None:
                    continue
                assert r.is_finished(), (name, rid, r.status)
                assert sd.finished.get(rid) is not None, (name, rid)
                outs = list(r.output_token_ids)
                assert outs == [R.output_token(i, k) for k in range(len(outs))], (name, rid)
                if name == "D" and sd.finished[rid] == "length":
                    assert len(outs) == s["max_tokens"], (rid, outs)
            if not s["direct"]:
                assert rid in P.objs
        assert not D.sched.requests and not D.sched.running and len(D.sched.waiting) == 0
        assert D.num_free() == D.c["num_gpu_blocks"] - 1, D.num_free()
        assert not P.sched.running and len(P.sched.waiting) == 0
        return self.finish_lines(P, D)

    def finish_lines(self, P, D):
        for sd in (P, D):
            self.stats["preemptions"] += sd.stats["preemptions"]
        held_blocks = set()
        for rid in P.sched.requests:
            held_blocks.update(P.sched.kv_cache_manager.get_block_ids(rid)[0])
        end = {"kind": "end", "P": P.side_end(), "D": D.side_end()}
        self.end_extra = {"held_blocks": len(held_blocks), "reads_in_flight": [r[0] for r in D.worker.reads],
                          "notifs_pending": list(self.notifs[ENGINE_P]),
                          "dropped": P.worker.dropped_notifs, "expired": P.worker.expired,
                          "early": P.worker.early_notifs}
        return [self.header()] + self.lines + [end]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=R.OUT_DIR)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="nixl-check-") if args.check else args.out
    os.makedirs(out, exist_ok=True)
    rows = []
    total = 0
    for w in NW.WORKLOADS:
        if args.only and w["name"] not in args.only:
            continue
        for mode in w["modes"]:
            tr = NixlTrace(w, mode)
            lines = tr.run()
            name = "%s-%s.jsonl" % (w["name"], mode)
            path = os.path.join(out, name)
            R.dump_lines(lines, path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            st = tr.stats
            hits = tr.sides["P"].local_hits + tr.sides["D"].local_hits
            rows.append((name, tr.steps, len(tr.specs), st["preemptions"], ",".join(st["aborts"]) or "-",
                         hits, os.path.getsize(path), digest))
            total += tr.steps
            e = tr.end_extra
            print("%-32s steps %4d reqs %2d preempt %2d aborts %-44s hits %5d ext %5d held %s(%d blk) "
                  "inflight %s dropped %s expired %s"
                  % (name, tr.steps, len(tr.specs), st["preemptions"], ",".join(st["aborts"]) or "-",
                     hits, tr.sides["D"].ext_hits, lines[-1]["P"]["held"], e["held_blocks"],
                     e["reads_in_flight"], e["dropped"], e["expired"]), "early", e["early"], flush=True)
    print("total %d traces, %d steps" % (len(rows), total))
    if args.check:
        exit_with_verdict([r[0] for r in rows], out, args.out)
    if not args.only:
        index = os.path.join(out, "INDEX.tsv")
        kept = []
        if os.path.exists(index):
            with open(index) as f:
                kept = [line for line in f if not line.startswith("nixl-")]
        with open(index, "w") as f:
            f.writelines(kept)
            for row in rows:
                f.write("\t".join(str(x) for x in row) + "\n")


if __name__ == "__main__":
    main()

"""NIXL (P/D disaggregation) workloads for the vLLM 0.15.1 oracle (stdlib only),
recorded by ``record_nixl.py`` as ``nixl-*.jsonl`` (format: manifest.md, "NIXL").

A workload is a dict:

    name, description, modes   as in workloads.py
    config      the scheduler / cache knobs of P (workloads.cfg); D uses the same
    config_d    optional overrides for D (a subset of the config keys)
    nixl        read_steps   a D read completes at its N-th poll of D's worker (N >= 1)
                expiry_steps P releases a held request M global steps after the step
                             whose update finished it, at P's first worker call from
                             then on (None: never, as 480 s never pass in these traces)
                fail_reads   {request id: k}: when that request's read completes, D's
                             worker reports its k-th local block invalid (recompute)
    stop_after_steps  optional: stop after this many global steps (an upstream stall;
                the header records it and the run must still have unfinished requests)
    requests    list, request i gets id "r{i}":
        prompt        token ids (100 <= id < 20000)
        max_tokens    D's max_tokens (P always runs max_tokens=1, min_tokens=1)
        arrival_step  the global step at which it is added to P (to D if direct)
        direct        True: a plain request sent only to D, without params
        abort_step    None, an int, {"sync": int, "async": int}, or relative to the
                      run: {"d_add": k} (k steps after D's add; 0 = the same step,
                      before D's schedule) or {"p_finish": k} (k >= 1 steps after the
                      step whose P update finished it); the header records the
                      absolute step the harness used
        abort_side    "P" or "D" (the scheduler whose finish_requests is called)
        expect_abort  optional: the state the request must be in on that side
                      ("waiting", "running", "preempted", "waiting_for_remote_kvs",
                      "finished"); record_nixl.py fails if it is not
"""

import random

from workloads import cfg, poisson_arrivals, toks

BOTH = ["sync", "async"]


def nreq(prompt, max_tokens, arrival_step=0, abort_step=None, abort_side=None, direct=False,
         expect_abort=None):
    assert (abort_step is None) == (abort_side is None)
    r = {"prompt": list(prompt), "max_tokens": max_tokens, "arrival_step": arrival_step,
         "abort_step": abort_step, "abort_side": abort_side, "direct": direct}
    if expect_abort is not None:
        r["expect_abort"] = expect_abort
    return r


def nixl(read_steps=1, expiry_steps=None, fail_reads=None):
    return {"read_steps": read_steps, "expiry_steps": expiry_steps, "fail_reads": fail_reads or {}}


def w_basic():
    rng = random.Random(2101)
    arr = poisson_arrivals(rng, 16, 4)
    reqs = [nreq(toks(rng, rng.randint(20, 120)), rng.randint(3, 16), a) for a in arr]
    return {"name": "nixl-basic",
            "description": "16 P/D requests, Poisson-ish arrivals, reads done at the first poll",
            "config": cfg(num_gpu_blocks=64, max_num_batched_tokens=128, max_num_seqs=4),
            "nixl": nixl(1), "modes": BOTH, "requests": reqs}


def w_slow_reads():
    rng = random.Random(2102)
    reqs = [nreq(toks(rng, rng.randint(16, 70)), rng.randint(4, 10), i // 3) for i in range(12)]
    reqs += [nreq(toks(rng, 40), 6, 30 + i) for i in range(3)]
    reqs += [nreq(toks(rng, rng.randint(30, 100)), rng.randint(8, 20), 50 + i // 4) for i in range(10)]
    return {"name": "nixl-slow-reads",
            "description": "bursts of 12 and 10 P/D requests with reads taking 4 polls: many parked on D at once",
            "config": cfg(num_gpu_blocks=80, max_num_batched_tokens=256, max_num_seqs=6),
            "nixl": nixl(4), "modes": BOTH, "requests": reqs}


def w_d_prefix_hit():
    rng = random.Random(2103)
    a = toks(rng, 64)
    b = toks(rng, 80)
    reqs = [nreq(a + toks(rng, 5), 3, 0, direct=True),      # D caches a's 4 blocks locally
            nreq(a + toks(rng, 30), 4, 4),                  # D hits 64: reads only the tail blocks
            nreq(b, 5, 6),                                  # D receives b, hashes its 5 blocks
            nreq(b[:48] + toks(rng, 25), 4, 16),            # D hits 48 of b's received blocks
            nreq(b + toks(rng, 1), 3, 24),                  # D hits all 80 (5 blocks), reads 1
            nreq(a[:32] + toks(rng, 40), 3, 26)]
    c = toks(rng, 96)
    reqs.append(nreq(c + toks(rng, 8), 6, 34, direct=True))
    for k in range(8):   # P/D requests sharing c's prefix, some while c is still on D
        reqs.append(nreq(c[:16 * rng.randint(1, 6)] + toks(rng, rng.randint(3, 40)), rng.randint(3, 9), 36 + 3 * k))
    return {"name": "nixl-d-prefix-hit",
            "description": "D already holds part of the prompt (a direct request, then received blocks): local < remote",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=128, max_num_seqs=4),
            "nixl": nixl(2), "modes": BOTH, "requests": reqs}


def w_p_prefix_hit():
    rng = random.Random(2104)
    sysp = toks(rng, 80)
    sysq = toks(rng, 50)
    arr = poisson_arrivals(rng, 8, 2)
    reqs = [nreq(sysp + toks(rng, rng.randint(5, 40)), rng.randint(2, 6), a) for a in arr]
    reqs.append(nreq(reqs[0]["prompt"], 3, arr[-1] + 3))   # the whole prompt again on P and D
    arr2 = poisson_arrivals(rng, 10, 3, start=arr[-1] + 8)
    for a in arr2:
        reqs.append(nreq(rng.choice([sysp, sysq]) + toks(rng, rng.randint(1, 60)), rng.randint(2, 12), a))
    return {"name": "nixl-p-prefix-hit",
            "description": "19 P/D requests sharing two system prompts: P prefix hits on held and released blocks",
            "config": cfg(num_gpu_blocks=40, max_num_batched_tokens=96, max_num_seqs=4),
            "nixl": nixl(1), "modes": BOTH, "requests": reqs}


def w_abort_before():
    rng = random.Random(2105)
    reqs = [nreq(toks(rng, 90), 4, 0),
            nreq(toks(rng, 60), 4, 0, abort_step={"d_add": 0}, abort_side="D", expect_abort="waiting"),
            nreq(toks(rng, 100), 4, 1),
            # waits on P behind r2 (max_num_seqs 1) and is aborted there
            nreq(toks(rng, 50), 4, 1, abort_step=2, abort_side="P", expect_abort="waiting"),
            nreq(toks(rng, 40), 4, 12, abort_step={"d_add": 0}, abort_side="D", expect_abort="waiting"),
            nreq(toks(rng, 30), 3, 14)]
    for k in range(6):
        base = 20 + 6 * k
        reqs.append(nreq(toks(rng, rng.randint(40, 90)), 5, base))
        if k % 2 == 0:
            reqs.append(nreq(toks(rng, 30), 4, base, abort_step={"d_add": 0}, abort_side="D",
                             expect_abort="waiting"))
        else:
            reqs.append(nreq(toks(rng, 30), 4, base, abort_step=base + 1, abort_side="P",
                             expect_abort="waiting"))
    return {"name": "nixl-abort-before",
            "description": "D requests aborted before admission (empty-block recv: notification only) and a P request aborted while waiting",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=128, max_num_seqs=1),
            "config_d": {"max_num_seqs": 4},
            "nixl": nixl(1), "modes": BOTH, "requests": reqs}


def w_abort_during():
    rng = random.Random(2106)
    reqs = [nreq(toks(rng, 70), 6, 0),
            nreq(toks(rng, 80), 6, 1, abort_step={"d_add": 1}, abort_side="D",
                 expect_abort="waiting_for_remote_kvs"),
            nreq(toks(rng, 50), 6, 3),
            nreq(toks(rng, 64), 5, 4, abort_step={"d_add": 2}, abort_side="D",
                 expect_abort="waiting_for_remote_kvs"),
            nreq(toks(rng, 40), 8, 20)]
    for k in range(5):
        base = 30 + 5 * k
        reqs.append(nreq(toks(rng, rng.randint(30, 80)), 6, base, abort_step={"d_add": 1 + k % 3},
                         abort_side="D", expect_abort="waiting_for_remote_kvs"))
        reqs.append(nreq(toks(rng, rng.randint(30, 80)), 6, base + 1))
    return {"name": "nixl-abort-during",
            "description": "D requests aborted while parked with their read in flight (4 polls): D frees at once, P only when the read completes",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=128, max_num_seqs=4),
            "nixl": nixl(4), "modes": BOTH, "requests": reqs}


def w_abort_after():
    rng = random.Random(2107)
    reqs = [nreq(toks(rng, 60), 20, 0, abort_step={"d_add": 6}, abort_side="D", expect_abort="running"),
            nreq(toks(rng, 45), 6, 1, abort_step={"p_finish": 1}, abort_side="P", expect_abort="finished"),
            nreq(toks(rng, 75), 8, 2),
            nreq(toks(rng, 33), 15, 3, abort_step={"d_add": 9}, abort_side="D", expect_abort="running"),
            nreq(toks(rng, 50), 4, 4, abort_step={"p_finish": 3}, abort_side="P", expect_abort="finished"),
            nreq(toks(rng, 20), 3, 30)]
    return {"name": "nixl-abort-after",
            "description": "D requests aborted while decoding; P requests aborted after they finished (held or released): a no-op",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=128, max_num_seqs=4),
            "nixl": nixl(2), "modes": BOTH, "requests": reqs}


def w_expiry():
    rng = random.Random(2108)
    arr = poisson_arrivals(rng, 26, 2)
    reqs = [nreq(toks(rng, rng.randint(20, 60)), rng.randint(2, 8), a) for a in arr]
    return {"name": "nixl-expiry",
            "description": "reads take 9 polls, P's expiry is 5 steps: P releases held blocks first, D's late notifications are dropped",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=96, max_num_seqs=4),
            "nixl": nixl(9, expiry_steps=5), "modes": BOTH, "requests": reqs}


def w_failed_read():
    rng = random.Random(2109)
    a = toks(rng, 48)
    reqs = [nreq(toks(rng, 70), 4, 0),
            nreq(toks(rng, 90), 5, 1),
            nreq(a + toks(rng, 20), 4, 10, direct=True),
            nreq(a + toks(rng, 37), 4, 14),          # D hits 48; its 2nd read block is bad
            nreq(toks(rng, 40), 3, 16)]              # its 1st block is bad: recompute all
    for k in range(8):
        reqs.append(nreq(toks(rng, rng.randint(20, 100)), rng.randint(3, 10), 24 + 3 * k))
    fails = {"r1": 2, "r3": 1, "r4": 0, "r6": 1, "r8": 0, "r10": 1}
    return {"name": "nixl-failed-read",
            "description": "reads that report an invalid block: D recomputes from the bad block (recompute policy)",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=64, max_num_seqs=4),
            "nixl": nixl(2, fail_reads=fails), "modes": BOTH, "requests": reqs}


def w_tight_d():
    rng = random.Random(2110)
    reqs = [nreq(toks(rng, rng.randint(30, 50)), rng.randint(30, 50), i) for i in range(6)]
    reqs += [nreq(toks(rng, 40), 10, 12 + 2 * i) for i in range(3)]
    return {"name": "nixl-tight-d",
            "description": "a small D (17 usable blocks) with long decodes: preemptions on D (local recompute) while others park",
            "config": cfg(num_gpu_blocks=64, max_num_batched_tokens=128, max_num_seqs=4),
            "config_d": {"num_gpu_blocks": 18, "max_num_batched_tokens": 64},
            "nixl": nixl(2), "modes": BOTH, "requests": reqs}


def w_mixed_direct():
    rng = random.Random(2111)
    arr = poisson_arrivals(rng, 26, 2)
    reqs = []
    for k, a in enumerate(arr):
        reqs.append(nreq(toks(rng, rng.randint(20, 90)), rng.randint(3, 10), a, direct=(k % 3 == 1)))
    return {"name": "nixl-mixed-direct",
            "description": "D serves direct requests (prefilled locally) alongside P/D ones",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=64, max_num_seqs=4),
            "nixl": nixl(2), "modes": BOTH, "requests": reqs}


def w_chunked():
    rng = random.Random(2112)
    reqs = [nreq(toks(rng, rng.randint(100, 200)), rng.randint(3, 8), 3 * i) for i in range(10)]
    return {"name": "nixl-chunked",
            "description": "long prompts chunked on P (32-token budget), in_batch once per admission",
            "config": cfg(num_gpu_blocks=80, max_num_batched_tokens=32, max_num_seqs=4),
            "config_d": {"max_num_batched_tokens": 128},
            "nixl": nixl(1), "modes": BOTH, "requests": reqs}


def w_no_prefix_caching():
    rng = random.Random(2113)
    a = toks(rng, 64)
    arr = poisson_arrivals(rng, 14, 3)
    reqs = []
    for k, t in enumerate(arr):
        p = a + toks(rng, rng.randint(1, 40)) if k % 2 == 0 else toks(rng, rng.randint(20, 90))
        reqs.append(nreq(p, rng.randint(3, 10), t, direct=(k % 5 == 3)))
    return {"name": "nixl-no-prefix-caching",
            "description": "prefix caching off on P and D: no local hits, received blocks are not hashed",
            "config": cfg(num_gpu_blocks=48, max_num_batched_tokens=96, max_num_seqs=4,
                          enable_prefix_caching=False),
            "nixl": nixl(2), "modes": BOTH, "requests": reqs}


def w_idle_expiry():
    rng = random.Random(2114)
    reqs = []
    for k in range(6):
        base = 25 * k
        reqs.append(nreq(toks(rng, rng.randint(30, 70)), rng.randint(3, 6), base))
        reqs.append(nreq(toks(rng, rng.randint(30, 70)), rng.randint(3, 6), base + 1 + k % 3))
    return {"name": "nixl-idle-expiry",
            "description": "P goes idle holding blocks: neither the notifications (reads of 6 polls) nor the 3-step expiry act until new work wakes P",
            "config": cfg(num_gpu_blocks=40, max_num_batched_tokens=96, max_num_seqs=4),
            "nixl": nixl(6, expiry_steps=3), "modes": BOTH, "requests": reqs}


def w_tight_p():
    rng = random.Random(2116)
    arr = poisson_arrivals(rng, 24, 1)
    reqs = [nreq(toks(rng, rng.randint(30, 110)), rng.randint(2, 8), a) for a in arr]
    return {"name": "nixl-tight-p",
            "description": "a small P (23 usable blocks) whose held blocks (reads of 5 polls) leave new prefills waiting or preempted",
            "config": cfg(num_gpu_blocks=24, max_num_batched_tokens=128, max_num_seqs=4),
            "config_d": {"num_gpu_blocks": 96},
            "nixl": nixl(5), "modes": BOTH, "requests": reqs}


def w_mixed_everything():
    rng = random.Random(2115)
    shared = [toks(rng, 48), toks(rng, 80)]
    arr = poisson_arrivals(rng, 40, 2)
    reqs = []
    fails = {}
    for k, t in enumerate(arr):
        if rng.random() < 0.5:
            p = rng.choice(shared)[:16 * rng.randint(1, 3)] + toks(rng, rng.randint(1, 50))
        else:
            p = toks(rng, rng.randint(10, 120))
        direct = rng.random() < 0.15
        u = rng.random()
        ab, side = None, None
        if not direct and u < 0.08:
            ab, side = {"d_add": rng.randint(0, 3)}, "D"
        elif not direct and u < 0.14:
            ab, side = {"d_add": rng.randint(4, 12)}, "D"
        elif not direct and u < 0.22:
            ab, side = {"p_finish": rng.randint(1, 4)}, "P"
        elif not direct and ab is None and rng.random() < 0.1 and len(p) > 16:
            fails["r%d" % k] = 0
        reqs.append(nreq(p, rng.randint(2, 24), t, abort_step=ab, abort_side=side, direct=direct))
    return {"name": "nixl-mixed-everything",
            "description": "40 requests: shared prefixes, direct ones, D aborts at every stage, P aborts after finish, failed reads, expiry, a tight D",
            "config": cfg(num_gpu_blocks=64, max_num_batched_tokens=96, max_num_seqs=6),
            "config_d": {"num_gpu_blocks": 26, "max_num_seqs": 5},
            "nixl": nixl(3, expiry_steps=30, fail_reads=fails), "modes": BOTH, "requests": reqs}


def w_d_stall():
    # Found by engines/tests/nixl_properties.rs: on a small decode instance with one sequence
    # slot, requests parked for their reads (and ready ones not yet admitted) hold their whole
    # prompts' blocks behind the queue's head, which cannot get enough blocks, or is admitted
    # and preempts itself, forever.
    def prompt(key, g, n):
        return [(1000 * g + t + 100) if t < 40 else (15000 + 100 * key + t) for t in range(n)]
    spec = [(9, 0, 56, 6), (9, 0, 5, 1), (3, 0, 37, 10), (1, 1, 26, 15), (36, 2, 26, 11)]
    return {"name": "nixl-d-stall",
            "description": "upstream stall on D: parked and ready requests hold their blocks behind a head that cannot get enough",
            "config": cfg(block_size=4, num_gpu_blocks=25, max_num_batched_tokens=18, max_num_seqs=1,
                          max_model_len=96, enable_prefix_caching=False),
            "nixl": nixl(1, expiry_steps=6), "modes": BOTH, "stop_after_steps": 200,
            "requests": [nreq(prompt(k, g, p), o, at) for k, (at, g, p, o) in enumerate(spec)]}


WORKLOADS = [
    w_basic(),
    w_slow_reads(),
    w_d_prefix_hit(),
    w_p_prefix_hit(),
    w_abort_before(),
    w_abort_during(),
    w_abort_after(),
    w_expiry(),
    w_failed_read(),
    w_tight_d(),
    w_mixed_direct(),
    w_chunked(),
    w_no_prefix_caching(),
    w_idle_expiry(),
    w_tight_p(),
    w_mixed_everything(),
    w_d_stall(),
]

"""Workloads for the vLLM 0.15.1 scheduler oracle (stdlib only).

Every workload is built from ``random.Random(seed)`` with a fixed seed, so the
same workload is produced on every run and every machine.  ``record.py``
imports ``WORKLOADS`` and writes one trace per (workload, mode).

A workload is a dict:

    name         str, used in the trace file name
    description  one line, copied into the trace header
    config       scheduler / cache knobs (see DEFAULT_CONFIG; every key is
                 recorded in the header after vLLM's own config post-processing)
    modes        ["sync", "async"] (both unless said otherwise)
    requests     list of request specs, request i gets id "r{i}":
        prompt        list of token ids (3 <= id < 20000), or None for a
                      follow-up (then ``after`` and ``extra`` are set)
        max_tokens    int
        arrival_step  int (engine step at which it is added) or None
        after         None or "rK": added at the step after the one whose
                      update reports rK finished (rK must precede it and must
                      never be aborted)
        extra         list of tokens appended after rK's prompt + outputs
        priority      int (only matters with policy "priority")
        abort_step    None, an int, or {"sync": int, "async": int}
        expect_abort  optional "waiting" | "running" | "preempted": the state
                      the request must be in when the abort is applied
                      (record.py fails if it is not)
    stop_after_steps  optional int: record only this many steps, for a workload
                      vLLM never finishes (a livelock); record.py then checks
                      that requests are still unfinished instead of finished

Sampled tokens are never part of a workload: token k of request i is always
20000 + 1000 * i + k (see record.py).
"""

import random

DEFAULT_CONFIG = {
    "block_size": 16,
    "num_gpu_blocks": 257,  # includes the null block 0
    "max_num_seqs": 8,
    "max_num_batched_tokens": 256,
    "max_model_len": 1024,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "max_num_partial_prefills": 1,
    "enable_prefix_caching": True,
    "policy": "fcfs",
    "prefix_caching_hash_algo": "sha256_cbor",
}

TOK_LO, TOK_HI = 100, 19999


def toks(rng, n):
    return [rng.randint(TOK_LO, TOK_HI) for _ in range(n)]


def req(prompt, max_tokens, arrival_step=0, priority=0, abort_step=None,
        after=None, extra=None, expect_abort=None):
    r = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "arrival_step": arrival_step if after is None else None,
        "after": after,
        "extra": extra,
        "priority": priority,
        "abort_step": abort_step,
    }
    if expect_abort is not None:
        r["expect_abort"] = expect_abort
    return r


def follow(parent_index, extra, max_tokens, priority=0):
    return req(None, max_tokens, after="r%d" % parent_index, extra=extra,
               priority=priority)


def cfg(**kw):
    c = dict(DEFAULT_CONFIG)
    for k in kw:
        assert k in c, k
    c.update(kw)
    return c


def poisson_arrivals(rng, n, mean_gap, start=0):
    """Arrival steps with geometric gaps (discrete Poisson process)."""
    out, t = [], start
    for _ in range(n):
        out.append(t)
        # geometric number of steps, mean ~= mean_gap
        gap = 0
        while rng.random() > 1.0 / (mean_gap + 1):
            gap += 1
        t += gap
    return out


# --------------------------------------------------------------------------
# Workload builders
# --------------------------------------------------------------------------

def w_poisson_basic():
    rng = random.Random(1001)
    arr = poisson_arrivals(rng, 40, 5)
    reqs = [req(toks(rng, rng.randint(20, 300)), rng.randint(10, 120), a) for a in arr]
    return dict(name="poisson-basic",
                description="40 random prompts, geometric arrival gaps (mean 5 steps), ample KV",
                config=cfg(), requests=reqs)


def w_poisson_tight():
    rng = random.Random(1002)
    arr = poisson_arrivals(rng, 18, 3)
    reqs = [req(toks(rng, rng.randint(30, 250)), rng.randint(30, 150), a) for a in arr]
    return dict(name="poisson-tight",
                description="18 random prompts, mean gap 3 steps, 48 usable blocks: preemption under FCFS",
                config=cfg(num_gpu_blocks=49, max_model_len=512), requests=reqs)


def w_burst():
    rng = random.Random(1003)
    reqs = [req(toks(rng, rng.randint(16, 200)), rng.randint(20, 160), 0) for _ in range(32)]
    return dict(name="burst",
                description="32 requests all at step 0, max_num_seqs 16, budget 512",
                config=cfg(max_num_seqs=16, max_num_batched_tokens=512, num_gpu_blocks=401),
                requests=reqs)


def w_shared_prefix():
    rng = random.Random(1004)
    sys_a = toks(rng, 16 * 8)    # 8 blocks
    sys_b = toks(rng, 16 * 4 + 5)  # 4 blocks + 5 tokens
    reqs = []
    arr = poisson_arrivals(rng, 36, 3)
    for i, a in enumerate(arr):
        kind = i % 3
        if kind == 0:
            k = rng.choice([2, 4, 8])  # share the first k blocks of sys_a
            p = sys_a[:16 * k] + toks(rng, rng.randint(1, 90))
        elif kind == 1:
            p = sys_b + toks(rng, rng.randint(1, 60))
        else:
            p = toks(rng, rng.randint(20, 150))
        reqs.append(req(p, rng.randint(8, 60), a))
    return dict(name="shared-prefix",
                description="system prompts shared over the first 2/4/8 blocks, plus unrelated prompts",
                config=cfg(num_gpu_blocks=201), requests=reqs)


def w_identical_prompts():
    rng = random.Random(1005)
    p64 = toks(rng, 64)     # exact multiple of 16
    p160 = toks(rng, 160)   # exact multiple of 16
    p100 = toks(rng, 100)   # not a multiple
    p16 = toks(rng, 16)     # exactly one block: hit capped to 0
    reqs = []
    step = 0
    for rep in range(4):
        for p in (p64, p160, p100, p16):
            reqs.append(req(list(p), rng.randint(5, 40), step))
            step += rng.randint(0, 6)
        # two identical prompts in the same step: both miss (computed together)
        reqs.append(req(list(p160), 10, step))
        reqs.append(req(list(p160), 12, step))
        step += 25
    return dict(name="identical-prompts",
                description="identical prompts (64/160/16 tokens = exact block multiples, 100 = not); "
                            "full hits recompute the last block; same-step duplicates both compute",
                config=cfg(max_num_batched_tokens=128), requests=reqs)


def w_exact_multiple_hits():
    rng = random.Random(1006)
    base = toks(rng, 256)
    reqs = []
    step = 0
    for n in (32, 48, 64, 128, 256, 255, 96, 97, 95, 144):
        p = base[:n]
        reqs.append(req(p, rng.randint(4, 30), step))
        step += rng.randint(8, 20)
    # repeat them after everything has been cached once
    for n in (256, 128, 32, 97, 95, 16, 17):
        reqs.append(req(base[:n], rng.randint(4, 30), step))
        step += rng.randint(3, 10)
    return dict(name="exact-multiple-hits",
                description="prefixes of one prompt with lengths on and off block boundaries, re-sent after caching",
                config=cfg(max_num_batched_tokens=64, max_num_seqs=4), requests=reqs)


def w_multi_turn():
    rng = random.Random(1007)
    reqs = []
    for c in range(6):
        first = len(reqs)
        reqs.append(req(toks(rng, rng.randint(30, 120)), rng.randint(10, 50), c * 7))
        prev = first
        for t in range(3):
            reqs.append(follow(prev, toks(rng, rng.randint(5, 40)), rng.randint(10, 50)))
            prev = len(reqs) - 1
    return dict(name="multi-turn",
                description="6 conversations x 4 turns; each turn = previous prompt + outputs + new tokens, "
                            "added the step after the previous turn finishes; ample KV",
                config=cfg(num_gpu_blocks=301, max_model_len=2048), requests=reqs)


def w_multi_turn_evict():
    rng = random.Random(1008)
    reqs = []
    for c in range(8):
        first = len(reqs)
        reqs.append(req(toks(rng, rng.randint(40, 140)), rng.randint(20, 60), c * 4))
        prev = first
        for t in range(2):
            reqs.append(follow(prev, toks(rng, rng.randint(10, 50)), rng.randint(20, 60)))
            prev = len(reqs) - 1
    return dict(name="multi-turn-evict",
                description="8 conversations x 3 turns with a tight cache: earlier turns partly evicted before follow-ups",
                config=cfg(num_gpu_blocks=61, max_model_len=512, max_num_batched_tokens=128),
                requests=reqs)


def w_preempt_tight_a():
    rng = random.Random(1009)
    # max_model_len 512 -> 32 blocks per full request; 32 + 4 usable blocks
    reqs = [req(toks(rng, rng.randint(60, 250)), rng.randint(150, 260), rng.randint(0, 30))
            for _ in range(6)]
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="preempt-tight-a",
                description="36 usable blocks (one 512-token request + 4 blocks), long outputs: repeated preemption",
                config=cfg(num_gpu_blocks=37, max_model_len=512, max_num_seqs=6,
                           max_num_batched_tokens=128),
                requests=reqs)


def w_preempt_tight_b():
    rng = random.Random(1010)
    reqs = [req(toks(rng, rng.randint(20, 120)), rng.randint(60, 130), rng.randint(0, 60))
            for _ in range(14)]
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="preempt-tight-b",
                description="max_model_len 256 (16 blocks), 21 usable blocks, 14 requests: preempt/resume churn",
                config=cfg(num_gpu_blocks=22, max_model_len=256, max_num_seqs=8,
                           max_num_batched_tokens=64),
                requests=reqs)


def w_preempt_tight_bs32():
    rng = random.Random(1011)
    reqs = [req(toks(rng, rng.randint(40, 300)), rng.randint(80, 200), rng.randint(0, 40))
            for _ in range(8)]
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="preempt-tight-bs32",
                description="block_size 32, max_model_len 512 (16 blocks), 19 usable blocks: preemption",
                config=cfg(block_size=32, num_gpu_blocks=20, max_model_len=512,
                           max_num_seqs=6, max_num_batched_tokens=128),
                requests=reqs)


def w_chunked_small_budget():
    rng = random.Random(1012)
    arr = poisson_arrivals(rng, 16, 8)
    reqs = [req(toks(rng, rng.randint(60, 400)), rng.randint(5, 40), a) for a in arr]
    return dict(name="chunked-small-budget",
                description="token budget 32, 4 seqs, prompts 60-400 tokens: many prefill chunks mixed with decodes",
                config=cfg(max_num_batched_tokens=32, max_num_seqs=4, num_gpu_blocks=201),
                requests=reqs)


def w_chunked_tiny_budget():
    rng = random.Random(1013)
    arr = poisson_arrivals(rng, 12, 10)
    reqs = [req(toks(rng, rng.randint(20, 200)), rng.randint(5, 30), a) for a in arr]
    return dict(name="chunked-tiny-budget",
                description="token budget 8 = max_num_seqs 8: decodes can starve prefill chunks",
                config=cfg(max_num_batched_tokens=8, max_num_seqs=8, num_gpu_blocks=151),
                requests=reqs)


def w_long_prefill_threshold():
    rng = random.Random(1014)
    arr = poisson_arrivals(rng, 20, 6)
    reqs = [req(toks(rng, rng.randint(30, 500)), rng.randint(5, 60), a) for a in arr]
    return dict(name="long-prefill-threshold",
                description="long_prefill_token_threshold 48 with budget 256: long prompts chunked at 48",
                config=cfg(long_prefill_token_threshold=48, num_gpu_blocks=301),
                requests=reqs)


def w_partial_prefills_auto():
    rng = random.Random(1015)
    arr = poisson_arrivals(rng, 18, 5)
    reqs = [req(toks(rng, rng.randint(40, 600)), rng.randint(5, 50), a) for a in arr]
    return dict(name="partial-prefills-auto-threshold",
                description="max_num_partial_prefills 2 with threshold 0: vLLM sets threshold = int(0.04*2048) = 81",
                config=cfg(max_num_partial_prefills=2, max_model_len=2048, num_gpu_blocks=301),
                requests=reqs)


def w_no_chunked_prefill():
    rng = random.Random(1016)
    arr = poisson_arrivals(rng, 24, 4)
    reqs = [req(toks(rng, rng.randint(20, 500)), rng.randint(5, 60), a) for a in arr]
    return dict(name="no-chunked-prefill",
                description="enable_chunked_prefill False, budget 512 = max_model_len: a prompt that does not fit "
                            "the remaining budget stops admission",
                config=cfg(enable_chunked_prefill=False, max_model_len=512,
                           max_num_batched_tokens=512, num_gpu_blocks=201),
                requests=reqs)


def w_no_chunked_tight():
    rng = random.Random(1017)
    reqs = [req(toks(rng, rng.randint(50, 300)), rng.randint(60, 180), rng.randint(0, 40))
            for _ in range(9)]
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="no-chunked-tight",
                description="chunked prefill off with a tight cache (40 usable blocks): preemption and whole-prompt admission",
                config=cfg(enable_chunked_prefill=False, max_model_len=512,
                           max_num_batched_tokens=512, num_gpu_blocks=41, max_num_seqs=6),
                requests=reqs)


def w_priority_basic():
    rng = random.Random(1018)
    arr = poisson_arrivals(rng, 30, 2)
    reqs = [req(toks(rng, rng.randint(20, 200)), rng.randint(10, 80), a, priority=rng.randint(0, 3))
            for a in arr]
    return dict(name="priority-basic",
                description="priority policy, priorities 0-3, max_num_seqs 4: waiting order by (priority, arrival, id)",
                config=cfg(policy="priority", max_num_seqs=4, max_num_batched_tokens=128),
                requests=reqs)


def w_priority_preempt():
    rng = random.Random(1019)
    reqs = []
    # low-priority requests first, so they sit early in `running`
    for i in range(4):
        reqs.append(req(toks(rng, rng.randint(40, 120)), rng.randint(120, 200), i, priority=5))
    arr = poisson_arrivals(rng, 12, 6, start=6)
    for a in arr:
        reqs.append(req(toks(rng, rng.randint(40, 160)), rng.randint(60, 160), a,
                        priority=rng.randint(0, 4)))
    return dict(name="priority-preempt",
                description="priority policy with a tight cache: low-priority requests admitted first are "
                            "preempted (some after being scheduled in the same step)",
                config=cfg(policy="priority", num_gpu_blocks=41, max_model_len=512,
                           max_num_seqs=6, max_num_batched_tokens=128),
                requests=reqs)


def w_priority_ties():
    rng = random.Random(1020)
    reqs = []
    # many requests with equal priority and equal arrival step: ties broken by request id string
    steps = [0] * 12 + [6] * 6 + [15] * 6
    for s in steps:
        reqs.append(req(toks(rng, rng.randint(20, 90)), rng.randint(30, 90), s,
                        priority=rng.choice([0, 1])))
    return dict(name="priority-ties",
                description="priority policy, many equal (priority, arrival) keys: ties broken by request_id "
                            "string order ('r10' < 'r2'); tight cache so the victim choice matters",
                config=cfg(policy="priority", num_gpu_blocks=33, max_model_len=256,
                           max_num_seqs=8, max_num_batched_tokens=64),
                requests=reqs)


def w_priority_livelock():
    rng = random.Random(1040)
    # Found by the port's property test: two requests of equal priority arriving at the same step,
    # and a cache that holds only one of them. Under the priority policy the victim of a failed
    # allocation is max((priority, arrival_time)) over running, so each request in turn preempts
    # the other and neither ever samples a token.
    reqs = [req(toks(rng, 19), 17, 16, priority=2), req(toks(rng, 25), 15, 16, priority=2)]
    return dict(name="priority-livelock",
                description="priority policy, equal (priority, arrival), a cache for one request: the two "
                            "preempt each other forever (an upstream livelock); 400 steps recorded",
                config=cfg(policy="priority", block_size=2, num_gpu_blocks=28, max_num_seqs=2,
                           max_num_batched_tokens=56, max_model_len=48, long_prefill_token_threshold=4,
                           enable_prefix_caching=False),
                stop_after_steps=400,
                requests=reqs)


def w_priority_livelock_bs16():
    rng = random.Random(1041)
    # The same cycle at vLLM's GPU block size (used by the port's engine-level test).
    reqs = [req(toks(rng, 40), 72, 0, priority=1), req(toks(rng, 48), 64, 0, priority=1)]
    return dict(name="priority-livelock-bs16",
                description="priority policy, equal (priority, arrival), block size 16, 9 usable blocks: "
                            "the two requests preempt each other forever; 400 steps recorded",
                config=cfg(policy="priority", block_size=16, num_gpu_blocks=10, max_num_seqs=2,
                           max_num_batched_tokens=576, max_model_len=144, long_prefill_token_threshold=16,
                           enable_prefix_caching=False),
                stop_after_steps=400,
                requests=reqs)


def w_aborts():
    rng = random.Random(1021)
    reqs = []
    for i in range(16):
        reqs.append(req(toks(rng, rng.randint(40, 200)), rng.randint(60, 160), rng.randint(0, 20)))
    reqs.sort(key=lambda r: r["arrival_step"])
    # aborts are filled in below with steps chosen so that the states are as named
    return dict(name="aborts",
                description="aborts (finish_requests FINISHED_ABORTED) of waiting, running and preempted requests "
                            "under a tight cache",
                config=cfg(num_gpu_blocks=41, max_model_len=512, max_num_seqs=6,
                           max_num_batched_tokens=128),
                requests=reqs)


def w_aborts_fcfs_ample():
    rng = random.Random(1022)
    reqs = []
    arr = poisson_arrivals(rng, 20, 3)
    for a in arr:
        reqs.append(req(toks(rng, rng.randint(20, 300)), rng.randint(20, 100), a))
    return dict(name="aborts-chunked",
                description="aborts during chunked prefill (partially computed prompt) and of queued requests, "
                            "budget 48",
                config=cfg(max_num_batched_tokens=48, max_num_seqs=4, num_gpu_blocks=151),
                requests=reqs)


def w_no_prefix_caching():
    rng = random.Random(1023)
    sys_a = toks(rng, 96)
    arr = poisson_arrivals(rng, 24, 3)
    reqs = []
    for i, a in enumerate(arr):
        p = (sys_a + toks(rng, rng.randint(5, 80))) if i % 2 == 0 else toks(rng, rng.randint(20, 200))
        reqs.append(req(p, rng.randint(30, 150), a))
    return dict(name="no-prefix-caching",
                description="prefix caching off (shared prefixes never hit), tight cache: preemption recomputes everything",
                config=cfg(enable_prefix_caching=False, num_gpu_blocks=45, max_model_len=512,
                           max_num_batched_tokens=128),
                requests=reqs)


def w_no_prefix_caching_bs32():
    rng = random.Random(1024)
    arr = poisson_arrivals(rng, 20, 4)
    reqs = [req(toks(rng, rng.randint(20, 300)), rng.randint(20, 120), a) for a in arr]
    return dict(name="no-prefix-caching-bs32",
                description="prefix caching off, block_size 32, moderate cache",
                config=cfg(enable_prefix_caching=False, block_size=32, num_gpu_blocks=41,
                           max_model_len=1024, max_num_batched_tokens=128),
                requests=reqs)


def w_bs8_shared():
    rng = random.Random(1025)
    sys_a = toks(rng, 8 * 7 + 3)
    reqs = []
    arr = poisson_arrivals(rng, 14, 4)
    for i, a in enumerate(arr):
        k = rng.randint(1, 7)
        reqs.append(req(sys_a[:8 * k] + toks(rng, rng.randint(1, 40)), rng.randint(10, 50), a))
        if i % 3 == 0:
            reqs.append(follow(len(reqs) - 1, toks(rng, rng.randint(3, 20)), rng.randint(5, 30)))
    return dict(name="bs8-shared-multiturn",
                description="block_size 8: shared prefixes of 1-7 blocks and follow-up turns",
                config=cfg(block_size=8, num_gpu_blocks=121, max_model_len=512,
                           max_num_batched_tokens=64, max_num_seqs=6),
                requests=reqs)


def w_bs32_mixed():
    rng = random.Random(1026)
    sys_a = toks(rng, 32 * 3)
    reqs = []
    arr = poisson_arrivals(rng, 24, 3)
    for i, a in enumerate(arr):
        if i % 2:
            p = sys_a[:32 * rng.randint(1, 3)] + toks(rng, rng.randint(1, 70))
        else:
            p = toks(rng, rng.randint(10, 220))
        reqs.append(req(p, rng.randint(20, 120), a))
    return dict(name="bs32-mixed",
                description="block_size 32, shared prefixes, moderately tight cache",
                config=cfg(block_size=32, num_gpu_blocks=31, max_model_len=512,
                           max_num_batched_tokens=128),
                requests=reqs)


def w_max_model_len_cap():
    rng = random.Random(1027)
    reqs = []
    for i in range(8):
        p = toks(rng, rng.randint(40, 200))
        # max_tokens beyond max_model_len - prompt: the request stops at max_model_len
        reqs.append(req(p, 256 - len(p) + rng.choice([-3, -1, 0, 1, 5, 40]), rng.randint(0, 10)))
    # prompt + max_tokens exactly max_model_len, and one less
    reqs.append(req(toks(rng, 100), 156, 12))
    reqs.append(req(toks(rng, 120), 135, 12))
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="max-model-len-cap",
                description="prompt + max_tokens around max_model_len 256: some stop by the max_model_len cap",
                config=cfg(max_model_len=256, num_gpu_blocks=81, max_num_seqs=4,
                           max_num_batched_tokens=64),
                requests=reqs)


def w_long_decode():
    rng = random.Random(1028)
    reqs = [req(toks(rng, rng.randint(10, 60)), rng.randint(250, 600), rng.randint(0, 50))
            for _ in range(5)]
    reqs.sort(key=lambda r: r["arrival_step"])
    return dict(name="long-decode",
                description="5 requests with 250-600 output tokens: long steady decode",
                config=cfg(num_gpu_blocks=301, max_num_seqs=4, max_num_batched_tokens=64),
                requests=reqs)


def w_idle_gaps():
    rng = random.Random(1029)
    reqs = []
    t = 0
    for i in range(12):
        reqs.append(req(toks(rng, rng.randint(10, 100)), rng.randint(3, 20), t))
        t += rng.choice([0, 1, 40, 60])
    return dict(name="idle-gaps",
                description="bursts separated by long idle periods: idle engine steps and LRU reuse after idle",
                config=cfg(num_gpu_blocks=41, max_num_batched_tokens=64, max_num_seqs=4,
                           max_model_len=512),
                requests=reqs)


def w_lru_order():
    rng = random.Random(1030)
    # Several chains freed in a known order, then requests that hit partial chains
    chains = [toks(rng, 16 * 6) for _ in range(4)]
    reqs = []
    for i, c in enumerate(chains):
        reqs.append(req(c + toks(rng, 7), 8 + 4 * i, 0))
    # after those finish, a big request evicts part of the free queue
    reqs.append(req(toks(rng, 16 * 10), 5, 40))
    # then requests touching each chain at different depths
    for i, c in enumerate(chains):
        reqs.append(req(c[:16 * (6 - i)] + toks(rng, 3), 5, 60 + 2 * i))
    reqs.append(req(toks(rng, 16 * 12), 5, 80))
    for i, c in enumerate(chains):
        reqs.append(req(list(c) + toks(rng, 9), 4, 100 + i))
    return dict(name="lru-eviction-order",
                description="chains freed in a known order, then evicted from the free-queue head (tail blocks of a "
                            "chain first); later requests see partial hits",
                config=cfg(num_gpu_blocks=41, max_num_batched_tokens=64, max_num_seqs=4,
                           max_model_len=512),
                requests=reqs)


def w_mixed_everything():
    rng = random.Random(1031)
    sys_a = toks(rng, 16 * 6)
    reqs = []
    arr = poisson_arrivals(rng, 22, 4)
    for i, a in enumerate(arr):
        if i % 4 == 0:
            p = sys_a + toks(rng, rng.randint(5, 60))
        else:
            p = toks(rng, rng.randint(20, 220))
        reqs.append(req(p, rng.randint(20, 140), a))
        if i % 5 == 2:
            reqs.append(follow(len(reqs) - 1, toks(rng, rng.randint(5, 30)), rng.randint(10, 60)))
    return dict(name="mixed-everything",
                description="random arrivals, shared system prompt, follow-up turns, threshold 64, tight cache",
                config=cfg(num_gpu_blocks=61, max_model_len=1024, long_prefill_token_threshold=64,
                           max_num_batched_tokens=128, max_num_seqs=8),
                requests=reqs)


def w_priority_multiturn_aborts():
    rng = random.Random(1032)
    reqs = []
    arr = poisson_arrivals(rng, 18, 3)
    for i, a in enumerate(arr):
        reqs.append(req(toks(rng, rng.randint(30, 180)), rng.randint(30, 120), a,
                        priority=rng.randint(0, 2)))
        if i % 4 == 1:
            reqs.append(follow(len(reqs) - 1, toks(rng, rng.randint(5, 30)), rng.randint(10, 50),
                               priority=rng.randint(0, 2)))
    return dict(name="priority-multiturn-aborts",
                description="priority policy, follow-up turns, aborts, tight cache",
                config=cfg(policy="priority", num_gpu_blocks=45, max_model_len=512,
                           max_num_batched_tokens=96, max_num_seqs=6),
                requests=reqs)


BUILDERS = [
    w_poisson_basic, w_poisson_tight, w_burst, w_shared_prefix, w_identical_prompts,
    w_exact_multiple_hits, w_multi_turn, w_multi_turn_evict, w_preempt_tight_a,
    w_preempt_tight_b, w_preempt_tight_bs32, w_chunked_small_budget, w_chunked_tiny_budget,
    w_long_prefill_threshold, w_partial_prefills_auto, w_no_chunked_prefill,
    w_no_chunked_tight, w_priority_basic, w_priority_preempt, w_priority_ties, w_aborts,
    w_aborts_fcfs_ample, w_no_prefix_caching, w_no_prefix_caching_bs32, w_bs8_shared,
    w_bs32_mixed, w_max_model_len_cap, w_long_decode, w_idle_gaps, w_lru_order,
    w_mixed_everything, w_priority_multiturn_aborts, w_priority_livelock,
    w_priority_livelock_bs16,
]

# Aborts: (workload name) -> list of (request index, abort_step, expected state).
# The steps were chosen by reading the recorded traces; record.py checks the state.
ABORTS = {
    "aborts": [
        (4, 20, "waiting"),
        (3, 30, "preempted"),
        (2, 60, "running"),
        (12, 100, "waiting"),
        (7, 130, "preempted"),
        (9, 200, "running"),
        (15, {"sync": 250, "async": 251}, "preempted"),
    ],
    "aborts-chunked": [
        (3, 9, "running"),      # in the middle of its chunked prefill
        (9, 28, "waiting"),
        (4, 40, "running"),     # decoding
        (0, 90, "finished"),    # already finished: finish_requests ignores it
        (12, 120, "running"),   # two aborts in one step, applied in index order
        (13, 120, "waiting"),
        (14, 125, "running"),   # in the middle of its chunked prefill
    ],
    "priority-multiturn-aborts": [
        (13, 35, "waiting"),
        (8, 40, "running"),
        (14, {"sync": 195, "async": 196}, "preempted"),
        (19, {"sync": 196, "async": 197}, "running"),
    ],
}


def build():
    out = []
    for b in BUILDERS:
        w = b()
        w.setdefault("modes", ["sync", "async"])
        for idx, step, state in ABORTS.get(w["name"], []):
            r = w["requests"][idx]
            r["abort_step"] = step
            r["expect_abort"] = state
        out.append(w)
    names = [w["name"] for w in out]
    assert len(names) == len(set(names))
    return out


WORKLOADS = build()

"""Offloading workloads for the vLLM 0.15.1 oracle (stdlib only), recorded by
``record_offload.py`` as ``offload-*.jsonl``.

Each is a workload of ``workloads.py`` (same request specs) plus ``offload``:

    cpu_blocks    CPU tier size in offloaded blocks (cpu_bytes_to_use is this
                  times the bytes of one offloaded block)
    block_size    offloaded block size in tokens (a multiple of the GPU's)
    store_polls   fake store handler: a job completes at its N-th poll
    load_polls    fake load handler: a job completes at its N-th poll
    fail_loads    {request id: k}: when that request's load completes, the
                  fake worker reports the k-th GPU block of its destination
                  invalid (a failed load; the scheduler recomputes)
"""

import random

from workloads import cfg, follow, req, toks


def off(cpu_blocks, block_size=16, store_polls=1, load_polls=1, fail_loads=None):
    return {"cpu_blocks": cpu_blocks, "block_size": block_size, "store_polls": store_polls,
            "load_polls": load_polls, "fail_loads": fail_loads or {}}


def w_store_hit():
    # The reference's worked trace: A stores, F evicts A from the GPU, B hits A on the CPU.
    rng = random.Random(1701)
    a = toks(rng, 70)
    return {
        "name": "offload-store-hit",
        "description": "A stores 2 obs-32 blocks, F evicts it from a small GPU, B loads A's prefix from CPU",
        "config": cfg(num_gpu_blocks=12, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(6, block_size=32),
        "modes": ["sync", "async"],
        "requests": [req(a, 3, 0), req(toks(rng, 150), 3, 5), req(a[:64] + toks(rng, 3), 2, 10)],
    }


def w_multiturn():
    rng = random.Random(1702)
    reqs = []
    sessions = 6
    for s in range(sessions):
        reqs.append(req(toks(rng, 90 + 10 * s), 12, arrival_step=3 * s))
    for turn in range(2):
        for s in range(sessions):
            parent = s + turn * sessions
            reqs.append(follow(parent, toks(rng, 20), 10))
    return {
        "name": "offload-multiturn",
        "description": "6 sessions x 3 turns whose working set exceeds the GPU; later turns hit their history on CPU",
        "config": cfg(num_gpu_blocks=40, max_num_batched_tokens=128, max_num_seqs=4),
        "offload": off(64),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_evict_lru():
    rng = random.Random(1703)
    prompts = [toks(rng, 64) for _ in range(6)]
    reqs = [req(p, 2, arrival_step=4 * i) for i, p in enumerate(prompts)]
    # re-ask the first and the last: the first was evicted from the CPU (LRU), the last is there
    reqs.append(req(prompts[0] + toks(rng, 5), 2, arrival_step=40))
    reqs.append(req(prompts[5] + toks(rng, 5), 2, arrival_step=44))
    reqs.append(req(prompts[4] + toks(rng, 9), 2, arrival_step=48))
    return {
        "name": "offload-evict-lru",
        "description": "a CPU tier of 8 blocks under 6 distinct 4-block prompts: LRU eviction (tail first), then hits on survivors only",
        "config": cfg(num_gpu_blocks=7, max_num_batched_tokens=64, max_num_seqs=2),
        "offload": off(8),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_cannot_store():
    rng = random.Random(1704)
    reqs = [req(toks(rng, 96), 30, arrival_step=0), req(toks(rng, 96), 30, arrival_step=1),
            req(toks(rng, 40), 4, arrival_step=2)]
    return {
        "name": "offload-cannot-store",
        "description": "a CPU tier of 5 blocks full of not-ready blocks of running requests: stores refused and retried",
        "config": cfg(num_gpu_blocks=40, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(5),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_failed_load():
    rng = random.Random(1705)
    a = toks(rng, 80)
    b = toks(rng, 80)
    reqs = [req(a, 2, 0), req(b, 2, 0), req(toks(rng, 160), 2, 6),
            req(a + toks(rng, 7), 2, 14), req(b + toks(rng, 7), 2, 15)]
    return {
        "name": "offload-failed-load",
        "description": "two CPU hits whose loads report an invalid block (the first and the third of the destination): recompute from there",
        "config": cfg(num_gpu_blocks=14, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(16, fail_loads={"r3": 0, "r4": 2}),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_abort_load():
    rng = random.Random(1706)
    a = toks(rng, 96)
    reqs = [req(a, 2, 0), req(toks(rng, 180), 2, 6),
            # parks for a slow load and is aborted while parked
            req(a + toks(rng, 5), 3, 18, abort_step=20, expect_abort="waiting_for_remote_kvs"),
            # aborted before admission (behind the budget), then one after its load ran
            req(a[:64] + toks(rng, 40), 3, 30, abort_step=30, expect_abort="waiting"),
            req(a + toks(rng, 9), 20, 32, abort_step=40, expect_abort="running"),
            req(a + toks(rng, 11), 2, 45)]
    return {
        "name": "offload-abort-load",
        "description": "aborts before, during (parked, load in flight) and after a CPU load; slow loads (3 polls)",
        "config": cfg(num_gpu_blocks=16, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(24, load_polls=3),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_preempt():
    rng = random.Random(1707)
    reqs = [req(toks(rng, 60), 60, arrival_step=i) for i in range(4)]
    return {
        "name": "offload-preempt",
        "description": "a tight GPU preempts requests with stores in flight (the step waits for them); resumed requests load from CPU",
        "config": cfg(num_gpu_blocks=18, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(32, store_polls=2),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_obs32_unaligned():
    rng = random.Random(1708)
    a = toks(rng, 128)
    reqs = [req(a, 2, 0), req(toks(rng, 64), 2, 2),
            req(a[:48] + toks(rng, 20), 2, 8),   # GPU hit 48 (3 blocks), obs 32: unaligned
            req(toks(rng, 200), 2, 12),
            req(a + toks(rng, 4), 2, 24),
            req(a[:100] + toks(rng, 6), 2, 30)]
    return {
        "name": "offload-obs32",
        "description": "offloaded blocks of 32 over GPU blocks of 16: unaligned local hits, partial-block loads",
        "config": cfg(num_gpu_blocks=20, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(16, block_size=32),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_no_prefix_caching():
    rng = random.Random(1709)
    a = toks(rng, 64)
    reqs = [req(a, 2, 0), req(a + toks(rng, 3), 2, 4), req(a + toks(rng, 5), 2, 4),
            req(toks(rng, 50), 2, 9), req(a[:32] + toks(rng, 30), 2, 12)]
    return {
        "name": "offload-no-prefix-caching",
        "description": "GPU prefix caching off: every CPU hit is loaded again, concurrent loads of the same blocks allowed",
        "config": cfg(num_gpu_blocks=30, max_num_batched_tokens=64, max_num_seqs=4, enable_prefix_caching=False),
        "offload": off(16, load_polls=2),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_slow_stores_idle():
    rng = random.Random(1710)
    a = toks(rng, 80)
    reqs = [req(a, 4, 0), req(toks(rng, 120), 3, 30), req(a + toks(rng, 6), 2, 40)]
    return {
        "name": "offload-slow-stores",
        "description": "stores take 4 polls: blocks stay held through idle steps (the engine stops polling) until new work arrives",
        "config": cfg(num_gpu_blocks=14, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(16, store_polls=4),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_same_prefix_race():
    rng = random.Random(1711)
    a = toks(rng, 96)
    reqs = [req(a, 2, 0), req(toks(rng, 200), 2, 5),
            req(a + toks(rng, 3), 2, 20), req(a + toks(rng, 4), 2, 20), req(a + toks(rng, 5), 2, 21)]
    return {
        "name": "offload-same-prefix",
        "description": "three requests hit the same CPU blocks while one loads them: the others are asked again (None) and hit the GPU copy",
        "config": cfg(num_gpu_blocks=16, max_num_batched_tokens=64, max_num_seqs=4),
        "offload": off(16, load_polls=2),
        "modes": ["sync", "async"],
        "requests": reqs,
    }


def w_livelock():
    # Found by engines/tests/offload_properties.rs and confirmed on vLLM 0.15.1: two requests
    # whose CPU loads completed wait holding their loaded blocks (admission fails for lack of
    # free blocks), while the head of the queue is admitted with the whole budget and then
    # preempts itself for want of a block, every other step, forever.
    def prompt(key, g, n):
        return [(1000 * g + t + 100) if t < 40 else (15000 + 100 * key + t) for t in range(n)]
    spec = [(40, 1, 55, 19, None), (40, 1, 25, 1, None), (0, 0, 1, 1, None), (38, 1, 12, 5, None),
            (1, 1, 23, 6, 31), (47, 0, 8, 11, None)]
    return {
        "name": "offload-livelock",
        "description": "upstream livelock: loaded requests wait holding blocks while the head admits and preempts itself",
        "config": cfg(block_size=4, num_gpu_blocks=25, max_num_batched_tokens=63, max_num_seqs=4,
                      max_model_len=96, enable_prefix_caching=False),
        "offload": off(3, block_size=4, store_polls=3, load_polls=2, fail_loads={"r1": 0}),
        "modes": ["sync"],
        "stop_after_steps": 160,
        "requests": [req(prompt(k, g, p), o, at, abort_step=ab) for k, (at, g, p, o, ab) in enumerate(spec)],
    }


WORKLOADS = [
    w_store_hit(),
    w_multiturn(),
    w_evict_lru(),
    w_cannot_store(),
    w_failed_load(),
    w_abort_load(),
    w_preempt(),
    w_obs32_unaligned(),
    w_no_prefix_caching(),
    w_slow_stores_idle(),
    w_same_prefix_race(),
    w_livelock(),
]

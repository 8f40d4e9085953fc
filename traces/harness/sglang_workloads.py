"""Workloads for the SGLang 0.5.23 scheduler oracle (standard library only).

Each workload is a dict:
  name, description,
  config: pool (KV pool tokens = max_total_num_tokens), page_size, chunk
          (chunked_prefill_size; -1 = off), max_prefill_tokens, max_running
          (max_running_requests), policy, mixed (enable_mixed_chunk), overlap
          (True = event_loop_overlap order, False = event_loop_normal),
          decay_steps (SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS), random_seed,
  requests: list of {rid, prompt, max_new, arrival, abort, eos_at, ignore_eos}.

Request ids are "r%03d" so that no id is a prefix of another: SGLang's
abort_request matches by rid.startswith(...).
Prompt tokens are in [3, 999]; outputs (record_sglang.output_token) are >= 1000
except the EOS (2) a request emits at output index eos_at.
"""

import random

DEFAULT = dict(pool=400, page_size=1, chunk=64, max_prefill_tokens=16384, max_running=16,
               policy="fcfs", mixed=False, overlap=False, decay_steps=20, random_seed=0)


def toks(rng, n):
    return [rng.randint(3, 999) for _ in range(n)]


def req(i, prompt, max_new, arrival, abort=None, eos_at=None, ignore_eos=False):
    return dict(rid="r%03d" % i, prompt=list(prompt), max_new=max_new, arrival=arrival,
                abort=abort, eos_at=eos_at, ignore_eos=ignore_eos)


def W(name, description, requests, **cfg):
    c = dict(DEFAULT)
    for k in cfg:
        assert k in c, k
    c.update(cfg)
    return dict(name=name, description=description, config=c, requests=requests)


# ---------------------------------------------------------------- builders

def random_arrivals(seed, n, plen=(8, 60), out=(4, 40), gap=(0, 4)):
    rng = random.Random(seed)
    t, rs = 0, []
    for i in range(n):
        t += rng.randint(*gap)
        rs.append(req(i, toks(rng, rng.randint(*plen)), rng.randint(*out), t))
    return rs


def shared_prefix(seed, n, groups, prefix_len, suffix=(4, 20), out=(4, 24), gap=(0, 3)):
    rng = random.Random(seed)
    prefixes = [toks(rng, prefix_len) for _ in range(groups)]
    t, rs = 0, []
    for i in range(n):
        t += rng.randint(*gap)
        p = prefixes[rng.randrange(groups)] + toks(rng, rng.randint(*suffix))
        rs.append(req(i, p, rng.randint(*out), t))
    return rs


def tight(seed, n, plen, out, gap):
    rng = random.Random(seed)
    return [req(i, toks(rng, plen), out, i * gap) for i in range(n)]


def burst(seed, n, plen=(6, 30), out=(2, 8), arrival=0, prefixes=0, prefix_len=0):
    rng = random.Random(seed)
    pre = [toks(rng, prefix_len) for _ in range(prefixes)]
    rs = []
    for i in range(n):
        p = toks(rng, rng.randint(*plen))
        if pre:
            p = pre[rng.randrange(len(pre))] + p
        rs.append(req(i, p, rng.randint(*out), arrival))
    return rs


def policy_mix(seed):
    """Requests that make the policies differ: shared prefixes, varied output lengths,
    arriving while a long request runs so the queue builds up."""
    rng = random.Random(seed)
    a, b = toks(rng, 40), toks(rng, 24)
    rs = [req(0, toks(rng, 30), 60, 0)]
    for i in range(1, 14):
        kind = i % 4
        if kind == 0:
            p = a + toks(rng, rng.randint(2, 10))
        elif kind == 1:
            p = b + toks(rng, rng.randint(2, 10))
        elif kind == 2:
            p = a[:20] + toks(rng, rng.randint(5, 15))
        else:
            p = toks(rng, rng.randint(10, 40))
        rs.append(req(i, p, rng.randint(3, 30), 1 + i // 3))
    # a prefix-seeding request first so the tree holds a and b
    rs[0]["prompt"] = a + b
    return rs


def long_queue(seed, n, prefixes, prefix_len=16):
    """A burst of n short requests at step 0 (queue > 128 under lpm switches to fcfs)."""
    rng = random.Random(seed)
    pre = [toks(rng, prefix_len) for _ in range(prefixes)]
    rs = [req(0, pre[0] + toks(rng, 4), 3, 0)]
    for i in range(1, n):
        p = (pre[rng.randrange(prefixes)] if rng.random() < 0.6 else toks(rng, prefix_len)) + toks(rng, rng.randint(1, 6))
        rs.append(req(i, p, rng.randint(1, 3), 1))
    return rs


# ---------------------------------------------------------------- workloads

WORKLOADS = []
add = WORKLOADS.append

add(W("random-small", "random arrivals, roomy pool, chunk 64",
      random_arrivals(1, 12)))
add(W("random-medium", "random arrivals, 24 requests, pool 600",
      random_arrivals(2, 24, plen=(10, 90), out=(4, 60)), pool=600))
add(W("random-idle-gaps", "random arrivals with idle gaps (on_idle resets new_token_ratio)",
      random_arrivals(3, 10, gap=(0, 30), out=(2, 12))))
add(W("random-no-chunk", "chunked prefill disabled (chunk -1), max_prefill_tokens 128",
      random_arrivals(4, 14, plen=(20, 100)), chunk=-1, max_prefill_tokens=128, pool=800))
add(W("shared-prefix-2", "2 shared prefixes of 32 tokens: radix hits, in-batch dedup",
      shared_prefix(5, 16, 2, 32)))
add(W("shared-prefix-identical", "identical prompts (hit capped at len-1), some in one step",
      [req(i, list(range(100, 140)), 6, i // 3) for i in range(9)]))
add(W("shared-prefix-lpm", "shared prefixes under lpm",
      shared_prefix(6, 20, 3, 40, gap=(0, 2)), policy="lpm", pool=600))
add(W("shared-prefix-evict", "shared prefixes in a small pool: LRU eviction of tree leaves",
      shared_prefix(7, 20, 4, 30, out=(6, 20)), pool=220, max_running=8))
add(W("tight-retract", "tight pool: decode retraction, ratio jump, re-prefill (decay 10)",
      tight(8, 6, 40, 80, 5), pool=300, decay_steps=10))
add(W("tight-retract-many", "very tight pool, 8 requests, several retractions",
      tight(9, 8, 30, 70, 2), pool=260, decay_steps=8))
add(W("tight-retract-shared", "tight pool with shared prefixes: retracted prompts evicted/kept",
      shared_prefix(10, 10, 2, 30, out=(40, 70), gap=(1, 3)), pool=300, decay_steps=10))
add(W("clip-max-new", "max_new_tokens clipped at arrival to pool - ceil(input) - page - 1; "
      "clipped requests in a 100-token pool are admitted one at a time (NO_TOKEN, batch_is_full)",
      [req(0, list(range(200, 230)), 200, 0, ignore_eos=True), req(1, list(range(300, 330)), 60, 0),
       req(2, list(range(400, 420)), 500, 3)], pool=100, decay_steps=5))
def prompt_lag():
    """New prefixes whose followers arrive one step after the first: the normal loop hits the
    first one's prompt, the overlap loop (checkpoint one step later) misses it."""
    rng = random.Random(21)
    A, B = toks(rng, 36), toks(rng, 28)
    rs = []
    for i, (pre, t) in enumerate([(A, 0), (A, 1), (A, 2), (B, 6), (B, 7), (B, 7), (A, 12), (B, 13)]):
        rs.append(req(i, pre + toks(rng, 5 + i), 6, t))
    return rs


add(W("prompt-lag", "a new prefix, followers one and two steps later (hit at once)", prompt_lag()))
add(W("overlap-prompt-lag", "overlap: the follower one step later misses the prompt", prompt_lag(),
      overlap=True))
def finishing(n=4, gap=5, plen=20, out=50):
    return [req(i, list(range(100 * i + 3, 100 * i + 3 + plen)), out, i * gap) for i in range(n)]


add(W("overlap-skip-finishing", "overlap: decode does not fit while a length-finisher is in flight: "
      "update_running_batch returns None (idle step with a running batch), no retraction",
      finishing(), pool=252, decay_steps=2, overlap=True))
add(W("finishing-normal", "the same workload in the normal loop", finishing(), pool=252, decay_steps=2))
add(W("overlap-skip-then-retract", "overlap: skip-finishing step and a retraction in one run",
      finishing(gap=3), pool=136, decay_steps=2, overlap=True))
add(W("policy-fcfs", "policy mix under fcfs", policy_mix(11), pool=260))
add(W("policy-lpm", "policy mix under lpm", policy_mix(11), pool=260, policy="lpm"))
add(W("policy-dfs-weight", "policy mix under dfs-weight", policy_mix(11), pool=260, policy="dfs-weight"))
add(W("policy-lof", "policy mix under lof (longest output first)", policy_mix(11), pool=260, policy="lof"))
add(W("policy-random", "policy mix under random, random.seed(7)", policy_mix(11), pool=260,
      policy="random", random_seed=7))
add(W("lpm-long-queue-129", "lpm with 129 waiting at step 1 (> 128: fcfs pass), then <= 128",
      long_queue(12, 130, 3), policy="lpm", pool=1200, max_running=64, chunk=256))
add(W("lpm-long-queue-128", "lpm with exactly 128 waiting (not > 128: lpm pass)",
      long_queue(12, 129, 3), policy="lpm", pool=1200, max_running=64, chunk=256))
add(W("fcfs-long-queue-refresh", "fcfs, long queue: every 32nd calc_priority touches waiting prefixes",
      long_queue(13, 60, 2), pool=300, max_running=8, chunk=64))
add(W("chunk-16", "chunked prefill, chunk 16, long prompts",
      random_arrivals(14, 8, plen=(30, 90), out=(3, 20)), chunk=16))
add(W("chunk-8-shared", "chunk 8 with shared prefixes (chunk checkpoint then hits)",
      shared_prefix(15, 10, 2, 20, gap=(0, 2)), chunk=8))
add(W("chunk-24-maxrun-4", "chunk 24, max_running 4 (request cap, batch_is_full)",
      random_arrivals(16, 14, plen=(10, 70), gap=(0, 1)), chunk=24, max_running=4))
add(W("mixed-chunk", "enable_mixed_chunk: decodes ride along with the prefill",
      random_arrivals(17, 12, plen=(20, 80), out=(5, 30)), mixed=True, chunk=32))
add(W("abort-waiting", "aborts of waiting requests (queue full of a long one)",
      [req(0, list(range(10, 60)), 40, 0)] +
      [dict(req(i, list(range(100 * i, 100 * i + 20)), 10, 1), abort=(3 if i % 2 else None))
       for i in range(1, 7)], max_running=1))
add(W("abort-running", "aborts of running (decoding) requests and of a finished one",
      [dict(req(i, list(range(50 * i + 3, 50 * i + 33)), 30, i), abort=a)
       for i, a in enumerate([10, None, 12, 40, None])]))
add(W("abort-chunked", "abort of the in-flight chunked request (chunk 16)",
      [dict(req(0, list(range(3, 103)), 10, 0), abort=2), req(1, list(range(200, 240)), 10, 1),
       dict(req(2, list(range(300, 380)), 10, 3), abort=6)], chunk=16))
add(W("eos-finishes", "EOS/stop finishes at chosen output indices",
      [dict(req(i, list(range(20 * i + 3, 20 * i + 23)), 30, i), eos_at=e)
       for i, e in enumerate([0, 3, None, 7, 1, None, 12])]))
add(W("page-4", "page_size 4: page-aligned matches, admission and decode pages",
      shared_prefix(18, 14, 2, 22, gap=(0, 2)), page_size=4, pool=400))
add(W("page-16-tight", "page_size 16, tight pool: retraction with pages",
      tight(19, 6, 37, 60, 3), page_size=16, pool=320, decay_steps=10))
add(W("overlap-random", "overlap loop order: random arrivals",
      random_arrivals(1, 12), overlap=True))
add(W("overlap-shared-prefix", "overlap: prompt checkpoint lands one step later",
      shared_prefix(5, 16, 2, 32), overlap=True))
add(W("overlap-tight-retract", "overlap: retraction and skip of length-finishing requests",
      tight(8, 6, 40, 80, 5), pool=300, decay_steps=10, overlap=True))
add(W("overlap-eos", "overlap: EOS finishes decode one extra step",
      [dict(req(i, list(range(20 * i + 3, 20 * i + 23)), 30, i), eos_at=e)
       for i, e in enumerate([0, 3, None, 7, 1, None, 12])], overlap=True))
add(W("overlap-chunk-abort", "overlap: chunked prefill with aborts",
      [dict(req(0, list(range(3, 103)), 10, 0), abort=2), req(1, list(range(200, 240)), 10, 1),
       dict(req(2, list(range(300, 380)), 10, 3), abort=6),
       dict(req(3, list(range(400, 430)), 20, 4), abort=12)], chunk=16, overlap=True))
add(W("overlap-mixed", "overlap + mixed chunk", random_arrivals(17, 12, plen=(20, 80), out=(5, 30)),
      mixed=True, chunk=32, overlap=True))
add(W("overlap-page-4", "overlap + page_size 4", shared_prefix(18, 14, 2, 22, gap=(0, 2)),
      page_size=4, pool=400, overlap=True))


def nested_prefixes(seed, n):
    """Prompts that share nested prefixes (a < a+b < a+b+c), for dfs-weight / lpm trees."""
    rng = random.Random(seed)
    a, b, c = toks(rng, 16), toks(rng, 12), toks(rng, 8)
    shapes = [a, a + b, a + b + c, a + c, b]
    rs = [req(0, a + b + c + toks(rng, 4), 40, 0)]
    for i in range(1, n):
        rs.append(req(i, shapes[rng.randrange(len(shapes))] + toks(rng, rng.randint(1, 8)),
                      rng.randint(2, 20), 1 + i // 4))
    return rs


add(W("dfs-weight-nested", "dfs-weight on nested shared prefixes, max_running 4 (queue builds up)", nested_prefixes(22, 18),
      policy="dfs-weight", pool=300, max_running=4))
add(W("lpm-nested", "lpm on nested shared prefixes, max_running 4", nested_prefixes(22, 18), policy="lpm", pool=300,
      max_running=4))
add(W("lpm-chunk-retract", "lpm + chunk 32 + tight pool with shared prefixes",
      shared_prefix(23, 12, 2, 30, out=(30, 60), gap=(0, 2)), policy="lpm", chunk=32, pool=280,
      decay_steps=10))
add(W("max-prefill-small", "max_prefill_tokens 40 below chunk 64 (rem_input budget ends the pass)",
      random_arrivals(24, 12, plen=(10, 50), gap=(0, 1)), max_prefill_tokens=40))
add(W("page-4-mixed", "page_size 4 + mixed chunk", random_arrivals(25, 10, plen=(10, 60)),
      page_size=4, mixed=True, chunk=32))
add(W("overlap-idle-gaps", "overlap with idle gaps (ratio reset one step later)",
      random_arrivals(3, 10, gap=(0, 30), out=(2, 12)), overlap=True))
add(W("overlap-policy-lpm", "overlap + lpm policy mix", policy_mix(11), pool=260, policy="lpm",
      overlap=True))
add(W("overlap-policy-random", "overlap + random policy, random.seed(3)", policy_mix(11), pool=260,
      policy="random", random_seed=3, overlap=True))
add(W("overlap-page-16-tight", "overlap + page_size 16 + tight pool", tight(19, 6, 37, 60, 3),
      page_size=16, pool=320, decay_steps=10, overlap=True))
add(W("overlap-abort-running", "overlap: aborts of running requests",
      [dict(req(i, list(range(50 * i + 3, 50 * i + 33)), 30, i), abort=a)
       for i, a in enumerate([10, None, 12, 40, None])], overlap=True))


# ---------------------------------------------------------------- rules a replay must pin

def lpm_dedup():
    """Three requests share a new 40-token prefix ahead of an unrelated one: the in-batch check
    deprioritizes the second and third, so with two running slots lpm admits the first and the
    unrelated one."""
    rng = random.Random(26)
    prefix = toks(rng, 40)
    rs = [req(i, prefix + toks(rng, 6), 8, 0) for i in range(3)]
    rs.append(req(3, toks(rng, 20), 8, 0))
    return rs


add(W("retract-ties", "retraction among equal output counts: two requests admitted in the same "
      "pass under a decayed ratio, the one with the longer prompt goes first",
      [req(0, list(range(3, 13)), 100, 0), req(1, list(range(100, 112)), 60, 10),
       req(2, list(range(200, 220)), 60, 10)],
      pool=200, decay_steps=2))
add(W("lpm-in-batch-dedup", "lpm: requests sharing a new prefix with one ahead of them wait behind "
      "an unrelated one", lpm_dedup(), policy="lpm", max_running=2))
add(W("admission-boundary", "a request whose reservation equals what remains is refused (total < "
      "remaining, NO_TOKEN)", [req(0, list(range(3, 23)), 10, 0), req(1, list(range(100, 130)), 38, 0)],
      pool=100))

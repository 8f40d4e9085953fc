#!/usr/bin/env bash
# Reruns the figures of docs/ROUTING.md's "Flow control and admission" section: the burst-fc-*
# scenarios (one seeded run each; replication 0's calls), then per SLO class (llm-d priority
# band) the calls completed, shed at capacity or by the legacy admission, expired in the queue,
# evicted in flight, and the TTFT of the completed ones. Prints Markdown; writes the runs under $OUT.
# Usage: scripts/flow-control-experiments.sh [OUT]   (a few seconds, release build)
source "$(dirname "$0")/experiment-setup.sh"
variants="off on-defaults on-ttl5s on-evict"
run_variants burst-fc $variants
echo "| admission | class (llm-d priority) | calls | completed | shed (429) | expired (429) | evicted (429) | TTFT mean (ms) | TTFT p50 (ms) | TTFT p99 (ms) | TTFT max (ms) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for v in $variants; do
    python3 - "$OUT/$v/calls.jsonl" "$v" <<'PY'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1])]
calls = [c for c in lines[1:] if c["replication"] == 0]  # line 1 is the header
priority = {"critical": 2, "standard": 1, "batch": -1, "background": -2}
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")
for client in ["critical", "standard", "batch", "background"]:
    mine = [c for c in calls if c["client"] == client]
    done = [c["token_latency_us"][0] / 1000 for c in mine if c["fate"] == "completed"]
    dropped = [c for c in mine if isinstance(c["fate"], dict) or c["fate"] not in ("completed",)]
    reason = lambda c: c.get("reason", "")
    shed = sum(1 for c in mine if c["fate"] == "dropped" and ("saturated" in reason(c)))
    expired = sum(1 for c in mine if c["fate"] == "dropped" and "ttl-expired" in reason(c))
    evicted = sum(1 for c in mine if c["fate"] == "dropped" and reason(c).startswith("router_429: evicted:"))
    other = len(mine) - len(done) - shed - expired - evicted
    assert other == 0, (client, other)
    mean = sum(done) / len(done) if done else float("nan")
    print(f"| `{sys.argv[2]}` | {client} ({priority[client]:+d}) | {len(mine)} | {len(done)} | {shed} | {expired} | {evicted} | "
          f"{mean:.0f} | {pct(done, 0.5):.0f} | {pct(done, 0.99):.0f} | {max(done):.0f} |")
PY
done

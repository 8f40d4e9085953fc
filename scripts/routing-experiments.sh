#!/usr/bin/env bash
# Reruns every figure of docs/ROUTING.md's end-to-end section: the eight-instance chat scenarios
# under each router (5 replications each, the frame's default), then compare-configs on the
# pairs the document discusses. Prints Markdown tables; writes the runs under $OUT.
# Usage: scripts/routing-experiments.sh [OUT]   (about a minute on 2 cores, release build)
source "$(dirname "$0")/experiment-setup.sh"
S=fixtures/scenarios/routing
variants="round-robin default epp-config optimized-baseline default-scrape-1s precise epp-config-precise"
run_variants chat-8 $variants
echo "| router | prefix-cache hits | TTFT mean (ms) | TTFT p99 (ms) | E2E mean (ms) | E2E p99 (ms) | ITL p99 (ms) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for v in $variants; do
    python3 - "$OUT/$v/result.json" "$v" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["estimates"]
def f(key, scale=1.0, digits=1):
    x = e.get(key)
    if x is None:
        return "withheld"
    hw = x.get("half_width")
    return f"{x['mean'] * scale:.{digits}f} ± {hw * scale:.{digits}f}" if hw is not None else f"{x['mean'] * scale:.{digits}f}"
print(f"| `{sys.argv[2]}` | {f('prefix_cache_hit_rate', 100)} % | {f('ttft_ms.mean')} | {f('ttft_ms.p99')} | {f('e2e_ms.mean', digits=0)} | {f('e2e_ms.p99', digits=0)} | {f('itl_ms.p99')} |")
PY
done
for pair in "round-robin default" "round-robin epp-config" "default epp-config" "default optimized-baseline" "default default-scrape-1s" "default precise" "epp-config epp-config-precise"; do
    set -- $pair
    echo
    echo "compare-configs chat-8-$1 chat-8-$2:"
    echo '```'
    "$B" compare-configs "$S/chat-8-$1.yaml" "$S/chat-8-$2.yaml" 2>/dev/null \
        | awk 'NR <= 4 || /^(ttft_ms[.](mean|p99)|e2e_ms[.](mean|p99)|itl_ms[.]p99|prefix_cache_hit_rate) /'
    echo '```'
done

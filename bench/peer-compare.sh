#!/bin/sh
# Side by side with the fastest public peer simulator, inference-lab (Rust, crates.io; see
# docs/PERFORMANCE.md): install it from crates.io into a scratch folder, run it and blis-actor on
# the reference workload of issue 13 (Llama-3.1-8B on one H100, Poisson 8 req/s, 512 input /
# 128 output tokens, max_num_seqs 256, one run, one thread) at each request count, and print the
# wall-time and peak-memory ratios.
#
# Usage: bench/peer-compare.sh [SCRATCH_DIR] [REQUESTS...]   (default: /tmp/blis-peer, 10000 100000)
# Needs: cargo (network access to crates.io once), GNU time (/usr/bin/time), a release build of
# blis-actor (built here if missing).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
scratch=${1:-/tmp/blis-peer}
[ $# -gt 0 ] && shift
counts=${*:-10000 100000}
peer_version=1.0.0
mkdir -p "$scratch"
target=${CARGO_TARGET_DIR:-$here/target}
blis="$target/release/blis-actor"
if [ ! -x "$blis" ]; then
    (cd "$here" && cargo build --release -p blis-actor)
fi
peer="$scratch/peer/bin/inference-lab"
if [ ! -x "$peer" ]; then
    echo "installing inference-lab $peer_version into $scratch/peer (once) ..." >&2
    cargo install inference-lab --version "$peer_version" --locked --root "$scratch/peer" \
        --target-dir "$scratch/peer-build" >&2
fi

# The peer's model config: the same limits as blis-actor's reference case (vLLM 0.15.1's
# defaults on H100 but max_num_seqs 256). Its roofline has no prefix cache hits on synthetic
# lengths, no CPU/host time, no CUDA-graph padding and no asynchronous scheduling.
cat > "$scratch/model.toml" <<TOML
model = "llama-3.1-8b-instruct"

[scheduler]
max_num_batched_tokens = 8192
max_num_seqs = 256
policy = "fcfs"
enable_chunked_prefill = true
block_size = 16

[hardware.h100]
tp = 1
TOML

# "elapsed_s peak_kib" of a command, from GNU time.
measure() {
    /usr/bin/time -f "%e %M" -o "$scratch/time.txt" "$@" > "$scratch/stdout.txt" 2> "$scratch/stderr.txt" || {
        cat "$scratch/stderr.txt" >&2
        exit 1
    }
    cat "$scratch/time.txt"
}

printf '| requests | blis-actor wall s | blis-actor peak MiB | inference-lab wall s | inference-lab peak MiB | wall ratio (peer / blis) | memory ratio (peer / blis) |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|\n'
for n in $counts; do
    cat > "$scratch/workload-$n.toml" <<TOML
arrival_pattern = "poisson"
arrival_rate = 8.0
num_requests = $n
seed = 1

[input_len_dist]
type = "fixed"
value = 512

[output_len_dist]
type = "fixed"
value = 128
TOML
    case $n in
        10000) case_name=reference-10k ;;
        100000) case_name=reference-100k ;;
        1000000) case_name=reference-1m ;;
        *) echo "no blis-actor bench case for $n requests (10000, 100000, 1000000)" >&2; exit 2 ;;
    esac
    "$blis" bench "$case_name" --print-scenario > "$scratch/scenario-$n.yaml"
    set -- $(measure "$blis" run "$scratch/scenario-$n.yaml" --threads 1 --quiet --out "$scratch/blis-$n")
    blis_s=$1 blis_kib=$2
    set -- $(measure "$peer" -c "$scratch/model.toml" --hardware h100 -w "$scratch/workload-$n.toml" -q \
        -o "$scratch/peer-$n.json")
    peer_s=$1 peer_kib=$2
    awk -v n="$n" -v bs="$blis_s" -v bk="$blis_kib" -v ps="$peer_s" -v pk="$peer_kib" 'BEGIN {
        printf "| %d | %.2f | %.1f | %.2f | %.1f | %.2f | %.2f |\n", n, bs, bk / 1024, ps, pk / 1024, ps / bs, pk / bk
    }'
done

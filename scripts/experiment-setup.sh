# Sourced by the experiment scripts: builds the release binary and runs each scenario variant.
# After sourcing: $OUT (the first argument, or a fresh temporary folder) holds the runs, $B is
# the binary; `run_variants PREFIX V...` runs fixtures/scenarios/routing/PREFIX-V.yaml for each
# V into $OUT/V (its stdout and stderr in $OUT/V.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
cargo build --release --quiet
B=${CARGO_TARGET_DIR:-target}/release/blis-actor

run_variants() {
    local prefix=$1
    shift
    for v in "$@"; do
        "$B" run "fixtures/scenarios/routing/$prefix-$v.yaml" --out "$OUT/$v" --quiet > "$OUT/$v.txt" 2>&1
    done
}

#!/usr/bin/env bash
# A real Slurm run of a sharded sweep, for CI: install Slurm and munge from Debian's packages
# (when absent), start a single-node cluster on this machine (munged, slurmctld, slurmd on
# localhost), submit a small sweep as a job array of 4 tasks, wait, merge the shards and check
# the table against the same sweep run in one process (byte for byte).
#
# Usage: scripts/ci/slurm-sweep.sh BLIS_ACTOR_BINARY
# Fails, saying why, when the cluster cannot start or the job does not finish; never skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="$(realpath "${1:?usage: slurm-sweep.sh BLIS_ACTOR_BINARY}")"
spec="$PWD/fixtures/sweep/shards.yaml"
shards=4

fail() {
    echo "slurm-sweep: FAILED: $*" >&2
    for log in "$work"/*.log; do
        [ -f "$log" ] && { echo "--- $log" >&2; tail -n 30 "$log" >&2; }
    done
    exit 1
}

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    echo "slurm-sweep: installing slurmctld, slurmd, slurm-client and munge from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || { echo "slurm-sweep: FAILED: apt-get update" >&2; exit 1; }
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null \
        || { echo "slurm-sweep: FAILED: apt-get install slurmctld slurmd slurm-client munge" >&2; exit 1; }
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/blis-actor-slurm.XXXXXX")"
chmod 755 "$work"
pids=()
cleanup() {
    # Stop only the daemons this script started, by their process ids.
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    rm -rf "$work"
}
trap cleanup EXIT

# munge: a key of this run's own, a socket in the work folder.
mkdir -p "$work/munge" "$work/munge-key"
dd if=/dev/urandom of="$work/munge-key/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$work/munge" "$work/munge-key"
chmod 755 "$work/munge"
chmod 700 "$work/munge-key"
chmod 400 "$work/munge-key/munge.key"
socket="$work/munge/munge.socket"
runuser -u munge -- munged --key-file="$work/munge-key/munge.key" --socket="$socket" \
    --pid-file="$work/munge/munged.pid" --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed" \
    || fail "munged did not start"
pids+=("$(cat "$work/munge/munged.pid")")
cp "$work/munge/munged.log" "$work/munged.log" 2>/dev/null || true

node="$(hostname -s)"
cpus="$(nproc)"
mkdir -p "$work/state" "$work/spool"
cat > "$work/slurm.conf" <<CONF
ClusterName=blis-ci
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$work/slurm.conf"

slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
for _ in $(seq 50); do [ -s "$work/slurmctld.pid" ] && break; sleep 0.1; done
[ -s "$work/slurmctld.pid" ] || fail "slurmctld wrote no pid file"
pids+=("$(cat "$work/slurmctld.pid")")
slurmd -f "$SLURM_CONF" -N "$node" || fail "slurmd did not start"
for _ in $(seq 50); do [ -s "$work/slurmd.pid" ] && break; sleep 0.1; done
[ -s "$work/slurmd.pid" ] || fail "slurmd wrote no pid file"
pids+=("$(cat "$work/slurmd.pid")")

ready=""
for _ in $(seq 60); do
    state="$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)"
    case "$state" in idle*|mixed*|allocated*) ready=yes; break ;; esac
    sleep 0.5
done
[ -n "$ready" ] || fail "the node did not become idle (sinfo: ${state:-no answer})"
echo "slurm-sweep: single-node cluster up ($node, $cpus CPUs): $(sinfo -h -o '%P %a %D %T')"

# The job array: task i runs shard i of 4 (from SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT).
cat > "$work/sweep.sbatch" <<JOB
#!/usr/bin/env bash
#SBATCH --job-name=blis-sweep
#SBATCH --array=0-$((shards - 1))
#SBATCH --cpus-per-task=1
#SBATCH --output=$work/task-%a.out
exec "$binary" sweep "$spec" --out "$work/shards/\$SLURM_ARRAY_TASK_ID" --threads 1 --quiet
JOB
mkdir -p "$work/shards"
timeout 150 sbatch --wait "$work/sweep.sbatch" > "$work/sbatch.log" 2>&1 \
    || fail "the job array did not finish: $(cat "$work/sbatch.log"; cat "$work"/task-*.out 2>/dev/null)"
echo "slurm-sweep: $(head -n 1 "$work/sbatch.log"), every task done"
for i in $(seq 0 $((shards - 1))); do
    [ -f "$work/shards/$i/shard.json" ] || fail "task $i wrote no shard: $(cat "$work/task-$i.out" 2>/dev/null)"
done

"$binary" merge "$work"/shards/* --out "$work/merged" --quiet > "$work/merge.out" || fail "merge failed"
"$binary" sweep "$spec" --out "$work/whole" --quiet > /dev/null || fail "the one-process sweep failed"
diff -r "$work/merged" "$work/whole" > "$work/diff.log" \
    || fail "the merged sweep differs from the one-process sweep: $(head -n 20 "$work/diff.log")"
rows="$(($(wc -l < "$work/merged/sweep.csv") - 1))"
ran="$(tail -n +2 "$work/merged/sweep.csv" | cut -d, -f4 | grep -c '^ran$' || true)"
[ "$rows" -eq 6 ] && [ "$ran" -eq 6 ] || fail "sweep.csv has $rows rows, $ran of them ran (expected 6 and 6)"
echo "slurm-sweep: $shards array tasks merged into $rows points, byte-identical to the one-process sweep"
echo "slurm-sweep: ok"

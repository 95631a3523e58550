#!/usr/bin/env bash
# Slurm scale-out on a real (single-node) cluster, run by ctest as `slurm_sweep`:
# starts munged, slurmctld and slurmd from Debian's munge and slurm-wlm packages
# on localhost (private config, ports, state and socket under a temporary
# directory; every daemon started here is stopped here, by its pid), submits a
# small CPU scenario in 4 shards with scripts/slurm/submit.sh, waits for the
# merge job, and asserts that the merged report has exactly the rows (case,
# backend, status) of an unsharded run, and that report.html and summary.txt
# were written.
# Where Slurm or munge are not installed or cannot start, prints
# "SKIPPED: <why>" and exits 77 (ctest's SKIP_RETURN_CODE).
# Usage: tests/slurm_test.sh ATTNBENCH_BINARY
set -euo pipefail
bin=$(cd "$(dirname "${1:?usage: tests/slurm_test.sh ATTNBENCH_BINARY}")" && pwd)/$(basename "$1")
src=$(cd "$(dirname "$0")/.." && pwd)

skip() {
  echo "SKIPPED: slurm_sweep: $*"
  echo "SKIPPED: install Debian's slurm-wlm and munge (ci/install_slurm.sh) to run this test"
  exit 77
}
for tool in munged slurmctld slurmd sbatch squeue sinfo scontrol python3; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attnbench_slurm.XXXXXX")
chmod 700 "$tmp"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ ${KEEP_SLURM_TMP:-0} == 1 ]]; then echo "slurm_sweep: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
logs() {
  local f
  for f in "$tmp"/log/*.log; do echo "--- $f"; tail -n 30 "$f"; done
}

# ---- munge: a private key and socket
mkdir -p "$tmp/munge" "$tmp/log" "$tmp/state" "$tmp/spool/$(hostname -s)"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.sock" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed" \
  >"$tmp/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $tmp/munge/munge.sock ]] && break; sleep 0.1; done
[[ -S $tmp/munge/munge.sock ]] || { cat "$tmp/log/munged.out"; skip "munged did not start (see above)"; }

# ---- slurm.conf: one node (this host), private ports
user=$(id -un)
node=$(hostname -s)
cpus=$(nproc)
base=$((20000 + RANDOM % 20000))
cat >"$tmp/slurm.conf" <<CONF
ClusterName=attnbenchtest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=attnbench Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" >"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 60); do
  if sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then up=1; break; fi
  sleep 0.5
done
if [[ $up != 1 ]]; then
  cat "$tmp"/log/*.out
  logs
  skip "slurmctld/slurmd did not bring node $node up within 30 s (see the logs above)"
fi
echo "slurm_sweep: single-node Slurm up: $(sinfo -h -o '%P %D %T %C')"

# ---- the sweep: 6 tiny CPU cases, 4 shards, and the same run unsharded
cat >"$tmp/scenario.json" <<'JSON'
{"name": "slurm-test", "description": "six tiny cpu cases for the Slurm scale-out test",
 "base": {"batch": 1, "heads_q": 2, "heads_kv": 1, "head_dim": 16, "seq": 48, "dtype": "bf16"},
 "axes": {"mask": [[], [{"kind": "causal"}], [{"kind": "sliding_window", "left": 8, "right": 0}]],
          "seq": [32, 48]}}
JSON
run_args=(--backends cpu --no-timing)
ATTNBENCH_BIN=$bin "$src/scripts/slurm/submit.sh" "$tmp/scenario.json" 4 "$tmp/sweep" "${run_args[@]}"
read -r shard_job merge_job <"$tmp/sweep/jobs.txt"
"$bin" run "$tmp/scenario.json" "${run_args[@]}" --out "$tmp/unsharded" >"$tmp/log/unsharded.log" 2>&1

done_ok=0
for _ in $(seq 600); do
  if [[ -z $(squeue -h -j "$shard_job,$merge_job" 2>/dev/null) ]]; then done_ok=1; break; fi
  sleep 0.5
done
if [[ $done_ok != 1 ]]; then
  squeue
  logs
  echo "slurm_sweep: FAIL: jobs $shard_job/$merge_job still queued after 300 s"
  exit 1
fi
cat "$tmp/sweep/logs/merge.log" || true
for f in report.json report.html summary.txt; do
  [[ -s $tmp/sweep/$f ]] || { logs; cat "$tmp"/sweep/logs/*.log; echo "slurm_sweep: FAIL: no $f"; exit 1; }
done
python3 - "$tmp/unsharded/report.json" "$tmp/sweep/report.json" <<'PY'
import json, sys
def rows(path):
    return sorted((r["case_id"], r["backend"], r["status"]) for r in json.load(open(path))["results"])
want, got = rows(sys.argv[1]), rows(sys.argv[2])
if want != got:
    print("slurm_sweep: FAIL: merged rows differ from the unsharded run")
    print("  unsharded:", want)
    print("  merged:   ", got)
    sys.exit(1)
if len(want) != 6 or any(s != "pass" for _, _, s in want):
    print("slurm_sweep: FAIL: expected 6 passing rows, got", want)
    sys.exit(1)
print(f"slurm_sweep: OK: merged report of 4 Slurm shards has exactly the {len(want)} rows of the unsharded run")
PY

#!/usr/bin/env bash
# Run one attnbench sweep on a Slurm cluster (docs/scale-out.md): an array job
# with one shard per task (`attnbench run --shard $SLURM_ARRAY_TASK_ID/N`), and a
# merge job that starts when every shard has ended (afterany) and writes
# OUT_DIR/report.json, report.html and summary.txt.
#
#   scripts/slurm/submit.sh SCENARIO SHARDS OUT_DIR [attnbench run options...]
#
# OUT_DIR must be on a file system every node sees. The attnbench binary is
# $ATTNBENCH_BIN, else build/attnbench, else `attnbench` on PATH. Extra sbatch
# options for the shard tasks only (GPUs, partition, time): ATTNBENCH_SHARD_SBATCH_ARGS,
# e.g. "--partition=gpu --gres=gpu:1 --time=02:00:00"; for the merge job:
# ATTNBENCH_MERGE_SBATCH_ARGS. Slurm's own SBATCH_* variables apply to both.
# Prints the two job ids; exit 2 on bad usage, an OUT_DIR holding '%' or '\'
# (Slurm would read it as a file-name pattern) or a log folder that cannot be
# written; a failing sbatch fails the script.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -lt 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
scenario=$1 shards=$2 out=$3
shift 3
if ! [[ $shards =~ ^[1-9][0-9]*$ ]]; then echo "submit.sh: SHARDS must be a positive integer, got '$shards'" >&2; exit 2; fi
bin=${ATTNBENCH_BIN:-}
if [[ -z $bin ]]; then
  if [[ -x $here/../../build/attnbench ]]; then bin=$here/../../build/attnbench; else bin=$(command -v attnbench || true); fi
fi
[[ -n $bin && -x $bin ]] || { echo "submit.sh: no attnbench binary (set ATTNBENCH_BIN)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
# A scenario name (scenarios/NAME.json) stays a name; a path becomes absolute.
[[ -e $scenario ]] && scenario=$(cd "$(dirname "$scenario")" && pwd)/$(basename "$scenario")
# Slurm reads --output as a pattern (%j, %a, ... and '\' turns the patterns off),
# so an OUT_DIR holding '%' or '\' would send the logs elsewhere: refused.
case $out in
  *%* | *\\*) echo "submit.sh: OUT_DIR '$out' holds '%' or '\\', which Slurm reads as a file-name pattern; use another folder" >&2; exit 2 ;;
esac
mkdir -p "$out/logs" 2>/dev/null || { echo "submit.sh: cannot create $out/logs (the jobs' logs go there)" >&2; exit 2; }
out=$(cd "$out" && pwd)
# The jobs write their logs there: a folder they cannot write would lose every log
# (and Slurm would run nothing visible), so check before submitting.
probe="$out/logs/.write-test.$$"
{ : >"$probe" && rm -f "$probe"; } 2>/dev/null || { echo "submit.sh: $out/logs is not writable (the jobs' logs go there)" >&2; exit 2; }

# shellcheck disable=SC2086  # the *_SBATCH_ARGS are word lists on purpose
shard_job=$(sbatch --parsable --array="0-$((shards - 1))" --job-name=attnbench-shard \
  --output="$out/logs/shard-%a.log" ${ATTNBENCH_SHARD_SBATCH_ARGS:-} \
  "$here/shard.sbatch" "$bin" "$scenario" "$shards" "$out" "$@")
shard_job=${shard_job%%;*}
# shellcheck disable=SC2086
merge_job=$(sbatch --parsable --dependency="afterany:$shard_job" --job-name=attnbench-merge \
  --output="$out/logs/merge.log" ${ATTNBENCH_MERGE_SBATCH_ARGS:-} \
  "$here/merge.sbatch" "$bin" "$shards" "$out")
merge_job=${merge_job%%;*}
echo "attnbench: shards submitted as array job $shard_job (tasks 0-$((shards - 1)))"
echo "attnbench: merge submitted as job $merge_job (after every shard ends)"
echo "attnbench: results will be in $out/report.json, report.html and summary.txt; logs in $out/logs"
echo "$shard_job $merge_job" >"$out/jobs.txt"

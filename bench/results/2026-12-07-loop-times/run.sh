#!/usr/bin/env bash
# Why 4-rank broadcasts of 16-64 B on 2 vCPUs are a coin toss at -n 20 (docs/bench.md, "Small
# messages on shared cores"; docs/performance.md, "Small messages: loops of the scheduler"):
# each rank's own loop times (--loop-times), braid and OpenMPI in one mpirun, 15 loops each.
# Then the same sweep of the four collectives with -n 20 and with --iters-small 1000, at 4 and
# 8 ranks. Usage: run.sh [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  git rev-parse --short HEAD 2>/dev/null || true
} >"$here/machine.txt"
rm -f "$here"/loops.rank*
"${mpi[@]}" -np 4 "$build/bin/braid" bench -b 16 -e 64 -f 4 -n 20 --repeats 15 -c 1 \
  --op broadcast --peer mpi --loop-times "$here/loops" >"$here/loops_table.txt" 2>&1
python3 "$here/per_rank.py" "$here"/loops.rank* >"$here/per_rank.txt"
for np in 4 8; do
  for n in 20 1000; do
    "${mpi[@]}" -np $np "$build/bin/braid" bench -b 16 -e 8K -f 4 -n 20 --iters-small $n \
      --repeats 3 -c 1 "${ops[@]}" --peer mpi >"$here/w${np}_small${n}.txt" 2>&1
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$here/machine.txt"

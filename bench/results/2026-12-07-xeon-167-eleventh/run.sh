#!/usr/bin/env bash
# Issue 35's collective tables, eleventh session (docs/performance.md, "Issue 35's collectives
# on the Xeon, eleventh session"): the commands of 2026-12-07-xeon-167/run.sh (2, 4 and 8 ranks
# under one mpirun each, braid / OpenMPI / limit program), each set into its own folder with
# its ratios.txt, then medians.txt over the small<K> sets:
#   small1..small3  --iters-small 1000: loops of 1000 calls up to 8 KiB (OSU's convention),
#                   -n 20 above (docs/bench.md, "Small messages on shared cores"), three times;
#   n20/            as the earlier sessions: -n 20 at every size;
#   pages4k/        as small<K>, with BRAID_CPU_HUGEPAGES=0: every bench buffer on 4 KiB pages,
#                   as a training job's tensors below 4 MiB are.
# Usage: run.sh [build dir (build)] [output folder (this one)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${2:-$here}
build=${1:-build}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)
tables() {  # out dir, extra mpirun arguments..., --, extra bench arguments...
  local out=$1
  shift
  local x=()
  while [[ $1 != -- ]]; do
    x+=("$1")
    shift
  done
  shift
  mkdir -p "$out"
  {
    grep -m1 "model name" /proc/cpuinfo
    grep -m1 "^model\s" /proc/cpuinfo
    echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
    git rev-parse --short HEAD 2>/dev/null || true
    echo "mpirun extra: ${x[*]:-}; bench extra: $*"
  } >"$out/machine.txt"
  "${mpi[@]}" "${x[@]}" -np 2 "$build/bin/braid" bench -b 16 -e 64M -f 4 -n 20 --repeats 5 -c 1 \
    "${ops[@]}" --peer mpi --peer limit "$@" -J "$out/w2.json" >"$out/w2.txt" 2>&1
  "${mpi[@]}" "${x[@]}" -np 4 "$build/bin/braid" bench -b 16 -e 16M -f 4 -n 20 --repeats 3 -c 1 \
    "${ops[@]}" --peer mpi --peer limit "$@" -J "$out/w4.json" >"$out/w4.txt" 2>&1
  "${mpi[@]}" "${x[@]}" -np 8 "$build/bin/braid" bench -b 16 -e 16M -f 4 -n 20 --repeats 3 -c 1 \
    "${ops[@]}" --peer mpi --peer limit "$@" -J "$out/w8.json" >"$out/w8.txt" 2>&1
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"
  python3 "$here/../2026-12-07-xeon-167/ratios.py" "$out" >"$out/ratios.txt"
}
for k in 1 2 3; do tables "$res/small$k" -- --iters-small 1000; done
tables "$res/n20" --
tables "$res/pages4k" -x BRAID_CPU_HUGEPAGES=0 -- --iters-small 1000
python3 "$here/medians.py" "$res"/small1 "$res"/small2 "$res"/small3 >"$res/medians.txt"

#!/usr/bin/env bash
# all_gather's kernel copy from 8 KiB a rank (docs/performance.md, same title): two braid
# binaries alternated, built before and after the change that gives all_gather a kernel-copy
# threshold of its own (8 KiB a rank with a CPU per rank), at 2, 4 and 8 ranks under mpirun, with
# OpenMPI and the limit program in the same job, all_gather only, 8 KiB to 256 KiB in all.
# Usage: run.sh BEFORE AFTER [rounds (2)] [out dir (this folder)]
set -euo pipefail
before=$1 after=$2 rounds=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
out=${4:-$here}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_gather)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
} >"$out/machine.txt"
for round in $(seq "$rounds"); do
  for np in 2 4 8; do
    for which in before after; do
      bin=$before
      [[ $which == after ]] && bin=$after
      "${mpi[@]}" -np "$np" "$bin" bench -b 8K -e 256K -f 2 -n 100 --repeats 3 -c 1 "${ops[@]}" \
        --peer mpi --peer limit >"$out/np${np}_${which}_r${round}.txt" 2>&1
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"

#!/usr/bin/env bash
# Two braid binaries alternated under mpirun, with OpenMPI and the limit program in the same
# job (--peer mpi --peer limit), for the before / after figures of a change to the collectives
# (docs/performance.md names each use). Writes OUT/machine.txt and OUT/np<N>_<before|after>_r<K>.txt;
# `python3 bench/ab_summarize.py OUT` prints the medians over the rounds.
# Usage: ab_mpirun.sh BEFORE AFTER ROUNDS OUT [braid bench arguments...]
#   AB_RANKS  the rank counts, one mpirun each (default "2 4 8")
set -euo pipefail
before=$1 after=$2 rounds=$3 out=$4
shift 4
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  echo "bench arguments: $*"
} >"$out/machine.txt"
for round in $(seq "$rounds"); do
  for np in ${AB_RANKS:-2 4 8}; do
    for which in before after; do
      bin=$before
      [[ $which == after ]] && bin=$after
      "${mpi[@]}" -np "$np" "$bin" bench "$@" --peer mpi --peer limit \
        >"$out/np${np}_${which}_r${round}.txt" 2>&1
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"

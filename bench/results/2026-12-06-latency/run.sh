#!/usr/bin/env bash
# Small messages on the shm backend before and after the small-broadcast path (issue 35 item 2),
# in one sitting: the two binaries' runs alternate, each run interleaving braid's, OpenMPI's and
# the limit program's timed loops. Usage, from the repository root:
#   bash bench/results/2026-12-06-latency/run.sh OUT BEFORE AFTER
# BEFORE: build/bin/braid built at d581182 (the commit this work started from), AFTER: at
# 93299e6 (Release builds, scripts/lib.sh braid_configure).
set -u
out=$1 before=$2 after=$3
mkdir -p "$out"
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none"
ops="--op all_reduce --op all_gather --op reduce_scatter --op broadcast"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo)" > "$out/info.txt"
for round in 1 2; do
  for which in before after; do
    bin=$before
    [[ $which == after ]] && bin=$after
    # The brief's 4-rank small broadcast.
    $mpi -np 4 "$bin" bench -b 16 -e 1K -f 4 -n 200 --op broadcast --peer mpi --peer limit \
      > "$out/np4-bcast-$which-$round.txt" 2>&1
    $mpi -np 2 "$bin" bench -b 16 -e 1M -f 4 -n 100 --repeats 5 -c 1 $ops --peer mpi --peer limit \
      > "$out/np2-$which-$round.txt" 2>&1
    $mpi -np 4 "$bin" bench -b 16 -e 1M -f 4 -n 50 --repeats 3 -c 1 $ops --peer mpi --peer limit \
      > "$out/np4-$which-$round.txt" 2>&1
    # Small messages on 2 ranks with all_reduce not the first op: the first sizes of a job's
    # first op are slowed by its start (all libraries alike; see performance.md).
    $mpi -np 2 "$bin" bench -b 16 -e 4K -f 4 -n 200 --repeats 5 -c 1 --op broadcast \
      --op all_reduce --op reduce_scatter --op all_gather --peer mpi --peer limit \
      > "$out/np2-small-$which-$round.txt" 2>&1
    # The brief's 8-rank table.
    $mpi -np 8 "$bin" bench -b 16 -e 4M -f 16 -n 10 --repeats 3 $ops --peer mpi --peer limit \
      > "$out/np8-$which-$round.txt" 2>&1
  done
done
echo "# done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/info.txt"

#!/usr/bin/env bash
# Where issue 3's targets stand on this machine: the bare data path and braid beside OpenMPI.
# Usage, from the repository root after a Release build: bash bench/results/2026-12-03-intel-state/run.sh OUT
set -u
B=build/bin
out=$1
mkdir -p $out
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none"
{
  echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo)"
  $B/cacheline_probe barrier | tail -1
  $B/cacheline_probe allreduce 16 | tail -2
  $B/cacheline_probe allreduce 1048576 | tail -2
  $B/cacheline_probe allreduce 67108864 20 | tail -2
} > $out/probe.txt 2>&1
$mpi -np 2 $B/braid bench -b 16 -e 16 -n 20000 -w 1000 -c 0 --op all_reduce --peer mpi > $out/np2-16B.txt 2>&1
for R in 0 1; do
  $mpi -np 2 $B/braid bench -b 1M -e 64M -f 64 -n 20 -w 5 -c 1 -R $R --op all_reduce --op all_gather --op reduce_scatter --peer mpi > $out/np2-R$R.txt 2>&1
done
$mpi -np 4 $B/braid bench -b 16 -e 16 -n 5000 -w 500 -c 0 --op all_reduce --peer mpi > $out/np4-16B.txt 2>&1
$mpi -np 4 $B/braid bench -b 1M -e 64M -f 64 -n 10 -w 3 -c 1 -R 0 --op all_reduce --peer mpi > $out/np4-R0.txt 2>&1
echo "# done $(date -u +%FT%TZ)" >> $out/probe.txt

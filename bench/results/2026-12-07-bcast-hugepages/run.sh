#!/usr/bin/env bash
# Why OpenMPI's in-place broadcasts of 256 KiB beat braid's at 4 and 8 ranks inside issue 35's
# sweeps (-e 16M) and not elsewhere (docs/performance.md, "In-place broadcasts of 256 KiB and
# huge pages"): the bench's buffers are as large as -e, and braid's cpu allocator puts blocks
# of 4 MiB and more on transparent huge pages, where OpenMPI's single copy (CMA) pins a page
# per 2 MiB. braid's small-broadcast path copies through its ring instead. Each cell: one
# mpirun, braid and OpenMPI interleaved; twice.
#   pages4k_*   -e 1M: 1 MiB buffers, 4 KiB pages
#   huge_*      -e 16M: 16 MiB buffers, huge pages
#   *_kc        BRAID_SHM_BCAST_SHARED_BYTES=64K: braid's 256 KiB broadcasts take the kernel
#               copy (process_vm_readv) instead of the ring
# Usage: run.sh [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  git rev-parse --short HEAD 2>/dev/null || true
} >"$here/machine.txt"
for np in 4 8; do
  for round in 1 2; do
    for e in 1M 16M; do
      for path in ring kc; do
        x=()
        [[ $path == kc ]] && x=(-x BRAID_SHM_BCAST_SHARED_BYTES=64K)
        name=pages4k
        [[ $e == 16M ]] && name=huge
        "${mpi[@]}" "${x[@]}" -np $np "$build/bin/braid" bench -b 64K -e $e -f 4 -n 20 \
          --repeats 3 -c 1 --op broadcast --peer mpi \
          >"$here/np${np}_${name}_${path}_r${round}.txt" 2>&1
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$here/machine.txt"
# The 256 KiB rows: busbw GB/s, out of place / in place, braid and OpenMPI.
for f in "$here"/np*_r*.txt; do
  printf '%-28s' "$(basename "$f" .txt)"
  awk '/^# Collective test: broadcast \(braid shm\)/ {l="braid"} /^# Collective test: broadcast \(mpi\)/ {l="mpi"}
       /^ +262144 +65536 +float/ {printf "  %s %s/%s", l, $8, $12}' "$f"
  echo
done >"$here/summary.txt"
# Then the ring against the kernel copy at 3, 4 and 5 ranks, 64-256 KiB, on 4 KiB pages
# (buffers of 256 KiB): BRAID_SHM_BCAST_SHARED_BYTES=256K (the default) and 32K.
for np in 3 4 5; do
  for round in 1 2; do
    for lim in 256K 32K; do
      "${mpi[@]}" -x BRAID_SHM_BCAST_SHARED_BYTES=$lim -np $np "$build/bin/braid" bench -b 64K \
        -e 256K -f 2 -n 20 --repeats 5 -c 1 --op broadcast --peer mpi \
        >"$here/small_np${np}_lim${lim}_r${round}.txt" 2>&1
    done
  done
done
for f in "$here"/small_np*.txt; do
  printf '%-26s' "$(basename "$f" .txt)"
  awk '/^# Collective test: broadcast \(braid shm\)/ {l="braid"} /^# Collective test: broadcast \(mpi\)/ {l="mpi"}
       /^ +[0-9]+ +[0-9]+ +float/ {printf "  %s %s %s/%s", l, $1/1024 "K", $8, $12}' "$f"
  echo
done >"$here/summary_small.txt"

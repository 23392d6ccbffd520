#!/usr/bin/env bash
# The kernel copy against the staged path on buffers of 4 KiB pages and of huge pages
# (docs/performance.md, "The kernel copy on 4 KiB pages"): all_reduce and reduce_scatter of
# 2-64 MiB at 2 and 4 ranks, braid's default (the kernel copy from 2 MiB; 32 MiB results at most
# where ranks share CPUs) against BRAID_SHM_KERNEL_COPY_BYTES=0, with the bench's buffers on
# huge pages (-e 64M) and on 4 KiB pages (BRAID_CPU_HUGEPAGES=0), one mpirun each, OpenMPI in
# the same job. summary.txt: busbw GB/s, out of place / in place.
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
: >"$here/summary.txt"
for np in 2 4; do
  for pages in huge 4k; do
    for kc in 32768 0; do
      x=(-x BRAID_SHM_KERNEL_COPY_BYTES=$kc)
      [[ $pages == 4k ]] && x+=(-x BRAID_CPU_HUGEPAGES=0)
      f="$here/np${np}_${pages}_kc${kc}.txt"
      "${mpi[@]}" "${x[@]}" -np $np "$build/bin/braid" bench -b 2M -e 64M -f 2 -n 5 --repeats 3 \
        -c 1 --op all_reduce --op reduce_scatter --peer mpi >"$f" 2>&1
      printf '%-22s' "np$np $pages kc=$kc" >>"$here/summary.txt"
      awk '/^# Collective test: .* \(braid shm\)/ {op=$4; lib="braid"}
           /^# Collective test: .* \(mpi\)/ {op=$4; lib="mpi"}
           /^ +[0-9]+ +[0-9]+ +float/ {printf " %s:%s%dM %s/%s", lib, substr(op,1,2), $1/1048576, $8, $12}' \
        "$f" >>"$here/summary.txt"
      echo >>"$here/summary.txt"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$here/machine.txt"
# The change that followed (a rank declines the kernel copy for all_reduce / reduce_scatter of
# 8 MiB and more a rank where its buffers are not on huge pages): run_ab.sh BEFORE AFTER.

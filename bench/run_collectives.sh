#!/usr/bin/env bash
# Measures all_reduce, all_gather and reduce_scatter with 2 and 4 ranks from 16 B to 64 MiB
# for braid (shm backend; ordinary buffers, then -R 1 buffers from the shm arena), OpenMPI
# (braid bench --peer mpi under mpirun) and Gloo (torch, bench/collectives_vs_gloo.py), and the
# machine's own floor (bench/cacheline_probe: a 2-process barrier round and a bare 1 MiB
# all_reduce data path) and the CPU steal time of the run (a VM's slow phases). Tables
# go to OUT (default bench-collectives-<date>/); the summary is in docs/performance.md
# ("Collectives"). A measurement, not a test.
#   bench/run_collectives.sh [BUILD_DIR] [OUT_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=${2:-bench-collectives-$(date +%Y%m%d-%H%M%S)}
braid=$build/bin/braid
mkdir -p "$out"
sweep=(-b 16 -e 64M -f 4 -n 20 -w 5 -c 0 --op all_reduce --op all_gather --op reduce_scatter)
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

{
  echo "# $(date -u +%FT%TZ) $(uname -srm)"
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc)"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# mpirun: $(mpirun --version 2>&1 | head -1)"
  echo "# floor before: $("$build/bin/cacheline_probe" barrier)"
  "$build/bin/cacheline_probe" allreduce 1048576 | sed 's/^/# bare data path: /'
} >"$out/machine.txt"
# CPU time the hypervisor gave to others (steal) over the run: a VM's slow phases show here.
read -r -a stat0 < <(head -1 /proc/stat)

for n in 2 4; do
  echo "== braid shm, $n ranks" >&2
  "$braid" bench --nproc "$n" "${sweep[@]}" -J "$out/braid_np$n.json" >"$out/braid_np$n.txt"
  echo "== braid shm, $n ranks, buffers in the shm arena (-R 1)" >&2
  "$braid" bench --nproc "$n" "${sweep[@]}" -R 1 -J "$out/braid_shared_np$n.json" \
    >"$out/braid_shared_np$n.txt"
  echo "== braid shm + OpenMPI (--peer mpi), $n ranks" >&2
  "${mpi[@]}" -np "$n" "$braid" bench "${sweep[@]}" --peer mpi -J "$out/mpi_np$n.json" \
    >"$out/mpi_np$n.txt"
  echo "== gloo (torch), $n ranks" >&2
  /usr/bin/python3 "$here/collectives_vs_gloo.py" --nproc "$n" -b 16 -e 64M -f 4 -n 20 -w 5 \
    --op all_reduce --op all_gather --op reduce_scatter >"$out/gloo_np$n.txt"
  echo "# load average after np=$n: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
done
{
  echo "# floor after: $("$build/bin/cacheline_probe" barrier)"
  "$build/bin/cacheline_probe" allreduce 1048576 | sed 's/^/# bare data path: /'
} >>"$out/machine.txt"
read -r -a stat1 < <(head -1 /proc/stat)
awk -v a="${stat0[*]:1}" -v b="${stat1[*]:1}" 'BEGIN {
  split(a, x); split(b, y); for (i = 1; i <= 8; i++) t += y[i] - x[i]  # user..steal
  printf "# steal during the run: %.1f%% of CPU time\n", (t > 0 ? 100 * (y[8] - x[8]) / t : 0)
}' >>"$out/machine.txt"
echo "results in $out" >&2

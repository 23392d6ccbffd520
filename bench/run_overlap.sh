#!/usr/bin/env bash
# Async calls against blocking ones with computation in between (bench/overlap_bench.cc says
# what each row is; docs/performance.md, "Async calls overlap"): 2 ranks on one node over shm
# and over ucx, and 2 "nodes" x 1 rank over ucx across two network namespaces (needs root and
# iproute2, like tests/multinode; skipped otherwise). Each with CPU work (PASSES passes) and
# with an idle host (IDLE, e.g. 3ms: a thread waiting while a device computes). Prints rank 0's
# lines. Builds nothing.
#   bash bench/run_overlap.sh [build dir (build)] [bytes (4194304)] [passes (200)] [idle (3ms)]
set -uo pipefail
build=${1:-build}
bytes=${2:-4194304}
passes=${3:-200}
idle=${4:-3ms}
braid=$build/bin/braid
bin=$build/bin/braid_bench_overlap
for f in "$braid" "$bin"; do
  [[ -x $f ]] || { echo "run_overlap.sh: $f not found (build braid_cli and braid_bench_overlap)" >&2; exit 1; }
done
export BRAID_NUM_THREADS=1
echo "# $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for work in "$passes" "$idle"; do
  for backend in shm ucx; do
    echo "## one node, 2 ranks, $backend, compute $work"
    "$braid" launch --nproc-per-node 2 "$bin" "$backend" "$bytes" "$work" | grep "^\[rank 0\]" |
      grep -v "done$" | sed 's/^\[rank 0\] //'
  done
  echo "## two network namespaces, 1 rank each, ucx, compute $work"
  NETNS_VERBOSE=1 bash "$(dirname "$0")/../tests/multinode/run_netns.sh" "$braid" 1 ok "$bin" ucx \
    "$bytes" "$work" 2>&1 | grep "^\[rank 0\]" | grep -v "done$" | sed 's/^\[rank 0\] //'
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# all_gather's kernel copy from 8 KiB a rank (docs/performance.md, same title): braid built
# before and after the change that gives all_gather a kernel-copy threshold of its own
# (75407b5), alternated at 2, 4 and 8 ranks (bench/ab_mpirun.sh), all_gather only.
# Usage: run.sh BEFORE AFTER [rounds (2)] [out dir (this folder)]; then
#   python3 bench/ab_summarize.py bench/results/2026-12-07-gather-kc > bench/results/2026-12-07-gather-kc/summary.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../ab_mpirun.sh" "$1" "$2" "${3:-2}" "${4:-$here}" \
  -b 8K -e 256K -f 2 -n 100 --repeats 3 -c 1 --op all_gather

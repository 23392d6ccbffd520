#!/usr/bin/env bash
# The staging rings' first turn (docs/performance.md, "The staging rings' first turn"): braid
# built before and after the change that maps every page a rank uses outside the arenas when it
# joins (d354b6e), alternated at 2, 4 and 8 ranks (bench/ab_mpirun.sh). Short loops, as the
# issue's tables use: at -n 20 a 4-rank all_reduce of 8 KiB runs on the 2 MiB ring's first turn.
# Usage: run.sh BEFORE AFTER [rounds (2)] [out dir (this folder)]; then
#   python3 bench/ab_summarize.py bench/results/2026-12-07-first-turn > bench/results/2026-12-07-first-turn/summary.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../ab_mpirun.sh" "$1" "$2" "${3:-2}" "${4:-$here}" \
  -b 4K -e 1M -f 2 -n 20 --repeats 3 -c 1 --op all_reduce \
  --op all_gather --op reduce_scatter --op broadcast

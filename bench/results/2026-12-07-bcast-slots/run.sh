#!/usr/bin/env bash
# Broadcasts of several data slots (docs/performance.md, same title): braid built before and
# after the change that lets the small-broadcast path take messages of several 4 KiB data slots
# (4834745), alternated at 2, 4 and 8 ranks (bench/ab_mpirun.sh), broadcast only.
# Usage: run.sh BEFORE AFTER [rounds (2)] [out dir (this folder)]; then
#   python3 bench/ab_summarize.py bench/results/2026-12-07-bcast-slots > bench/results/2026-12-07-bcast-slots/summary.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../ab_mpirun.sh" "$1" "$2" "${3:-2}" "${4:-$here}" \
  -b 4K -e 1M -f 2 -n 50 --repeats 3 -c 1 --op broadcast

#!/usr/bin/env bash
# Small broadcasts: the root asks for every line of the next data slot that a message of the
# same size writes, up to 512 B (docs/performance.md, "Small broadcasts: the next slot's
# lines"). BEFORE: braid built at ff7cef4; AFTER: at the commit that made the change.
#   np2_n20/          2 ranks, -n 20, 8 alternating rounds
#   np2_small1000/    2 ranks, --iters-small 1000, 8 rounds
#   np48_small1000/   4 and 8 ranks, --iters-small 1000, 4 rounds
#   upto4k_small1000/ a first version that asked for up to 4 KiB (every size up to a slot, also
#                     where the root was due to look for caught-up receivers), 2, 4 and 8
#                     ranks, 3 rounds: 1 KiB 0.83/0.68 of before at 2 ranks
# Usage: run.sh BEFORE AFTER [out dir (this folder)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 out=${3:-$here}
ab="$here/../../ab_mpirun.sh"
args=(-e 1K -f 2 -n 20 --repeats 5 -c 1 --op broadcast)
AB_RANKS=2 bash "$ab" "$before" "$after" 8 "$out/np2_n20" -b 128 "${args[@]}"
AB_RANKS=2 bash "$ab" "$before" "$after" 8 "$out/np2_small1000" -b 128 "${args[@]}" --iters-small 1000
AB_RANKS="4 8" bash "$ab" "$before" "$after" 4 "$out/np48_small1000" -b 128 "${args[@]}" \
  --iters-small 1000
for x in np2_n20 np2_small1000 np48_small1000; do
  python3 "$here/../../ab_summarize.py" "$out/$x" >"$out/$x/summary.txt"
done

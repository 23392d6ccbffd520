#!/usr/bin/env bash
# scatter through the kernel copy (docs/performance.md, "all_to_all through the kernel copy",
# scatter): one braid binary, the kernel copy off (BRAID_SHM_KERNEL_COPY_BYTES=0, through a
# wrapper: the staged path, as scatter ran before) and on, alternated under mpirun at 2, 4 and 8
# ranks with OpenMPI in each job, three rounds, then the medians.
# Usage: run.sh [braid binary (build/bin/braid)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
braid=$(realpath "${1:-$root/build/bin/braid}")
off=$(mktemp)
trap 'rm -f "$off"' EXIT
printf '#!/usr/bin/env bash\nexec env BRAID_SHM_KERNEL_COPY_BYTES=0 %q "$@"\n' "$braid" >"$off"
chmod +x "$off"
bash "$root/bench/ab_mpirun.sh" "$off" "$braid" 3 "$here/ab" -b 1K -e 16M -f 4 -n 20 \
  --repeats 3 -c 1 --iters-small 1000 --op scatter
python3 "$root/bench/ab_summarize.py" "$here/ab" >"$here/summary.txt"

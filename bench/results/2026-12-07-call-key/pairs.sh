#!/usr/bin/env bash
# Many short 2-rank jobs, two braid binaries alternated, OpenMPI and the limit program in each
# job, for SECONDS; prints the median over the jobs of each op and size (us per call, out of
# place / in place). The pause and fast-state figures of docs/performance.md, "The call key in
# the step line", come from it (the state of a job spreads single jobs too far to compare few).
# Usage: pairs.sh A B SECONDS [braid bench arguments...]
#   PAIRS_ROWS=FILE keeps every job's rows ("A|B, collective, bytes, oop us, ip us"); the fast
#   state's jobs are those whose limit program took under 0.15 us at 16 B.
#   e.g. pairs.sh A B 300 -b 16 -e 4K -f 4 -n 20 --repeats 3 -c 0 --iters-small 1000 -w 100 \
#          --op all_reduce --op all_gather --op reduce_scatter --op broadcast --op reduce
set -euo pipefail
a=$1 b=$2 secs=$3
shift 3
out=${PAIRS_ROWS:-$(mktemp)}
: >"$out"
end=$(($(date +%s) + secs))
while (($(date +%s) < end)); do
  for x in A B; do
    bin=$a
    [[ $x == B ]] && bin=$b
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" bench "$@" \
      --peer mpi --peer limit 2>&1 |
      awk -v x=$x '/^# Collective test/{t=$4 $5} /^ +[0-9]+ +[0-9]+ +[a-z]/{print x, t, $1, $6, $10}' >>"$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    x, t, s, o, i = line.split()
    d[(t, int(s), x)].append((float(o), float(i)))
for t, s in sorted({(k[0], k[1]) for k in d}):
    m = lambda v, j: statistics.median(z[j] for z in v)
    a, b = d[(t, s, "A")], d[(t, s, "B")]
    print(f"{t:22s} {s:8d} jobs {len(a):4d}  A {m(a,0):.2f}/{m(a,1):.2f}  B {m(b,0):.2f}/{m(b,1):.2f}"
          f"  A/B {m(a,0)/m(b,0):.2f}/{m(a,1)/m(b,1):.2f}")
PY
[[ -n ${PAIRS_ROWS:-} ]] || rm -f "$out"

#!/usr/bin/env bash
# Small broadcasts with and without the root's prefetch of its next cell (docs/shm.md, "Small
# broadcasts"; docs/performance.md, "Small broadcasts: the root's next line"): two braid binaries
# alternated, every run with OpenMPI and the limit program in the same job.
#   1. 2 ranks, 16 B-4 KiB, broadcast and all_reduce (the step protocol, unchanged: a control),
#      -n 4000, 4 alternating rounds;
#   2. 4 ranks on 2 cores, 16 B-1 KiB broadcast against OpenMPI, -n 200, 3 alternating rounds.
# Usage: run.sh BEFORE_BIN AFTER_BIN [out dir (this folder)]
set -euo pipefail
before=$1
after=$2
out=${3:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
label() { [[ $1 == "$before" ]] && echo before || echo after; }

# Each JSON file of braid bench -> "label op size lib oop_us ip_us" lines.
rows() {
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    for row in r["rows"]:
        print(sys.argv[2], r["op"], row["size"], r["library"].split()[0],
              row["out_of_place"]["time_us"], row["in_place"]["time_us"])
PY
}

{
  grep -m1 "model name" /proc/cpuinfo
  echo "nproc $(nproc); $(date -u)"
  echo "before: $before"
  echo "after: $after"
} >"$out/machine.txt"

: >"$out/np2.txt"
for i in 1 2 3 4; do
  for bin in "$before" "$after"; do
    "${mpi[@]}" -np 2 "$bin" bench -b 16 -e 4K -f 4 -n 4000 --repeats 5 -c 1 --op broadcast \
      --op all_reduce --peer mpi --peer limit -J "$tmp/j.json" >"$tmp/out.txt" 2>&1
    rows "$tmp/j.json" "$(label "$bin")-$i" >>"$out/np2.txt"
  done
done

: >"$out/np4.txt"
for i in 1 2 3; do
  for bin in "$before" "$after"; do
    "${mpi[@]}" -np 4 "$bin" bench -b 16 -e 1K -f 4 -n 200 --repeats 5 -c 1 --op broadcast \
      --peer mpi -J "$tmp/j.json" >"$tmp/out.txt" 2>&1
    rows "$tmp/j.json" "$(label "$bin")-$i" >>"$out/np4.txt"
  done
done

# The summary: per op and size, braid's time per round and peer time / braid time (> 1: braid
# faster), out of place.
python3 - "$out" <<'PY'
import collections, sys
out = sys.argv[1]
for name in ("np2", "np4"):
    rows = collections.defaultdict(lambda: collections.defaultdict(dict))
    for line in open(f"{out}/{name}.txt"):
        lab, op, size, lib, oop, ip = line.split()
        which, rnd = lab.rsplit("-", 1)
        rows[(op, int(size), which)][rnd][lib] = float(oop)
    print(f"# {name}: out of place; braid us per round | limit / braid | OpenMPI / braid")
    for (op, size, which), rounds in sorted(rows.items(), key=lambda x: (x[0][0], x[0][1], x[0][2] != "before")):
        r = [rounds[k] for k in sorted(rounds)]
        br = " ".join(f"{x['braid']:.3f}" for x in r)
        lim = " ".join(f"{x['limit'] / x['braid']:.2f}" for x in r if "limit" in x)
        mp = " ".join(f"{x['mpi'] / x['braid']:.2f}" for x in r)
        print(f"{op:11s} {size:5d} {which:6s} braid {br} | limit {lim or '-'} | mpi {mp}")
PY

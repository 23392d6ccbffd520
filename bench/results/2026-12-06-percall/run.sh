#!/usr/bin/env bash
# The per-call cost of a small collective, two braid binaries side by side (docs/performance.md,
# "Per-call cost"): before and after a change, alternated so that the VM's slow and fast states
# (a whole run can be 1.6x slower) fall on both.
#   1. one rank (`braid bench --nproc 1`: no peer, no waiting): the software of a call alone,
#      16 B, all four ops, 20 alternating runs; min and median over the runs;
#   2. 2 ranks under mpirun, 16 B-1 KiB, every op, with OpenMPI and the limit program in the
#      same job, 3 alternating rounds: time ratios peer / braid (> 1: braid faster);
#   3. 4 ranks, 16-64 B all_reduce and broadcast against OpenMPI at -n 50, 3 rounds.
# Usage: run.sh BEFORE_BIN AFTER_BIN [out dir (this folder)]
set -euo pipefail
before=$1
after=$2
out=${3:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op reduce_scatter --op all_gather --op broadcast)
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
  echo "before: $before ($("$before" --version 2>/dev/null | head -1))"
  echo "after: $after"
} >"$out/machine.txt"

: >"$out/np1.txt"
for i in $(seq 20); do
  for bin in "$before" "$after"; do
    "$bin" bench --nproc 1 -b 16 -e 16 -n 20000 --repeats 3 -c 0 "${ops[@]}" -J "$tmp/j.json" \
      >/dev/null 2>&1
    rows "$tmp/j.json" "$(label "$bin")" >>"$out/np1.txt"
  done
done

: >"$out/np2.txt"
for i in 1 2 3; do
  for bin in "$before" "$after"; do
    "${mpi[@]}" -np 2 "$bin" bench -b 16 -e 1K -f 4 -n 2000 --repeats 5 -c 1 --op broadcast \
      --op all_reduce --op reduce_scatter --op all_gather --peer mpi --peer limit \
      -J "$tmp/j.json" >"$tmp/out.txt" 2>&1
    rows "$tmp/j.json" "$(label "$bin")-$i" >>"$out/np2.txt"
  done
done

: >"$out/np4.txt"
for i in 1 2 3; do
  for bin in "$before" "$after"; do
    "${mpi[@]}" -np 4 "$bin" bench -b 16 -e 64 -f 4 -n 50 --repeats 5 -c 1 --op all_reduce \
      --op broadcast --peer mpi -J "$tmp/j.json" >"$tmp/out.txt" 2>&1
    rows "$tmp/j.json" "$(label "$bin")-$i" >>"$out/np4.txt"
  done
done

# The summary: np1 min / median per op; np2 and np4 peer / braid per round.
python3 - "$out" <<'PY'
import collections, statistics, sys
out = sys.argv[1]
t = collections.defaultdict(list)
for line in open(f"{out}/np1.txt"):
    lab, op, size, lib, oop, ip = line.split()
    t[(lab, op)].append(float(oop))
print("# one rank, 16 B, us per call (min / median of 20 runs)")
for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
    b, a = t[("before", op)], t[("after", op)]
    print(f"{op:15s} before {min(b):.3f} / {statistics.median(b):.3f}"
          f"   after {min(a):.3f} / {statistics.median(a):.3f}")
for name in ("np2", "np4"):
    rows = collections.defaultdict(dict)
    for line in open(f"{out}/{name}.txt"):
        lab, op, size, lib, oop, ip = line.split()
        rows[(lab, op, int(size))][lib] = float(oop)
    print(f"# {name}: out of place, peer time / braid time (> 1: braid faster), per round")
    for (lab, op, size), libs in sorted(rows.items(), key=lambda x: (x[0][1], x[0][2], x[0][0])):
        br = libs["braid"]
        peers = " ".join(f"{p} {libs[p] / br:.2f}" for p in ("limit", "mpi") if p in libs)
        print(f"{op:15s} {size:5d} {lab:9s} braid {br:.3f} us  {peers}")
PY

#!/usr/bin/env bash
# Issue 31's Python benchmark with the machine's limit beside it, from one invocation
# (docs/performance.md, "Python all_reduce against torch.distributed gloo (issue 31)"):
#   1. allreduce_vs_gloo.py under `braid launch`: braid's all_reduce from Python on torch
#      tensors, gloo's on the same tensors, braid on a shared tensor;
#   2. `braid bench --peer limit` under the same launcher, size by size with the same sizes,
#      iterations and repeats: braid's shm all_reduce from C++ and the limit program (the bare
#      copy-in shared-memory data path, docs/bench.md "The limit program"), f32 sum, in place
#      on ordinary buffers (-R 0) as the Python calls are, every result checked;
#   3. one table: busbw of each, and braid (Python) / gloo, braid (Python) / limit.
# A figure of braid (Python) at or near the limit is beyond what this machine allows a
# copy-in design; the gap between braid (C++) and braid (Python) is the binding's.
# A measurement, not a test.
#   bench/python/run_vs_gloo.sh [--nproc N] [--sizes 16,1M,64M] [--repeats 5] [BUILD_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
nproc=2 sizes=16,1M,64M repeats=5 build=$here/../../build
while [[ $# -gt 0 ]]; do
  case $1 in
    --nproc) nproc=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "run_vs_gloo.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
braid=$build/bin/braid
[[ -x $braid ]] || { echo "run_vs_gloo.sh: no $braid (give the build folder)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
launch=("$braid" launch --nproc-per-node "$nproc" --timeout 600)

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) x $(nproc);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== 1. allreduce_vs_gloo.py, $nproc ranks"
PYTHONPATH=$build/bindings/python${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1 \
  "${launch[@]}" /usr/bin/python3 "$here/allreduce_vs_gloo.py" --sizes "$sizes" \
  --repeats "$repeats" --json "$out/python.json"

echo "== 2. braid bench --peer limit, $nproc ranks, the same sizes"
i=0
for size in ${sizes//,/ }; do
  # The iterations and warm-up allreduce_vs_gloo.py uses for this size (bytes = count * 4).
  read -r nbytes iters warmup < <(python3 -c '
import sys
s = sys.argv[1]
m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
n = max(1, int(float(s[:-1] if m > 1 else s) * m) // 4) * 4
it = max(3, min(2000, int(5e7 / n)))
print(n, it, max(2, it // 10))' "$size")
  "${launch[@]}" "$braid" bench -b "$nbytes" -e "$nbytes" -n "$iters" -w "$warmup" \
    --repeats "$repeats" -c 1 -R 0 --op all_reduce -d float -o sum --peer limit \
    -J "$out/limit_$i.json"
  i=$((i + 1))
done

echo "== 3. side by side (busbw GB/s; in place, torch tensors / ordinary buffers)"
python3 - "$out/python.json" "$out"/limit_*.json <<'EOF'
import json
import sys

py = json.load(open(sys.argv[1]))
bench = {}  # size -> {library: in-place busbw}
for path in sys.argv[2:]:
    for res in json.load(open(path))["results"]:
        library = "limit" if "limit" in res["library"] else "braid C++"
        for row in res["rows"]:
            bench.setdefault(row["size"], {})[library] = row["in_place"]["busbw_gbps"]
print(f"# {py['nranks']} ranks, all_reduce f32 sum; limit = braid bench --peer limit")
print(f"# {'size':>9}  {'braid py':>8} {'gloo':>7} {'shared':>7} {'braid C++':>9} {'limit':>7}"
      f"  {'py/gloo':>7} {'py/limit':>8} {'gloo x5/limit':>13}")
for row in py["rows"]:
    bw = row["busbw_gbps"]
    b = bench.get(row["size"], {})
    limit = b.get("limit", float("nan"))
    cpp = b.get("braid C++", float("nan"))
    print(f"  {row['size']:>9}  {bw['braid']:8.3g} {bw['gloo']:7.3g} {bw['braid shared']:7.3g}"
          f" {cpp:9.3g} {limit:7.3g}  {bw['braid'] / bw['gloo']:7.3g} {bw['braid'] / limit:8.3g}"
          f" {5 * bw['gloo'] / limit:13.3g}")
print("# py/limit near 1: braid from Python is at this machine's copy-in limit;"
      " gloo x5/limit > 1: the 5x-gloo goal is beyond that limit")
EOF

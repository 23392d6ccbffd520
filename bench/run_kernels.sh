#!/usr/bin/env bash
# Runs braid_bench_kernels and prints each braid figure beside its peer from the same run:
#   bytes/s rows (name/n)  ÷ memcpy/n          (memcpy of n f32, counted as read + write)
#   FLOP/s rows (name/N)   ÷ sgemm_openblas/N  (one thread, OPENBLAS_CORETYPE=SkylakeX)
# Usage: bench/run_kernels.sh [build dir] [extra Google Benchmark flags...]
#   e.g. bench/run_kernels.sh build --benchmark_filter='sgemm|memcpy' --benchmark_repetitions=3
set -euo pipefail
build=${1:-build}
shift || true
bin="$build/bench/braid_bench_kernels"
[[ -x "$bin" ]] || { echo "run_kernels.sh: $bin not found (configure with -DBRAID_BUILD_BENCH=ON)" >&2; exit 1; }
out=$(mktemp /tmp/braid_bench_kernels.XXXXXX.json)
trap 'rm -f "$out"' EXIT
# The binary sets OPENBLAS_CORETYPE=SkylakeX itself on AVX-512 CPUs; exporting it here also
# covers a binary started some other way.
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}; fi
"$bin" --benchmark_out="$out" --benchmark_out_format=json "$@" >&2
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
ctx = data["context"]
print(f"# {ctx.get('cpu', '?')}, braid ISA {ctx.get('braid_isa', '?')}, "
      f"OpenBLAS core {ctx.get('openblas_core', 'none')}, {ctx['num_cpus']} CPUs")
# With --benchmark_repetitions, use each benchmark's median; otherwise its single run.
rows = {}
for b in data["benchmarks"]:
    if b.get("run_type", "iteration") == "iteration":
        rows.setdefault(b.get("run_name", b["name"]), b)
for b in data["benchmarks"]:
    if b.get("aggregate_name") == "median":
        rows[b["run_name"]] = b
def figure(b):
    if "FLOPS" in b: return b["FLOPS"], "GFLOP/s"
    return b.get("bytes_per_second"), "GB/s"
print(f"{'benchmark':28} {'braid':>10} {'peer':>10} {'unit':>8} {'ratio':>6}  peer")
for name, b in rows.items():
    base, size = name.split("/")[0], name.split("/")[-1]
    if base in ("memcpy", "sgemm_openblas"): continue
    value, unit = figure(b)
    if value is None: continue
    peer_name = ("sgemm_openblas/" if unit == "GFLOP/s" else "memcpy/") + size
    peer = rows.get(peer_name)
    pv = figure(peer)[0] if peer else None
    ratio = f"{value / pv:6.2f}" if pv else "   n/a"
    pv_s = f"{pv / 1e9:10.1f}" if pv else f"{'-':>10}"
    print(f"{name:28} {value / 1e9:10.1f} {pv_s} {unit:>8} {ratio}  {peer_name}")
PY

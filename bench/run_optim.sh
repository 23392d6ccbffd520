#!/usr/bin/env bash
# Runs braid's fused AdamW step (braid_bench_kernels: adamw_f32, adamw_bf16_master and the
# memcpy peer, single-threaded) and torch.optim.AdamW (bench/optim_vs_torch.py, foreach=True
# and False) in one invocation, and prints them side by side. GB/s is the bytes a step must
# move (28 per element for braid's f32 and bf16 + f32 master steps, and torch's f32 step; 14
# for torch's bf16 step, which has no master); memcpy is counted as read + write. The x
# columns compare steps per second, so they hold for the bf16 rows too.
# Usage: bench/run_optim.sh [build dir] [torch threads (2)] [repetitions (5)]
#   e.g. bench/run_optim.sh build 2 5
set -euo pipefail
build=${1:-build}
threads=${2:-2}
reps=${3:-5}
bin="$build/bench/braid_bench_kernels"
[[ -x "$bin" ]] || { echo "run_optim.sh: $bin not found (configure with -DBRAID_BUILD_BENCH=ON)" >&2; exit 1; }
torch_python=${BRAID_TORCH_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
braid_json=$(mktemp /tmp/braid_optim.XXXXXX.json)
torch_json=$(mktemp /tmp/torch_optim.XXXXXX.json)
trap 'rm -f "$braid_json" "$torch_json"' EXIT
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --benchmark_filter='^(adamw_|memcpy)' --benchmark_repetitions="$reps" \
  --benchmark_report_aggregates_only=true --benchmark_out="$braid_json" \
  --benchmark_out_format=json >&2
"$torch_python" "$here/optim_vs_torch.py" "$threads" --json >"$torch_json"
echo "# load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$braid_json" "$torch_json" <<'PY'
import json, sys
braid = json.load(open(sys.argv[1]))
torch = json.load(open(sys.argv[2]))
ctx = braid["context"]
print(f"# {ctx.get('cpu', '?')}, braid ISA {ctx.get('braid_isa', '?')}, median of "
      f"repetitions; torch {torch['torch']}, {torch['threads']} threads")
bps = {}
for b in braid["benchmarks"]:
    if b.get("aggregate_name", "median") == "median":
        bps[b.get("run_name", b["name"]).removesuffix("/real_time")] = b["bytes_per_second"]
peer = {(r["dtype"], r["n"], r["foreach"]): r for r in torch["rows"]}
print(f"{'case':30} {'n':>9} {'braid':>7} {'memcpy':>7} {'foreach':>8} {'single':>7} "
      f"{'/memcpy':>8} {'x foreach':>9} {'x single':>8}   (GB/s)")
for case, name, dtype in (("adamw f32, 1 thread", "adamw_f32", "f32"),
                          ("adamw f32, 2 threads", "adamw_f32_2threads", "f32"),
                          ("adamw bf16+master, 1 thread", "adamw_bf16_master", "bf16"),
                          ("adamw bf16+master, 2 threads", "adamw_bf16_master_2threads", "bf16")):
    for n in (1 << 26, 1 << 20):
        b, m = bps.get(f"{name}/{n}"), bps.get(f"memcpy/{n}")
        tf, ts = peer.get((dtype, n, True)), peer.get((dtype, n, False))
        if b is None or tf is None or ts is None:
            continue
        steps = b / 28 / n  # braid steps per second
        mem = f"{m / 1e9:7.1f}" if m else f"{'-':>7}"
        ratio = f"{b / m:8.2f}" if m else f"{'-':>8}"
        print(f"{case:30} {n:9} {b / 1e9:7.1f} {mem} {tf['bytes_per_second'] / 1e9:8.1f} "
              f"{ts['bytes_per_second'] / 1e9:7.1f} {ratio} {steps * tf['seconds']:9.2f} "
              f"{steps * ts['seconds']:8.2f}")
PY

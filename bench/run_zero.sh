#!/usr/bin/env bash
# Runs the tiny GPT's training step sharded over 2 ranks x 1 thread in braid (ZeRO stages 0-3
# under `braid launch`, build/bin/braid_bench_zero) and with PyTorch DDP over gloo
# (bench/ddp_vs_torch.py: transformers' GPT2LMHeadModel, the same model, batch and step), plus
# braid in one plain process, alternating braid and PyTorch `rounds` times in one invocation so
# both see the same machine. Prints one table: tokens/s, step time, time in collectives,
# exposed communication and the fraction hidden, peak memory per rank, and the two goals of the
# sharding issue as ratios (medians over rounds of each round's median step). Builds nothing.
# How exposed communication is measured: Note [Exposed communication] in bench/zero_bench.cc
# (braid) and the docstring of bench/ddp_vs_torch.py (PyTorch: synced step - no_sync step).
# When ShardingOptions has `overlap` (a communication thread), every stage runs with it off and
# on. PyTorch is tuned as its users would: torch.set_num_threads(1), OMP_WAIT_POLICY=PASSIVE,
# OPENBLAS_CORETYPE=SkylakeX, OPENBLAS_NUM_THREADS=1, foreach AdamW.
# Usage: bench/run_zero.sh [build dir (build)] [steps per round (5)] [rounds (3)]
# BRAID_ZERO_RAW=FILE keeps every run's JSON line (rank 0's step times, phases) in FILE.
# BRAID_GPT_MODEL=gpt2 runs GPT-2 small (global batch 4 x 256) on both sides; then
# BRAID_ZERO_STAGES (default "0 1 2 3"), BRAID_ZERO_DTYPES (default "fp32 bf16 bf16p") and
# BRAID_ZERO_OVERLAP (off or on; default both where available) keep a run short.
set -euo pipefail
build=${1:-build}
steps=${2:-5}
rounds=${3:-3}
bin="$build/bin/braid_bench_zero"
braid="$build/bin/braid"
for f in "$bin" "$braid"; do
  [[ -x "$f" ]] || { echo "run_zero.sh: $f not found (build braid_bench_zero and braid_cli)" >&2; exit 1; }
done
torch_python=${BRAID_TORCH_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp /tmp/braid_zero_bench.XXXXXX)
trap 'rm -f "$out"' EXIT
raw=${BRAID_ZERO_RAW:-}  # a path: keep every run's JSON line there
overlaps=(default)
[[ $("$bin" --features) == "overlap yes" ]] && overlaps=(off on)
[[ -n ${BRAID_ZERO_OVERLAP:-} ]] && overlaps=("$BRAID_ZERO_OVERLAP")
read -r -a stages <<<"${BRAID_ZERO_STAGES:-0 1 2 3}"
read -r -a dtypes <<<"${BRAID_ZERO_DTYPES:-fp32 bf16 bf16p}"
torch_dtypes=()
for d in "${dtypes[@]}"; do
  [[ $d == bf16p ]] || torch_dtypes+=("$d")
done
export BRAID_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX \
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  "$bin" single "$steps" 2 "${torch_dtypes[@]}" | sed 's/^/braid /' >>"$out"
  for stage in "${stages[@]}"; do
    for ov in "${overlaps[@]}"; do
      args=()
      [[ $ov == default ]] || args=(--overlap "$ov")
      "$braid" launch --nproc-per-node 2 --timeout 300 "$bin" "$stage" "$steps" 2 "${args[@]}" \
        "${dtypes[@]}" | sed -n 's/^\[rank 0\] \({.*\)$/braid \1/p' >>"$out"
    done
  done
  "$torch_python" "$here/ddp_vs_torch.py" "$steps" 2 "${torch_dtypes[@]}" | sed 's/^/torch /' >>"$out"
  echo "# round $((r + 1)) done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "# load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -z $raw ]] || cp "$out" "$raw"
python3 - "$out" "$steps" "$rounds" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    r = json.loads(js)
    key = ("torch DDP", "-") if who == "torch" else (
        "single" if r["mode"] == "single" else f"ZeRO-{r['mode']}", r["overlap"])
    rows.setdefault(key + (r["dtype"],), []).append(r)
med = lambda rs, k: statistics.median(r[k] for r in rs)
import os
model = ("GPT-2 small (12 layers, d 768, 12 heads, T 256, vocab 50257), global batch "
         f"{os.environ.get('BRAID_GPT_BATCH', 4)} x 256 tokens"
         if os.environ.get("BRAID_GPT_MODEL") == "gpt2" else
         "tiny GPT (4 layers, d 256, 4 heads, T 256, vocab 256), global batch "
         f"{os.environ.get('BRAID_GPT_BATCH', 8)} x 256 tokens")
print(f"# {model}; "
      f"one step = forward + cross-entropy + backward (+ gradient reduction) + AdamW; 2 ranks x 1 "
      f"thread (single: 1 process x 1 thread, whole batch); {sys.argv[2]} timed steps x "
      f"{sys.argv[3]} rounds, medians")
print("# comm: time inside collectives; exposed: step - compute-only step; hidden = 1 - "
      "exposed / comm; vs DDP: step / braid ZeRO-0 step (goal for ZeRO-3 <= 1.10); vs torch: "
      "tokens/s / torch DDP tokens/s (goal for ZeRO-3 >= 1.15)")
hdr = (f"{'mode':10} {'overlap':7} {'dtype':5} {'tok/s':>7} {'step ms':>8} {'comm ms':>8} "
       f"{'exposed':>8} {'hidden':>7} {'peak MiB/rank':>14} {'vs DDP':>7} {'vs torch':>8} "
       f"{'tok/s min-max':>14}")
span = lambda rs: (f"{min(r['tokens_per_s'] for r in rs):.0f}-"
                   f"{max(r['tokens_per_s'] for r in rs):.0f}")
print(hdr)
for dtype in ("fp32", "bf16", "bf16p"):  # bf16p (braid's FSDP MixedPrecision) vs torch bf16
    if not any(k[2] == dtype for k in rows):
        continue
    torch_rs = rows[("torch DDP", "-", "bf16" if dtype == "bf16p" else dtype)]
    torch_tps = med(torch_rs, "tokens_per_s")
    order = lambda kv: ({"single": 0, "torch DDP": 2}.get(kv[0][0], 1), kv[0])
    for (mode, ov, dt), rs in sorted(rows.items(), key=order):
        if dt != dtype:
            continue
        tps, step = med(rs, "tokens_per_s"), med(rs, "step_ms_median")
        if mode == "torch DDP":
            print(f"{mode:10} {ov:7} {dt:5} {tps:7.0f} {step:8.1f} {'':>8} "
                  f"{med(rs, 'exposed_ms'):8.1f} {'':>7} {'':>14} {'':>7} {1.0:8.2f} {span(rs):>14}")
            print(f"{'  no_sync':10} {ov:7} {dt:5} {med(rs, 'nosync_tokens_per_s'):7.0f} "
                  f"{med(rs, 'nosync_ms'):8.1f}")
            continue
        peak = "/".join(f"{max(r['peak_mib'][i] for r in rs):.0f}" for i in range(len(rs[0]["peak_mib"])))
        vs_ddp = ""
        ddp = rows.get(("ZeRO-0", ov, dt))
        if mode.startswith("ZeRO") and ddp:
            vs_ddp = f"{step / med(ddp, 'step_ms_median'):.2f}"
        comm = exposed = hidden = ""
        if mode != "single":
            comm, exposed = f"{med(rs, 'comm_ms'):.1f}", f"{med(rs, 'exposed_ms'):.1f}"
            hidden = f"{100 * med(rs, 'hidden'):.0f}%"
        print(f"{mode:10} {ov:7} {dt:5} {tps:7.0f} {step:8.1f} {comm:>8} {exposed:>8} {hidden:>7} "
              f"{peak:>14} {vs_ddp:>7} {tps / torch_tps:8.2f} {span(rs):>14}")
tv = next(r for k, rs in rows.items() if k[0] == "torch DDP" for r in rs)["torch"]
print(f"# torch {tv}")
PY

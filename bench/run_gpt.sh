#!/usr/bin/env bash
# Runs the tiny GPT's training step in braid (build/bin/braid_bench_gpt) and in PyTorch
# (bench/gpt_vs_torch.py: transformers' GPT2LMHeadModel, the same model and step) in one
# invocation, alternating the two `rounds` times so both see the same machine, and prints
# tokens/s side by side with the ratio (medians over rounds of each round's median step).
# PyTorch is tuned as its users would: the same thread count (torch.set_num_threads),
# OMP_WAIT_POLICY=PASSIVE, OPENBLAS_CORETYPE=SkylakeX (machine-notes.md: doubles its sgemm
# here), foreach AdamW.
# Usage: bench/run_gpt.sh [build dir (build)] [threads (2)] [steps per round (5)] [rounds (3)]
# BRAID_GPT_MODEL=gpt2 (GPT-2 small, batch 4 x 256) and BRAID_GPT_BATCH reach both sides.
set -euo pipefail
build=${1:-build}
threads=${2:-2}
steps=${3:-5}
rounds=${4:-3}
bin="$build/bin/braid_bench_gpt"
[[ -x "$bin" ]] || { echo "run_gpt.sh: $bin not found (build the braid_bench_gpt target)" >&2; exit 1; }
torch_python=${BRAID_TORCH_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp /tmp/braid_gpt_bench.XXXXXX)
trap 'rm -f "$out"' EXIT
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  BRAID_NUM_THREADS=$threads "$bin" "$threads" "$steps" 1 fp32 bf16 | sed 's/^/braid /' >>"$out"
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=$threads \
    "$torch_python" "$here/gpt_vs_torch.py" "$threads" "$steps" 1 fp32 bf16 | sed 's/^/torch /' >>"$out"
done
echo "# load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$threads" "$steps" "$rounds" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    r = json.loads(js)
    rows.setdefault((who, r["dtype"]), []).append(r)
first = next(iter(rows.values()))[0]
desc = ("GPT-2 small (124M: 12 layers, d 768, 12 heads, vocab 50257)" if first.get("model") == "gpt2"
        else "tiny GPT (4 layers, d 256, 4 heads, vocab 256)")
print(f"# {desc}, T 256, batch {first.get('batch', 8)}: one step = forward + "
      f"cross-entropy + backward + AdamW; {sys.argv[2]} threads, {sys.argv[3]} timed steps x "
      f"{sys.argv[4]} rounds, median")
print(f"{'dtype':6} {'braid tok/s':>12} {'torch tok/s':>12} {'braid/torch':>12}")
for dtype in ("fp32", "bf16"):
    b = statistics.median(r["tokens_per_s"] for r in rows[("braid", dtype)])
    t = statistics.median(r["tokens_per_s"] for r in rows[("torch", dtype)])
    print(f"{dtype:6} {b:12.0f} {t:12.0f} {b / t:12.2f}")
tv = rows[("torch", "fp32")][0].get("torch", "?")
print(f"# torch {tv}; losses after the first step (same init scheme, different draws): "
      f"braid {rows[('braid', 'fp32')][0]['loss_first']:.3f}, torch "
      f"{rows[('torch', 'fp32')][0]['loss_first']:.3f}")
PY

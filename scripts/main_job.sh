#!/usr/bin/env bash
# The main job scripts/quickstart.sh runs after building: what a new user should see work.
# Usage: scripts/main_job.sh [BUILD_DIR]   (default: build)
# Edit this file to change what the quick start shows; keep it to a few minutes on 2 cores.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)

"$build/bin/braid" env

# The main job: a GPT trained on the licence texts in /usr/share/common-licenses by 2 ranks
# started by `braid launch`, sharded with ZeRO-3 in bf16 through the Accelerator
# (examples/accelerate_gpt.cc, configured by examples/accelerate_gpt.yaml): progress lines,
# a checkpoint every 200 steps, TensorBoard / JSONL logs, loss_curve.svg, a generated sample,
# and model.safetensors + config.json that transformers loads. --max_final_loss makes it fail
# when the model did not learn (ln 256 - 1.5: well below a uniform guess over the bytes).
"$build/bin/braid" launch --nproc-per-node 2 "$build/examples/accelerate_gpt" \
  --config_file "$here/examples/accelerate_gpt.yaml" \
  --output_dir "$build/quickstart/accelerate_gpt" --max_final_loss 4.05

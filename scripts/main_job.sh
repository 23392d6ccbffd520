#!/usr/bin/env bash
# The main job scripts/quickstart.sh runs after building: what a new user should see work.
# Usage: scripts/main_job.sh [BUILD_DIR]   (default: build)
# Edit this file to change what the quick start shows; keep it short and quick on 2 cores.
set -euo pipefail
build=${1:-build}

"$build/bin/braid" env

# The main job: data-parallel training on 4 CPU ranks started by `braid launch`, gradients
# averaged with all_reduce on the shared-memory backend, a sharded checkpoint saved and
# reloaded by every rank (examples/ddp_linear_regression.cc).
"$build/bin/braid" launch --nproc-per-node 4 \
  "$build/examples/ddp_linear_regression" --out "$build/quickstart/ddp_linear_regression"

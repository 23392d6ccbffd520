#!/usr/bin/env bash
# The main job scripts/quickstart.sh runs after building: what a new user should see work.
# Usage: scripts/main_job.sh [BUILD_DIR]   (default: build)
# Edit this file to change what the quick start shows; keep it short and quick on 2 cores.
set -euo pipefail
build=${1:-build}

"$build/bin/braid" env

# The headline example (examples/), when it was built.
if [[ -x $build/examples/linear_regression ]]; then
  "$build/examples/linear_regression" --out "$build/quickstart/linear_regression" --steps 200
fi

#!/usr/bin/env bash
# Quick start on Debian 12, as root: installs the dependencies, builds braid (Release) into
# build/ and runs the main job (scripts/main_job.sh): `braid env` and the sharded GPT training.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$BRAID_ROOT"

step "install dependencies" bash scripts/install_deps.sh
step "configure build/ (Release)" braid_configure build -DCMAKE_BUILD_TYPE=Release \
  -DBRAID_BUILD_BENCH=OFF -DBRAID_BUILD_TESTS=OFF -DBRAID_BUILD_EXAMPLES=ON
step "build" braid_build build
step "main job (scripts/main_job.sh)" bash scripts/main_job.sh build
step_summary

#!/usr/bin/env bash
# Issue 35's collective tables after the tenth session's changes (docs/performance.md, "Issue
# 35's collectives on the Xeon, tenth session"): the same commands as 2026-12-07-xeon-167, whose
# run.sh this calls with this folder as its output. Then:
#   python3 bench/results/2026-12-07-xeon-167/ratios.py bench/results/2026-12-07-xeon-167-tenth
# Usage: run.sh [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/../2026-12-07-xeon-167/run.sh" "$here" "${1:-build}"
python3 "$here/../2026-12-07-xeon-167/ratios.py" "$here" >"$here/ratios.txt"

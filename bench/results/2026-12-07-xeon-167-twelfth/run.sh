#!/usr/bin/env bash
# Issue 35's collective tables, twelfth session (docs/performance.md, "Issue 35's collectives
# on the Xeon, twelfth session"): the eleventh session's sets (small1..3 with --iters-small
# 1000 and their medians.txt, n20/, pages4k/; see that script), written into this folder.
# Usage: run.sh [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../2026-12-07-xeon-167-eleventh/run.sh" "${1:-build}" "$here"

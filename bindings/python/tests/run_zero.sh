#!/usr/bin/env bash
# test_zero.py under `braid launch` with 1 and 2 ranks (each run checks stages 0 and 3, a
# resume and torch's result itself), then the two runs' final parameters bit for bit: the
# files are the same bytes when every tensor has the same bits.
#   run_zero.sh BRAID PYTHON TEST_ZERO_PY OUTDIR
set -euo pipefail
braid=$1 py=$2 test=$3 out=$4
rm -rf "$out"
mkdir -p "$out"
for w in 1 2; do
  set +e
  "$braid" launch --nproc-per-node "$w" --timeout 60 "$py" "$test" "$out/zero" >"$out/w$w.log" 2>&1
  rc=$?
  set -e
  cat "$out/w$w.log"
  if ((rc == 77)); then exit 77; fi  # numpy or torch missing: skipped
  ((rc == 0)) || { echo "FAIL: test_zero.py with $w rank(s) exited with $rc" >&2; exit 1; }
done
cmp "$out/zero_w1.safetensors" "$out/zero_w2.safetensors" ||
  { echo "FAIL: 1 and 2 ranks end with different parameters" >&2; exit 1; }
echo "python zero: 1 and 2 ranks end with the same bits"

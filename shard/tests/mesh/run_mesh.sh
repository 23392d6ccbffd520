#!/usr/bin/env bash
# DeviceMesh on real rank processes under `braid launch` (see CMakeLists.txt here).
#   run_mesh.sh BRAID WORKER 1d|2x2|2x2x2|mismatch
set -u
braid=$1
worker=$2
scenario=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$tmp/out" 2>/dev/null; exit 1; }
# launch N ARG: N ranks of the worker; output in $tmp/out.
launch() {
  "$braid" launch --nproc-per-node "$1" --timeout 120 "$worker" "$2" >"$tmp/out" 2>&1
}
case $scenario in
1d) n=3 arg=3 ;;
2x2) n=4 arg=2x2 ;;
2x2x2) n=8 arg=2x2x2 ;;
mismatch) n=3 arg=mismatch ;;
*) echo "run_mesh.sh: unknown scenario $scenario" >&2; exit 2 ;;
esac
launch $n $arg || fail "$n ranks of mesh_worker $arg: exit status $?"
[ "$(grep -c -E '^\[rank [0-9]+\] mesh_worker rank [0-9]+: (.* OK|expected error)' "$tmp/out")" -eq "$n" ] ||
  fail "expected $n ranks to report success"
grep "mesh_worker rank 0" "$tmp/out"
echo "OK: $scenario"

#!/usr/bin/env bash
# Sharded checkpoints with real rank processes under `braid launch` (see CMakeLists.txt here).
#   run_checkpoint.sh BRAID WORKER reshard|kill-rank2|kill-rank0
set -u
braid=$1
worker=$2
scenario=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- last output:"; cat "$tmp/out" 2>/dev/null; exit 1; }
# launch N ARGS...: N ranks of the worker; output in $tmp/out.
launch() {
  local n=$1
  shift
  "$braid" launch --nproc-per-node "$n" --timeout 60 "$worker" "$@" >"$tmp/out" 2>&1
}
ckpt=$tmp/ckpt

launch 4 save "$ckpt" 1 || fail "save with 4 ranks: exit status $?"
[ -f "$ckpt/index.json" ] || fail "no index.json"
[ "$(ls "$ckpt" | grep -c '^rank-0000[0-3]-of-00004\.safetensors$')" -eq 4 ] || fail "rank files"
[ -e "$ckpt.partial" ] && fail "$ckpt.partial left behind"
[ -e "$ckpt.old" ] && fail "$ckpt.old left behind"

case $scenario in
reshard)
  for n in 2 1 3; do
    launch $n verify "$ckpt" 1 4 || fail "verify with $n ranks: exit status $?"
  done
  ;;
kill-rank2 | kill-rank0)
  if [ "$scenario" = kill-rank2 ]; then
    kill_rank=2 stage=file-written
  else
    kill_rank=0 stage=index-written
  fi
  launch 4 save "$ckpt" 2 $kill_rank $stage && fail "the launcher exited 0 after a rank was killed"
  grep -q "SIGKILL at stage $stage" "$tmp/out" || fail "rank $kill_rank did not reach $stage"
  # The first checkpoint is untouched and loads with any world size.
  launch 2 verify "$ckpt" 1 4 || fail "the first checkpoint no longer verifies"
  [ -d "$ckpt.partial" ] || fail "expected the interrupted save's $ckpt.partial"
  # The next save clears the leftovers and publishes.
  launch 4 save "$ckpt" 2 || fail "save after the kill: exit status $?"
  launch 1 verify "$ckpt" 2 4 || fail "the second checkpoint does not verify"
  [ -e "$ckpt.partial" ] && fail "$ckpt.partial left behind after the next save"
  [ -e "$ckpt.old" ] && fail "$ckpt.old left behind after the next save"
  ;;
*)
  fail "unknown scenario $scenario"
  ;;
esac
echo "PASS: $scenario"

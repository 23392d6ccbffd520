#!/usr/bin/env bash
# The memory estimate against each rank's allocator with several ranks (docs/memory.md,
# "Tests"): memory_worker under `braid launch`, one process per rank (the allocator's
# statistics are per process). Every rank prints its measured and predicted peak and fails
# past 10%.
#   run_memory.sh BRAID WORKER
set -euo pipefail
braid=$1 worker=$2
run() { # nproc stage [options]
  local n=$1
  shift
  if ! out=$("$braid" launch --nproc-per-node "$n" --timeout 120 "$worker" "$@" 2>&1); then
    echo "$out"
    echo "FAIL: W $n, $*" >&2
    exit 1
  fi
  echo "$out" | grep "predicted" | sort
}
for w in 2 4; do
  for s in 0 1 2 3; do run "$w" "$s"; done
done
run 2 1 --param-dtype bf16 --reduce-dtype bf16
run 4 3 --param-dtype bf16 --reduce-dtype bf16
run 2 3 --keep-after-forward
run 4 3 --overlap
run 2 3 --autocast bf16 --checkpointing
run 2 2 --micro-batches 2
run 3 0 --bucket-cap-mb 0.05
run 2 0 --bucket-cap-mb 0.05 --not-deterministic --micro-batches 2
run 4 3 --shard-group-size 2
run 4 2 --shard-group-size 2 --not-deterministic
for s in 0 1 2 3; do run 2 "$s" --llama; done
run 4 3 --llama --param-dtype bf16 --reduce-dtype bf16 --shard-group-size 2
echo "OK: memory estimate within 10% on every rank"

#!/usr/bin/env bash
# ZeRO for a framework with its own autograd (flat_params.h) keeps ShardedModel's promise:
# flat_worker trains the same hand-written MLP on the same global batch under `braid launch`
# for world sizes 1, 2, 4 and stages 0-3, and every result equals the single-process "plain"
# run (the G micro-batch gradients summed in order, the same AdamW) bit for bit; so do runs
# without the communication thread, with bf16 gradients, and a run saved at one world size and
# stage and resumed at another.
#   run_flat_equivalence.sh BRAID WORKER OUTDIR
set -euo pipefail
braid=$1 worker=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
run() { # nproc name stage steps [options]
  local n=$1 name=$2 stage=$3 steps=$4
  shift 4
  if ! "$braid" launch --nproc-per-node "$n" --timeout 120 "$worker" train "$stage" 4 "$steps" \
    "$out/$name.safetensors" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "FAIL: $name" >&2
    exit 1
  fi
  grep -h "loss" "$out/$name.log" | tail -1 | sed "s/^/$name: /"
}
same() { "$worker" compare "$out/$1.safetensors" "$out/$2.safetensors" >/dev/null ||
  { echo "FAIL: $2 differs from $1" >&2; exit 1; }; echo "$2 == $1 (bit for bit)"; }

"$worker" train plain 4 4 "$out/plain.safetensors" >"$out/plain.log"
"$worker" train plain 4 4 "$out/plain_bf16.safetensors" --bf16-grads >"$out/plain_bf16.log"
# The loss must fall: the test trains something.
first=$(awk '/^step 0 /{print $4}' "$out/plain.log")
last=$(awk '/^step 3 /{print $4}' "$out/plain.log")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
  { echo "FAIL: plain loss did not fall ($first -> $last)" >&2; exit 1; }
echo "plain: loss $first -> $last"
for w in 1 2 4; do for s in 0 1 2 3; do run "$w" "w${w}_s${s}" "$s" 4; done; done
for w in 1 2 4; do for s in 0 1 2 3; do same plain "w${w}_s${s}"; done; done
run 4 w4_s3_no_overlap 3 4 --no-overlap
same plain w4_s3_no_overlap
run 2 w2_s3_bf16 3 4 --bf16-grads
same plain_bf16 w2_s3_bf16
# Saved after step 2 by 2 ranks at stage 3, resumed by 4 ranks at stage 1 (and 1 at stage 0).
run 2 w2_s3_save 3 4 --save-at 2 "$out/ckpt"
run 4 w4_s1_resumed 1 4 --resume "$out/ckpt" --start 2
run 1 w1_s0_resumed 0 4 --resume "$out/ckpt" --start 2
same plain w4_s1_resumed
same plain w1_s0_resumed
echo "flat equivalence: all runs agree"

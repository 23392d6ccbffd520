#!/usr/bin/env bash
# Tensor parallelism on real processes (docs/parallelism.md, "Tests"): tp_worker under
# `braid launch`. Every training run compares itself, step by step and at the end, with one
# process trained on the same global batch (tp_worker.cc); a checkpoint written at one TP size
# is resumed at others and must continue as the uninterrupted run.
#   run_tp.sh BRAID WORKER OUTDIR layers_2|layers_4|gpt|dp_tp|checkpoint|llama
set -euo pipefail
braid=$1 worker=$2 out=$3 scenario=$4
rm -rf "$out"
mkdir -p "$out"
n=0
# run NPROC NAME ARGS...: one launch; its output in OUTDIR/NAME.log; every rank must say OK.
run() {
  local np=$1 name=$2
  shift 2
  if ! "$braid" launch --nproc-per-node "$np" --timeout 120 "$worker" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "FAIL: $name ($*)" >&2
    exit 1
  fi
  local ok
  ok=$(grep -c -E '^\[rank [0-9]+\] tp_worker rank [0-9]+: .* OK' "$out/$name.log" || true)
  if [[ $ok -ne $np ]]; then
    cat "$out/$name.log"
    echo "FAIL: $name: $ok of $np ranks reported OK" >&2
    exit 1
  fi
  grep -h "tp_worker rank 0:" "$out/$name.log" | sed "s/^\[rank 0\] /$name: /"
  n=$((n + 1))
}
# Dropout (masks seeded per micro-batch) and clipping in every training run.
opts=(--dropout 0.1 --clip 0.5)
case $scenario in
layers_2) run 2 layers layers ;;
layers_4) run 4 layers layers ;;
gpt)
  run 2 tp2_plain train --tp 2
  run 2 tp2 train --tp 2 "${opts[@]}"
  run 2 tp2_sp train --tp 2 --sp "${opts[@]}"
  run 2 tp2_sp_checkpointing train --tp 2 --sp --checkpointing "${opts[@]}"
  run 4 tp4_sp train --tp 4 --sp "${opts[@]}"
  # bf16 autocast on both sides: the row-parallel all-reduce adds bf16 partial sums, so only
  # gross errors show (measured 0.043 after 3 Adam steps at lr 1e-2).
  run 2 tp2_bf16 train --tp 2 --bf16 --tol 0.1 "${opts[@]}"
  ;;
dp_tp)
  for s in 1 3; do run 4 "dp2_tp2_s$s" train --tp 2 --stage "$s" "${opts[@]}"; done
  for s in 0 2 3; do run 4 "dp2_tp2_s${s}_sp" train --tp 2 --stage "$s" --sp "${opts[@]}"; done
  # The ShardedModel's collectives on its communication thread while the tp group's run on
  # the calling thread (prefetching gathers at stage 3).
  run 4 dp2_tp2_s3_sp_overlap train --tp 2 --stage 3 --sp --overlap "${opts[@]}"
  ;;
checkpoint)
  steps=(--steps 4)
  # Saved by DP 2 x TP 2 after 2 of 4 steps: global tensors in the folder; resumed at TP 1
  # (2 ranks at stage 3, 1 rank) and TP 4.
  run 4 save_dp2_tp2 train --tp 2 --stage 1 "${steps[@]}" "${opts[@]}" --save-at 2 "$out/ckpt_tp2"
  "$worker" check-ckpt "$out/ckpt_tp2" 2 "${opts[@]}"
  run 2 resume_tp1_dp2 train --tp 1 --stage 3 "${steps[@]}" "${opts[@]}" --resume "$out/ckpt_tp2" --start 2
  run 1 resume_tp1 train --tp 1 --stage 0 "${steps[@]}" "${opts[@]}" --resume "$out/ckpt_tp2" --start 2
  run 4 resume_tp4 train --tp 4 --stage 1 "${steps[@]}" "${opts[@]}" --resume "$out/ckpt_tp2" --start 2
  # The reverse: saved at TP 1 (DP 2), resumed at DP 2 x TP 2 and at TP 2 with SP.
  run 2 save_dp2_tp1 train --tp 1 --stage 2 "${steps[@]}" "${opts[@]}" --save-at 2 "$out/ckpt_tp1"
  "$worker" check-ckpt "$out/ckpt_tp1" 2 "${opts[@]}"
  run 4 resume_dp2_tp2 train --tp 2 --stage 3 "${steps[@]}" "${opts[@]}" --resume "$out/ckpt_tp1" --start 2
  run 2 resume_tp2_sp train --tp 2 --stage 0 --sp "${steps[@]}" "${opts[@]}" --resume "$out/ckpt_tp1" --start 2
  ;;
llama)
  # The Llama family (grouped-query attention, a pad id; no dropout), with clipping: TP 2, and
  # with sequence parallelism (the sequence split at embed_tokens) at TP 2 and 4, tied and
  # untied, with activation checkpointing, and under DP 2 x TP 2 at ZeRO 1 and 3; a TP 2 + SP
  # checkpoint holds the global Llama and resumes at TP 1.
  lopts=(--model llama --clip 0.5)
  run 2 llama_tp2 train --tp 2 "${lopts[@]}"
  run 2 llama_tp2_sp train --tp 2 --sp "${lopts[@]}"
  run 2 llama_tp2_sp_tied train --tp 2 --sp --tied "${lopts[@]}"
  run 2 llama_tp2_sp_checkpointing train --tp 2 --sp --checkpointing "${lopts[@]}"
  run 4 llama_tp4_sp train --tp 4 --sp "${lopts[@]}"
  run 4 llama_tp4_sp_tied train --tp 4 --sp --tied "${lopts[@]}"
  run 4 llama_dp2_tp2_s1_sp train --tp 2 --stage 1 --sp "${lopts[@]}"
  run 4 llama_dp2_tp2_s3_sp_tied train --tp 2 --stage 3 --sp --tied "${lopts[@]}"
  run 2 llama_save_tp2_sp train --tp 2 --stage 0 --sp --steps 4 "${lopts[@]}" --save-at 2 "$out/ckpt_llama"
  "$worker" check-ckpt "$out/ckpt_llama" 2 "${lopts[@]}"
  run 1 llama_resume_tp1 train --tp 1 --stage 0 --steps 4 "${lopts[@]}" --resume "$out/ckpt_llama" --start 2
  ;;
*)
  echo "run_tp.sh: unknown scenario $scenario" >&2
  exit 2
  ;;
esac
echo "OK: $scenario ($n launches)"

#!/usr/bin/env bash
# ZeRO stages and world sizes give the same bits (Note [Deterministic reduction], fsdp.h):
# fsdp_worker trains the same small GPT on the same global batch under `braid launch` for each
# (world size, stage) of a variant, and every result must equal the first one bit for bit; the
# single-process "plain" run (ordinary gradient accumulation) must agree within a tolerance.
#   run_fsdp_equivalence.sh BRAID WORKER OUTDIR VARIANT
# VARIANT: f32 (W 1, 2, 4 x stages 0-3, transformer wrap), mixed (bf16 autocast, clip 0.5,
# activation checkpointing, size-based wrap; W 1, 2, 4 x stages 0, 2, 3 and stage 3 keeping
# parameters after forward; and bf16 param_dtype / reduce_dtype at stages 1-3), w3 (G 6: W 1, 3, 6 at stage 3 and W 3 at stage 1), resume (a
# sharded checkpoint saved at one world size and stage, resumed at others), ddp (stage 0's
# buckets and DistributedDataParallelKwargs, bf16 parameters at stage 0, the all_reduce mode),
# hsdp (shard groups of 2 or 1 ranks replicated across the others; checkpoints across layouts),
# offload (master shards and optimizer state in files: offload_param / offload_optimizer nvme).
set -euo pipefail
braid=$1 worker=$2 out=$3 variant=$4
rm -rf "$out"
mkdir -p "$out"
run() { # nproc name stage G steps [options]
  local n=$1 name=$2 stage=$3 G=$4 steps=$5
  shift 5
  if ! "$braid" launch --nproc-per-node "$n" --timeout 120 "$worker" train "$stage" "$G" "$steps" \
    "$out/$name.safetensors" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "FAIL: $name" >&2
    exit 1
  fi
  grep -h "loss" "$out/$name.log" | tail -1 | sed "s/^/$name: /"
}
same() { "$worker" compare "$out/$1.safetensors" "$out/$2.safetensors" exact >/dev/null ||
  { echo "FAIL: $2 differs from $1" >&2; exit 1; }; echo "$2 == $1 (bit for bit)"; }
close() { "$worker" compare "$out/$1.safetensors" "$out/$2.safetensors" "$3"; }

case $variant in
f32)
  for w in 1 2 4; do for s in 0 1 2 3; do run "$w" "w${w}_s${s}" "$s" 4 3; done; done
  for w in 1 2 4; do for s in 0 1 2 3; do [[ "w${w}_s${s}" == w1_s0 ]] || same w1_s0 "w${w}_s${s}"; done; done
  # Built on the meta device and materialized shard by shard (GPT::init_weights_range): the
  # same bits as a whole initialization.
  run 4 w4_s3_meta 3 4 3 --meta-init
  run 1 w1_s0_meta 0 4 3 --meta-init
  run 2 w2_s1_meta 1 4 3 --meta-init
  same w1_s0 w4_s3_meta
  same w1_s0 w1_s0_meta
  same w1_s0 w2_s1_meta
  # Collectives on the calling thread instead of the communication thread: the same bits.
  run 4 w4_s3_no_overlap 3 4 3 --no-overlap
  run 2 w2_s0_no_overlap 0 4 3 --no-overlap
  same w1_s0 w4_s3_no_overlap
  same w1_s0 w2_s0_no_overlap
  # no_sync for all but the last micro-batch: per world size the stages agree bit for bit;
  # across world sizes only within rounding (the fold sees per-rank sums).
  for s in 0 3; do run 2 "w2_s${s}_no_sync" "$s" 4 3 --no-sync; done
  same w2_s0_no_sync w2_s3_no_sync
  close w1_s0 w2_s0_no_sync 1e-4
  # Ordinary gradient accumulation adds a tied weight's two uses into the running sum one by
  # one, while the fold adds whole micro-batch gradients: after one step only the tied
  # embedding differs (by rounding); later steps carry that on.
  run 2 w2_s3_one_step 3 4 1
  "$worker" train plain 4 1 "$out/plain_one_step.safetensors" >"$out/plain_one_step.log"
  close w2_s3_one_step plain_one_step 1e-7
  "$worker" train plain 4 3 "$out/plain.safetensors" >"$out/plain.log"
  close w1_s0 plain 1e-4
  ;;
mixed)
  opts=(--bf16 --clip 0.5 --checkpointing --wrap size)
  for w in 1 2 4; do for s in 0 2 3; do run "$w" "w${w}_s${s}" "$s" 4 3 "${opts[@]}"; done; done
  run 2 w2_s3_keep 3 4 3 "${opts[@]}" --keep-after-forward
  for w in 1 2 4; do for s in 0 2 3; do [[ "w${w}_s${s}" == w1_s0 ]] || same w1_s0 "w${w}_s${s}"; done; done
  same w1_s0 w2_s3_keep
  # The clipped norm printed by every run is the same number.
  norms=$(grep -h "grad norm" "$out"/w*_s*.log | sort -u | wc -l)
  [[ $norms -eq 3 ]] || { grep -h "grad norm" "$out"/w*_s*.log | sort | uniq -c; echo "FAIL: grad norms differ" >&2; exit 1; }
  # FSDP MixedPrecision: parameters gathered in bf16, gradients exchanged and folded in bf16,
  # f32 master shards: every world size and stage 1-3 agrees bit for bit.
  mp=(--param-dtype bf16 --reduce-dtype bf16 --clip 0.5 --checkpointing)
  for w in 1 2 4; do for s in 1 3; do run "$w" "w${w}_s${s}_bf16_params" "$s" 4 3 "${mp[@]}"; done; done
  run 2 w2_s2_bf16_params 2 4 3 "${mp[@]}"
  for r in w1_s3 w2_s1 w2_s3 w2_s2 w4_s1 w4_s3; do same w1_s1_bf16_params "${r}_bf16_params"; done
  # Against f32 parameters under bf16 autocast, one step: bf16 gradients flip the sign of some
  # near-zero elements, and Adam's first update is about lr * sign(g), so up to 2 lr (2e-2 of
  # the largest parameter, 1.0) apart.
  run 2 w2_s3_bf16_params_one_step 3 4 1 "${mp[@]}"
  run 2 w2_s3_autocast_one_step 3 4 1 "${opts[@]}"
  close w2_s3_bf16_params_one_step w2_s3_autocast_one_step 3e-2
  # One step (Adam's first update is about lr * sign(g): a gradient sign flipped by rounding
  # would show as 2 lr; none is, here).
  run 2 w2_s3_one_step 3 4 1 "${opts[@]}"
  "$worker" train plain 4 1 "$out/plain_one_step.safetensors" --bf16 --clip 0.5 >"$out/plain_one_step.log"
  close w2_s3_one_step plain_one_step 1e-5
  ;;
w3)
  run 1 w1_s3 3 6 2
  run 3 w3_s3 3 6 2
  run 6 w6_s3 3 6 2
  run 3 w3_s1 1 6 2
  same w1_s3 w3_s3
  same w1_s3 w6_s3
  same w1_s3 w3_s1
  ;;
resume)
  # Save a sharded checkpoint (model + AdamW state) after 2 of 4 steps at W 4 / stage 3, resume
  # it at W 2 / stage 1, W 1 / stage 0 and W 4 / stage 2: each continued run equals the
  # uninterrupted one.
  run 1 ref 0 4 4
  run 4 w4_s3_saving 3 4 4 --save-at 2 "$out/ckpt"
  run 2 w2_s1_resumed 1 4 4 --resume "$out/ckpt" --start 2
  run 1 w1_s0_resumed 0 4 4 --resume "$out/ckpt" --start 2
  run 4 w4_s2_resumed 2 4 4 --resume "$out/ckpt" --start 2
  same ref w4_s3_saving
  same ref w2_s1_resumed
  same ref w1_s0_resumed
  same ref w4_s2_resumed
  # And the reverse: saved at W 2 / stage 1, resumed at W 4 / stage 3.
  run 2 w2_s1_saving 1 4 4 --save-at 2 "$out/ckpt2"
  run 4 w4_s3_resumed 3 4 4 --resume "$out/ckpt2" --start 2
  same ref w4_s3_resumed
  # The training state beside (TrainingState): an LR schedule and per-rank dropout RNG
  # streams. Resumed at the same world size, the run continues bit for bit; without
  # restoring the RNG states it does not (the dropout masks differ). The schedule alone
  # resumes at any world size (no dropout).
  st=(--schedule --dropout 0.1)
  run 2 ref_state 2 4 4 "${st[@]}"
  run 2 w2_s2_state_saving 2 4 4 "${st[@]}" --save-at 2 "$out/ckpt3"
  run 2 w2_s3_state_resumed 3 4 4 "${st[@]}" --resume "$out/ckpt3" --start 2
  run 2 w2_s3_state_no_rng 3 4 4 "${st[@]}" --resume "$out/ckpt3" --start 2 --no-rng-restore
  same ref_state w2_s2_state_saving
  same ref_state w2_s3_state_resumed
  if "$worker" compare "$out/ref_state.safetensors" "$out/w2_s3_state_no_rng.safetensors" exact >/dev/null 2>&1; then
    echo "FAIL: resuming without the RNG states gave the same bits (the test cannot tell)" >&2; exit 1
  fi
  echo "w2_s3_state_no_rng != ref_state (as expected: other dropout masks)"
  run 1 ref_sched 0 4 4 --schedule
  run 4 w4_s3_sched_saving 3 4 4 --schedule --save-at 2 "$out/ckpt4"
  run 2 w2_s1_sched_resumed 1 4 4 --schedule --resume "$out/ckpt4" --start 2
  same ref_sched w4_s3_sched_saving
  same ref_sched w2_s1_sched_resumed
  "$worker" compare "$out/ref.safetensors" "$out/ref_sched.safetensors" exact >/dev/null 2>&1 &&
    { echo "FAIL: the schedule changed nothing" >&2; exit 1; }
  ;;
ddp)
  # Stage 0 reduces per DDP bucket; tiny buckets (a 2 KB cap: many buckets, launched as the
  # backward produces them) give the bits of stage 1 for W 1, 2, 4, with and without
  # gradient_as_bucket_view and the communication thread.
  small=(--bucket-mb 0.002)
  run 1 w1_s1 1 4 3
  for w in 1 2 4; do run "$w" "w${w}_s0_buckets" 0 4 3 "${small[@]}"; done
  run 2 w2_s0_view 0 4 3 "${small[@]}" --bucket-view
  run 4 w4_s0_no_overlap 0 4 3 "${small[@]}" --no-overlap
  for r in w1_s0_buckets w2_s0_buckets w4_s0_buckets w2_s0_view w4_s0_no_overlap; do same w1_s1 "$r"; done
  # bf16 parameters and reduction at stage 0 (f32 masters) equal stages 1 and 3 with the same
  # MixedPrecision, for every world size; comm_hook bf16 is the same reduction.
  mp=(--param-dtype bf16 --reduce-dtype bf16)
  run 1 w1_s3_bf16 3 4 3 "${mp[@]}"
  for w in 1 2 4; do run "$w" "w${w}_s0_bf16" 0 4 3 "${mp[@]}" "${small[@]}"; done
  run 2 w2_s1_bf16 1 4 3 "${mp[@]}"
  run 2 w2_s0_hook 0 4 3 --param-dtype bf16 --comm-hook bf16
  for r in w1_s0_bf16 w2_s0_bf16 w4_s0_bf16 w2_s1_bf16 w2_s0_hook; do same w1_s3_bf16 "$r"; done
  # deterministic = false: torch DDP's all_reduce per bucket. One rank: the same bits (nothing
  # to reorder); 2 and 4 ranks: within rounding, also with no_sync.
  run 1 w1_s0_all_reduce 0 4 3 --all-reduce "${small[@]}"
  same w1_s1 w1_s0_all_reduce
  run 2 w2_s0_all_reduce 0 4 3 --all-reduce "${small[@]}"
  run 4 w4_s0_all_reduce 0 4 3 --all-reduce
  run 2 w2_s0_all_reduce_no_sync 0 4 3 --all-reduce --no-sync
  close w1_s1 w2_s0_all_reduce 1e-4
  close w1_s1 w4_s0_all_reduce 1e-4
  close w1_s1 w2_s0_all_reduce_no_sync 1e-4
  ;;
hsdp)
  # HSDP: W 4 as 2 replicas of 2-rank shard groups (and 4 replicas of 1 rank, and W 6 as 3 x
  # 2 with G 6): the ordered reduction gathers every replica's contributions, so the bits are
  # those of W 1.
  run 1 w1_s1 1 4 3
  for s in 1 2 3; do run 4 "w4_s${s}_hsdp2" "$s" 4 3 --shard-size 2; done
  run 4 w4_s3_hsdp1 3 4 3 --shard-size 1
  run 4 w4_s3_hsdp2_no_overlap 3 4 3 --shard-size 2 --no-overlap
  for r in w4_s1_hsdp2 w4_s2_hsdp2 w4_s3_hsdp2 w4_s3_hsdp1 w4_s3_hsdp2_no_overlap; do same w1_s1 "$r"; done
  run 1 w1_s3_g6 3 6 2
  run 6 w6_s3_hsdp2 3 6 2 --shard-size 2
  same w1_s3_g6 w6_s3_hsdp2
  # With bf16 autocast, clipping (the norm over shard groups), checkpointing, size-based wrap;
  # and FSDP MixedPrecision.
  opts=(--bf16 --clip 0.5 --checkpointing --wrap size)
  run 1 w1_s3_mixed 3 4 3 "${opts[@]}"
  run 4 w4_s3_mixed_hsdp2 3 4 3 "${opts[@]}" --shard-size 2
  same w1_s3_mixed w4_s3_mixed_hsdp2
  mp=(--param-dtype bf16 --reduce-dtype bf16)
  run 1 w1_s3_bf16 3 4 3 "${mp[@]}"
  run 4 w4_s3_bf16_hsdp2 3 4 3 "${mp[@]}" --shard-size 2
  same w1_s3_bf16 w4_s3_bf16_hsdp2
  # deterministic = false: a fold per replica, the replicas' sums all_reduced once per step.
  run 4 w4_s3_hsdp2_all_reduce 3 4 3 --shard-size 2 --all-reduce
  close w1_s1 w4_s3_hsdp2_all_reduce 1e-4
  # Checkpoints: saved by HSDP (the first replica writes), resumed by plain ZeRO, and back.
  run 4 w4_s3_hsdp2_saving 3 4 3 --shard-size 2 --save-at 1 "$out/ckpt"
  run 2 w2_s1_resumed 1 4 3 --resume "$out/ckpt" --start 1
  run 2 w2_s2_saving 2 4 3 --save-at 1 "$out/ckpt2"
  run 4 w4_s3_hsdp2_resumed 3 4 3 --shard-size 2 --resume "$out/ckpt2" --start 1
  for r in w4_s3_hsdp2_saving w2_s1_resumed w4_s3_hsdp2_resumed; do same w1_s1 "$r"; done
  ;;
offload)
  # DeepSpeed's offload_param_device / offload_optimizer_device = nvme at stage 3: master
  # shards and AdamW state live in files between uses; the bits do not change (W 1, 2, 4,
  # with and without the communication thread, with bf16 parameters, and through a checkpoint
  # saved with offload and resumed without, and the reverse).
  nv="$out/nvme"
  mkdir -p "$nv"
  run 1 w1_s3 3 4 3
  run 1 w1_s3_offload 3 4 3 --offload-param "$nv" --offload-optimizer "$nv"
  run 2 w2_s3_offload 3 4 3 --offload-param "$nv" --offload-optimizer "$nv"
  run 4 w4_s3_offload 3 4 3 --offload-param "$nv" --offload-optimizer "$nv" --no-overlap
  run 2 w2_s1_offload_opt 1 4 3 --offload-optimizer "$nv"
  for r in w1_s3_offload w2_s3_offload w4_s3_offload w2_s1_offload_opt; do same w1_s3 "$r"; done
  mp=(--param-dtype bf16 --reduce-dtype bf16)
  run 1 w1_s3_bf16 3 4 3 "${mp[@]}"
  run 4 w4_s3_bf16_offload 3 4 3 "${mp[@]}" --offload-param "$nv" --offload-optimizer "$nv"
  same w1_s3_bf16 w4_s3_bf16_offload
  run 2 w2_s3_offload_saving 3 4 3 --offload-param "$nv" --offload-optimizer "$nv" --save-at 1 "$out/ckpt"
  run 4 w4_s3_resumed 3 4 3 --resume "$out/ckpt" --start 1
  run 2 w2_s2_saving 2 4 3 --save-at 1 "$out/ckpt2"
  run 4 w4_s3_offload_resumed 3 4 3 --offload-param "$nv" --offload-optimizer "$nv" --resume "$out/ckpt2" --start 1
  for r in w2_s3_offload_saving w4_s3_resumed w4_s3_offload_resumed; do same w1_s3 "$r"; done
  # Every store removed its files when its process ended.
  left=$(find "$nv" -mindepth 1 | wc -l)
  [[ $left -eq 0 ]] || { find "$nv"; echo "FAIL: offload files left behind" >&2; exit 1; }
  ;;
*)
  echo "run_fsdp_equivalence.sh: unknown variant $variant" >&2
  exit 2
  ;;
esac
echo "OK: $variant"

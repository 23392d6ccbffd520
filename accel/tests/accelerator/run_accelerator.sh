#!/usr/bin/env bash
# The Accelerator on real processes (accelerator_worker under `braid launch`):
#   run_accelerator.sh BRAID WORKER OUTDIR VARIANT
# train:   W 1 x 4 accumulation steps, W 2 x 2 and W 4 x 1 train to the same bits (the
#          sharding layer's ordered reduction), at ZeRO-3, ZeRO-1/2 and DDP, with bf16 autocast
#          and clipping; save_state -> SIGKILL -> load_state -> continue equals the
#          uninterrupted run, also resumed at another world size; and three launches (W 2 saves
#          at step 2, W 1 resumes and saves at 4, W 4 resumes and finishes) equal one.
# parallel: tensor and pipeline parallelism through the Accelerator (tp 2, pp 2, tp 2 with
#          sequence parallelism, tp 2 x pp 2, dp 2 x pp 2 x tp 2): each step's loss and global
#          gradient norm (clipped at 0.05) within 1e-6 of one process's (fp32; the split layers
#          add in another order), the dp split of the data, get_state_dict / save_model whole;
#          fp16 through pipelines with skipped (overflowing) steps within 1e-3; interleaved
#          1F1B (two chunks per rank); save_state / load_state round trips in every layout.
# parallel_llama: the second family (nn::Llama: grouped-query attention, untied head) through
#          the same PreparedModel and train_step: ZeRO-3 over 2 ranks, tp 2, pp 2, tp 2 x pp 2,
#          each step's loss and norm within 1e-6 of one process's, save/load round trips.
# methods: gather_for_metrics on 3 ranks, find_executable_batch_size with one rank failing,
#          debug: true catching a mismatched call, save_on_each_node on two ranks posing as
#          two machines, and the other methods (misc).
set -euo pipefail
braid=$1 worker=$2 out=$3 variant=$4
rm -rf "$out"
mkdir -p "$out"
run() { # name nproc args...
  local name=$1 n=$2
  shift 2
  if ! "$braid" launch --nproc-per-node "$n" --timeout 120 "$worker" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "FAIL: $name" >&2
    exit 1
  fi
  grep -h "loss\|metrics\|tried\|OK\|resumed" "$out/$name.log" | tail -2 | sed "s/^/$name: /"
}
killed() { # name nproc args...: the job must fail (a rank SIGKILLs itself after saving)
  local name=$1 n=$2
  shift 2
  if "$braid" launch --nproc-per-node "$n" --timeout 120 --grace-period 2 "$worker" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"; echo "FAIL: $name should have been killed" >&2; exit 1
  fi
  grep -q "saved at step" "$out/$name.log" || { cat "$out/$name.log"; echo "FAIL: $name saved nothing" >&2; exit 1; }
  echo "$name: killed after saving (as planned)"
}
same() { cmp -s "$out/$1/model.safetensors" "$out/$2/model.safetensors" ||
  { echo "FAIL: $2 differs from $1" >&2; exit 1; }; echo "$2 == $1 (bit for bit)"; }

case $variant in
train)
  for s in 3 1 0; do
    run "w1_a4_s$s" 1 train "$out/w1_a4_s$s" --steps 3 --accum 4 --stage "$s" --project "$out/p"
    run "w2_a2_s$s" 2 train "$out/w2_a2_s$s" --steps 3 --accum 2 --stage "$s" --project "$out/p"
    run "w4_a1_s$s" 4 train "$out/w4_a1_s$s" --steps 3 --accum 1 --stage "$s" --project "$out/p"
  done
  for s in 3 1 0; do same w1_a4_s3 "w1_a4_s$s"; same w1_a4_s3 "w2_a2_s$s"; same w1_a4_s3 "w4_a1_s$s"; done
  mix=(--precision bf16 --clip 0.5)
  run w1_a4_bf16 1 train "$out/w1_a4_bf16" --steps 3 --accum 4 "${mix[@]}" --project "$out/p"
  run w4_a1_bf16 4 train "$out/w4_a1_bf16" --steps 3 --accum 1 "${mix[@]}" --project "$out/p"
  same w1_a4_bf16 w4_a1_bf16
  # save_state after step 2 of 4 (the job ends there), load_state, continue.
  run ref 2 train "$out/ref" --steps 4 --accum 2 --project "$out/p_ref"
  killed saving 2 train "$out/unused" --steps 4 --accum 2 --save-at 2 --project "$out/p_save"
  [[ -d "$out/p_save/checkpoints/checkpoint_0/model" ]] || { echo "FAIL: no checkpoint_0" >&2; exit 1; }
  run resumed 2 train "$out/resumed" --steps 4 --accum 2 --resume --project "$out/p_save"
  same ref resumed
  # At another world size: a schedule counted in processes (Accelerate's AcceleratedScheduler
  # steps num_processes times per step) does not carry over, so a constant one here.
  run ref_const 2 train "$out/ref_const" --steps 6 --accum 2 --constant-lr --project "$out/p_rc"
  killed saving_const 2 train "$out/unused" --steps 6 --accum 2 --constant-lr --save-at 2 --project "$out/p_c"
  # A save after a resume (the second launch, on one process) records the position from the
  # epoch's start, so the third launch (4 processes) resumes at step 4, not at step 2.
  killed resaving_w1 1 train "$out/unused" --steps 6 --accum 4 --constant-lr --resume --save-at 4 --project "$out/p_c"
  grep -q "resumed after 8 batches" "$out/resaving_w1.log" ||
    { cat "$out/resaving_w1.log"; echo "FAIL: the second launch did not resume at step 2" >&2; exit 1; }
  run resumed_w4 4 train "$out/resumed_w4" --steps 6 --accum 1 --constant-lr --resume --project "$out/p_c"
  grep -q "resumed after 4 batches" "$out/resumed_w4.log" ||
    { cat "$out/resumed_w4.log"; echo "FAIL: the third launch did not resume at step 4" >&2; exit 1; }
  same ref_const resumed_w4
  ;;
parallel_llama)
  steps() { grep -oE "step [0-9]+ loss [^ ]+ norm [^ ]+" "$out/$1.log"; }
  run one 1 parallel "$out/one" --model llama --tp 1 --pp 1 --save-load
  for c in "z3 2 --tp 1 --pp 1" "tp2 2 --tp 2 --pp 1" "pp2 2 --tp 1 --pp 2" "tp2pp2 4 --tp 2 --pp 2"; do
    set -- $c
    name=$1 n=$2
    shift 2
    run "$name" "$n" parallel "$out/$name" --model llama "$@" --save-load
    grep -q "parallel OK" "$out/$name.log" || { echo "FAIL: $name did not finish" >&2; exit 1; }
    grep -q "load_state restored the model" "$out/$name.log" ||
      { echo "FAIL: $name: no save/load round trip" >&2; exit 1; }
    [[ $(steps one | wc -l) -ge 3 && $(steps one | wc -l) -eq $(steps "$name" | wc -l) ]] ||
      { echo "FAIL: $name and one ran different numbers of steps" >&2; exit 1; }
    paste -d' ' <(steps one) <(steps "$name") | awk -v name="$name" '
      function off(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
      { if (off($4, $10) > 1e-6 || off($6, $12) > 1e-6) { print "FAIL: " name ": " $0; bad = 1 } }
      END { exit bad }' || exit 1
    echo "$name: every step's loss and norm within 1e-6 of one process's"
  done
  ;;
parallel)
  # "step N loss X norm Y S" with S = 1 for a skipped (fp16 overflow) step, else 0.
  steps() { grep -oE "step [0-9]+ loss [^ ]+ norm [^ ]+( skipped)?" "$out/$1.log" |
    sed -E 's/ skipped$/ 1/; t; s/$/ 0/'; }
  compare() { # reference name tolerance
    [[ $(steps "$1" | wc -l) -eq $(steps "$2" | wc -l) && $(steps "$1" | wc -l) -ge 3 ]] ||
      { echo "FAIL: $2 and $1 ran different numbers of steps" >&2; exit 1; }
    paste -d' ' <(steps "$1") <(steps "$2") | awk -v name="$2" -v tol="$3" '
      function off(a, b) { d = a - b; if (d < 0) d = -d; return d / (b < 0 ? -b : b) }
      { bad_line = $7 != $14 || off($4, $11) > tol || ($7 == 0 && off($6, $13) > tol)
        if (bad_line) { print "FAIL: " name ": " $0; bad = 1 } }
      END { exit bad }' || exit 1
    echo "$2: every step's loss and norm within $3 of $1 (and the same steps skipped)"
  }
  # Each case also saves its state, takes one more step and loads it back (--save-load).
  cases=("tp2 2 --tp 2 --pp 1" "pp2 2 --tp 1 --pp 2" "tp2sp 2 --tp 2 --pp 1 --sp"
         "tp2pp2 4 --tp 2 --pp 2" "dp2pp2tp2 8 --tp 2 --pp 2")
  run one 1 parallel "$out/one" --tp 1 --pp 1 --save-load
  for c in "${cases[@]}"; do
    set -- $c
    name=$1 n=$2
    shift 2
    run "$name" "$n" parallel "$out/$name" "$@" --save-load
    grep -q "parallel OK" "$out/$name.log" || { echo "FAIL: $name did not finish" >&2; exit 1; }
    grep -q "load_state restored the model" "$out/$name.log" ||
      { echo "FAIL: $name: no save/load round trip" >&2; exit 1; }
    compare one "$name" 1e-6
  done
  # Interleaved 1F1B (megatron_lm_num_layers_per_virtual_pipeline_stage 1, 4 layers: two
  # chunks per rank, saved into one folder) against one process with 4 layers.
  run one_l4 1 parallel "$out/one_l4" --tp 1 --pp 1 --layers 4
  for c in "pp2v2 2 --tp 1 --pp 2" "dp2pp2v2 4 --tp 1 --pp 2" "tp2pp2v2 4 --tp 2 --pp 2"; do
    set -- $c
    name=$1 n=$2
    shift 2
    run "$name" "$n" parallel "$out/$name" "$@" --layers 4 --vpp 1 --save-load
    grep -q "pipeline: 2 chunk(s) per rank, interleaved-1f1b" "$out/$name.log" ||
      { cat "$out/$name.log"; echo "FAIL: $name is not interleaved" >&2; exit 1; }
    grep -q "load_state restored the model" "$out/$name.log" ||
      { echo "FAIL: $name: no save/load round trip" >&2; exit 1; }
    compare one_l4 "$name" 1e-6
  done
  # fp16 with a GradScaler whose first scale overflows: steps 0 and 1 skipped everywhere, the
  # rest within fp16's rounding of one process.
  fp16=(--precision fp16 --steps 4 --init-scale 1073741824 --backoff 0.00390625)
  run one_fp16 1 parallel "$out/one_fp16" --tp 1 --pp 1 "${fp16[@]}"
  [[ $(steps one_fp16 | awk '$7 == 1' | wc -l) -eq 2 ]] ||
    { cat "$out/one_fp16.log"; echo "FAIL: one_fp16 should skip 2 steps" >&2; exit 1; }
  for c in "pp2_fp16 2 --tp 1 --pp 2" "tp2pp2_fp16 4 --tp 2 --pp 2"; do
    set -- $c
    name=$1 n=$2
    shift 2
    run "$name" "$n" parallel "$out/$name" "$@" "${fp16[@]}"
    compare one_fp16 "$name" 1e-3
  done
  ;;
methods)
  run metrics 3 metrics
  run batch_size 2 batch-size
  [[ $(grep -c "tried 64 57 51 45 40 36 32 28 25 22 19 17 15 -> 15" "$out/batch_size.log") -eq 2 ]] ||
    { cat "$out/batch_size.log"; echo "FAIL: both ranks must settle on 15" >&2; exit 1; }
  run debug 2 debug
  [[ $(grep -c "debug mode OK (caught the mismatch)" "$out/debug.log") -eq 2 ]] ||
    { cat "$out/debug.log"; echo "FAIL: debug: true must catch the mismatch on both ranks" >&2; exit 1; }
  run nodes 2 nodes "$out/nodes"
  for f in each/node0 each/node1 main/node0; do
    [[ -f "$out/nodes/$f/model.safetensors" ]] || { echo "FAIL: save_on_each_node: no $f" >&2; exit 1; }
  done
  [[ ! -e "$out/nodes/main/node1" ]] || { echo "FAIL: without save_on_each_node rank 1 wrote" >&2; exit 1; }
  echo "save_on_each_node: each node's main process wrote; without it, only the main process"
  run misc 2 misc "$out/misc"
  # Trackers wrote on the main process only.
  files=$(find "$out/misc/run" -type f | wc -l)
  [[ $files -ge 2 ]] || { find "$out/misc"; echo "FAIL: tracker files missing" >&2; exit 1; }
  grep -q '"loss"' "$out"/misc/run/*.jsonl || { echo "FAIL: jsonl has no loss" >&2; exit 1; }
  ;;
*)
  echo "run_accelerator.sh: unknown variant $variant" >&2
  exit 2
  ;;
esac
echo "OK: $variant"

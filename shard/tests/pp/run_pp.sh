#!/usr/bin/env bash
# Pipeline parallelism against single-process training (see CMakeLists.txt here).
#   run_pp.sh BRAID WORKER OUTDIR pp2|pp4|dp2pp2|tp2pp2|dp2tp2pp2|kill
# With the head's gradient sent per micro-batch (--tied per-mb) every layout must give the bits
# of its reference: "plain" (one process, ordinary gradient accumulation) for pipelines alone,
# "fold" (one process through a ShardedModel) with data parallelism. With --tied once only the
# tied embedding's gradient is summed in another order: within rounding, and exact for M = 1.
set -euo pipefail
braid=$1 worker=$2 out=$3 scenario=$4
rm -rf "$out"
mkdir -p "$out"
# The one-process references.
ref() { # name mode M steps [--dp D]
  local name=$1 mode=$2 M=$3 steps=$4
  shift 4
  if [[ $mode == fold ]]; then
    "$braid" launch --nproc-per-node 1 "$worker" train fold 1 "$M" "$steps" "$out/$name" "$@" \
      >"$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "FAIL: $name" >&2; exit 1; }
  else
    "$worker" train plain 1 "$M" "$steps" "$out/$name" "$@" >"$out/$name.log" 2>&1 ||
      { cat "$out/$name.log"; echo "FAIL: $name" >&2; exit 1; }
  fi
  grep -h "loss" "$out/$name.log" | tail -1 | sed "s/^/$name: /" || true
}
same() { "$worker" compare "$out/$1" "$out/$2" exact >/dev/null ||
  { echo "FAIL: $2 differs from $1" >&2; exit 1; }; echo "$2 == $1 (bit for bit)"; }
close() { "$worker" compare "$out/$1" "$out/$2" "$3" | head -1 | sed "s/^/$2 vs $1: /"; }
# Tensor parallelism changes the order of sums: the parameters within the TP tests' tolerance
# (2e-4 of the largest after the steps) and every step's loss within 1e-5 of the reference's.
near() { # reference run
  close "$1" "$2" 2e-4
  paste <(grep -ho "step [0-9]* loss [0-9.]*" "$out/$1.log") \
    <(grep -ho "step [0-9]* loss [0-9.]*" "$out/$2.log") |
    awk -v r="$2" '{ d = $4 - $8; if (d < 0) d = -d; if ($2 != $6 || d > 1e-5) bad = 1; n++ }
      END { if (bad || n == 0) { print "FAIL: " r ": losses differ from the reference" > "/dev/stderr"; exit 1 } }'
}

# Pipeline::clip_grad_norm_ (printed each step by pipelined runs) against the norm of the
# plain reference's averaged gradient, within 1e-5 relative (another order of sums).
norms() { # reference run
  paste <(grep -ho "step [0-9]* loss [0-9.]* norm [0-9.e+-]*" "$out/$1.log") \
    <(grep -ho "step [0-9]* loss [0-9.]* norm [0-9.e+-]*" "$out/$2.log") |
    awk -v r="$2" '{ d = $6 - $12; if (d < 0) d = -d; if ($2 != $8 || d > 1e-5 * $6) bad = 1; n++ }
      END { if (bad || n == 0) { print "FAIL: " r ": gradient norms differ from the reference" > "/dev/stderr"; exit 1 } }'
  echo "$2: gradient norms within 1e-5 of $1's"
}

# A pipelined run of nproc ranks; the options follow the output path.
train() { # nproc name mode pp M steps [options...]
  local n=$1 name=$2 mode=$3 pp=$4 M=$5 steps=$6
  shift 6
  if ! "$braid" launch --nproc-per-node "$n" --timeout 120 "$worker" train "$mode" "$pp" "$M" \
    "$steps" "$out/$name" "$@" >"$out/$name.log" 2>&1; then
    cat "$out/$name.log"
    echo "FAIL: $name" >&2
    exit 1
  fi
  grep -h "loss" "$out/$name.log" | tail -1 | sed "s/^/$name: /"
}

case $scenario in
pp2)
  ref plain plain 4 3
  train 2 gpipe gpipe 2 4 3 --tied per-mb
  train 2 1f1b 1f1b 2 4 3 --tied per-mb
  train 2 interleaved interleaved 2 4 3 --v 2 --tied per-mb
  for r in gpipe 1f1b interleaved; do same plain "$r"; norms plain "$r"; done
  # The head's gradient once per step (Megatron's cost): the embedding's sum in another order.
  train 2 1f1b_once 1f1b 2 4 3 --tied once
  close plain 1f1b_once 1e-5
  # bf16 autocast and activation checkpointing keep every layer's arithmetic: the same bits.
  ref plain_mixed plain 4 3 --bf16 --checkpointing
  train 2 1f1b_mixed 1f1b 2 4 3 --tied per-mb --bf16 --checkpointing
  train 2 interleaved_mixed interleaved 2 4 3 --v 2 --tied per-mb --bf16 --checkpointing
  same plain_mixed 1f1b_mixed
  same plain_mixed interleaved_mixed
  ref plain_m1 plain 1 3
  train 2 1f1b_once_m1 1f1b 2 1 3 --tied once
  same plain_m1 1f1b_once_m1
  ;;
pp4)
  ref plain plain 8 2
  train 4 gpipe gpipe 4 8 2 --tied per-mb
  train 4 1f1b 1f1b 4 8 2 --tied per-mb
  train 4 interleaved interleaved 4 8 2 --v 2 --tied per-mb
  # An explicit split (MegatronLMPlugin's) and Megatron's num_layers_per_virtual_pipeline_stage.
  train 4 1f1b_split 1f1b 4 8 2 --blocks 1,3,3,1 --tied per-mb
  train 4 interleaved_l1 interleaved 4 8 2 --layers-per-virtual-stage 1 --tied per-mb
  for r in gpipe 1f1b interleaved 1f1b_split interleaved_l1; do same plain "$r"; done
  ;;
dp2pp2)
  # DP x PP = 2 x 2: G = 2 x 2 micro-batches; the reference folds them in one process.
  ref fold fold 2 3 --dp 2
  for z in 0 1 3; do train 4 "dp2pp2_z$z" 1f1b 2 2 3 --dp 2 --zero "$z" --tied per-mb; done
  train 4 dp2pp2_gpipe gpipe 2 2 3 --dp 2 --zero 2 --tied per-mb
  # Interleaved: the middle stages' blocks would leave their root units empty under
  # transformer wrapping (refused, below), so one unit per stage.
  train 4 dp2pp2_interleaved interleaved 2 2 3 --dp 2 --zero 3 --v 2 --wrap none --tied per-mb
  for r in dp2pp2_z0 dp2pp2_z1 dp2pp2_z3 dp2pp2_gpipe dp2pp2_interleaved; do same fold "$r"; done
  if "$braid" launch --nproc-per-node 4 --timeout 120 "$worker" train interleaved 2 2 1 \
    "$out/refused" --dp 2 --zero 3 --v 2 >"$out/refused.log" 2>&1; then
    echo "FAIL: an empty root unit was accepted" >&2; exit 1
  fi
  grep -q "would hold no parameter" "$out/refused.log" ||
    { cat "$out/refused.log"; echo "FAIL: no clear error for an empty root unit" >&2; exit 1; }
  echo "refused: a middle stage with every block wrapped (clear error)"
  ;;
tp2pp2)
  # TP x PP = 2 x 2 (mesh (pp, tp)): each stage split by parallelize_gpt_stage, the loss
  # vocab-parallel, each tp rank's replica of wte fed by the same tp rank of stage 0.
  ref plain plain 4 3
  train 4 tp2_gpipe gpipe 2 4 3 --tp 2 --tied per-mb
  train 4 tp2_1f1b 1f1b 2 4 3 --tp 2 --tied per-mb
  train 4 tp2_interleaved interleaved 2 4 3 --v 2 --tp 2 --tied per-mb
  train 4 tp2_1f1b_sp 1f1b 2 4 3 --tp 2 --sp --tied per-mb
  train 4 tp2_1f1b_once 1f1b 2 4 3 --tp 2 --tied once
  for r in tp2_gpipe tp2_1f1b tp2_interleaved tp2_1f1b_sp tp2_1f1b_once; do
    near plain "$r"
    norms plain "$r"
  done
  # The schedules differ only in when they compute: under TP too, the same bits.
  same tp2_1f1b tp2_gpipe
  same tp2_1f1b tp2_interleaved
  ;;
dp2tp2pp2)
  # DP x TP x PP = 2 x 2 x 2 on 8 ranks (mesh (dp, pp, tp)): every chunk a ShardedModel over dp
  # with its TP plan; G = 2 x 2 micro-batches against one process's 4.
  ref plain plain 2 3 --dp 2
  for z in 1 3; do train 8 "dp2tp2pp2_z$z" 1f1b 2 2 3 --dp 2 --tp 2 --zero "$z" --tied per-mb; done
  train 8 dp2tp2pp2_z3_sp 1f1b 2 2 3 --dp 2 --tp 2 --sp --zero 3 --tied per-mb
  train 8 dp2tp2pp2_gpipe_z2 gpipe 2 2 3 --dp 2 --tp 2 --zero 2 --tied once
  for r in dp2tp2pp2_z1 dp2tp2pp2_z3 dp2tp2pp2_z3_sp dp2tp2pp2_gpipe_z2; do
    near plain "$r"
    norms plain "$r"
  done
  ;;
kill)
  # Rank 2 of 4 dies after 6 forwards (step 1, micro-batch 1). The launcher must exit non-zero
  # (not hang) and the neighbours must name the dead rank. --timeout bounds every wait.
  set +e
  start=$(date +%s)
  "$braid" launch --nproc-per-node 4 --timeout 60 --grace-period 30 "$worker" train 1f1b 4 4 3 \
    "$out/kill" --kill-rank 2 --kill-after 6 >"$out/kill.log" 2>&1
  status=$?
  set -e
  elapsed=$(($(date +%s) - start))
  grep -E "SIGKILL|pp_worker|braid launch" "$out/kill.log" || true
  [[ $status -ne 0 ]] || { echo "FAIL: the launcher exited 0 after a rank was killed" >&2; exit 1; }
  grep -q "rank 2: SIGKILL after 6 forwards" "$out/kill.log" || { echo "FAIL: rank 2 was not killed" >&2; exit 1; }
  for r in 1 3; do
    grep -E "^\[rank $r\] pp_worker: braid: peer lost: pipeline: .*from pp rank 2 \(world rank 2\)" \
      "$out/kill.log" >/dev/null ||
      { cat "$out/kill.log"; echo "FAIL: rank $r did not report peer lost naming pp rank 2" >&2; exit 1; }
  done
  echo "OK: ranks 1 and 3 named the dead pp rank 2 (launcher status $status, ${elapsed}s)"
  ;;
*)
  echo "run_pp.sh: unknown scenario $scenario" >&2
  exit 2
  ;;
esac

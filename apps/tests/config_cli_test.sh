#!/usr/bin/env bash
# `braid config` end to end (ctest label "cli"): --help of each subcommand, `config default`
# (writes, never overwrites, BRAID_CONFIG_FILE), `config show` (file, environment and --key
# value overrides, errors naming the closest key), and the questions answered through a pipe.
# Usage: config_cli_test.sh BRAID DATA_DIR (DATA_DIR: accel/tests/config/data).
set -euo pipefail
braid=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Nothing from the caller's environment may change what the commands read.
unset BRAID_CONFIG_FILE HF_HOME XDG_CACHE_HOME ACCELERATE_MIXED_PRECISION ACCELERATE_USE_FSDP \
  ACCELERATE_USE_DEEPSPEED FSDP_VERSION FSDP_SHARDING_STRATEGY || true
export HOME=$work/home

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect_in TEXT NEEDLE...: every NEEDLE (a fixed string) occurs in TEXT.
expect_in() {
  local text=$1
  shift
  for needle in "$@"; do
    grep -qF -- "$needle" <<<"$text" || fail "'$needle' not in:"$'\n'"$text"
  done
}
# run_fails CMD...: CMD exits non-zero; its stdout+stderr in $out.
run_fails() {
  if out=$("$@" 2>&1); then fail "expected failure: $*"$'\n'"$out"; fi
}

# --help for each.
expect_in "$("$braid" --help)" config
expect_in "$("$braid" config --help)" default show --config_file
expect_in "$("$braid" config default --help)" --mixed_precision --config_file
expect_in "$("$braid" config show --help)" --config_file "--key value"

# config default: writes a CPU config, refuses to overwrite, and checks the precision name.
f=$work/a/default_config.yaml
out=$("$braid" config default --mixed_precision bf16 --config_file "$f")
expect_in "$out" "braid configuration saved at $f"
expect_in "$(cat "$f")" "compute_environment: LOCAL_MACHINE" "mixed_precision: bf16" \
  "distributed_type: 'NO'" "num_processes: 1"
cp "$f" "$work/before.yaml"
out=$("$braid" config default --mixed_precision fp16 --config_file "$f")
expect_in "$out" "already exists at $f, will not override"
cmp -s "$f" "$work/before.yaml" || fail "config default overwrote $f"
run_fails "$braid" config default --mixed_precision fp64 --config_file "$work/x.yaml"
expect_in "$out" "fp64"
[[ ! -e $work/x.yaml ]] || fail "a file was written for a bad precision"
# Default location: BRAID_CONFIG_FILE, else ~/.cache/braid/default_config.yaml.
out=$(BRAID_CONFIG_FILE=$work/env.yaml "$braid" config default)
expect_in "$out" "saved at $work/env.yaml"
out=$("$braid" config default)
expect_in "$out" "saved at $HOME/.cache/braid/default_config.yaml"
expect_in "$(cat "$HOME/.cache/braid/default_config.yaml")" "mixed_precision: 'no'"

# config show: a real Accelerate file, then the environment over it, then overrides over both.
out=$("$braid" config show --config_file "$data/accelerate_fsdp.yaml")
expect_in "$out" "# resolved from $data/accelerate_fsdp.yaml" "distributed_type: FSDP" \
  "  fsdp_sharding_strategy: FULL_SHARD" "  fsdp_transformer_layer_cls_to_wrap: GPT2Block" \
  "mixed_precision: bf16" "num_processes: 4"
out=$(FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP ACCELERATE_MIXED_PRECISION=fp16 \
  "$braid" config show --config_file "$data/accelerate_fsdp.yaml")
expect_in "$out" "  fsdp_sharding_strategy: SHARD_GRAD_OP" "mixed_precision: fp16"
out=$(ACCELERATE_MIXED_PRECISION=fp16 "$braid" config show --config_file \
  "$data/accelerate_fsdp.yaml" --mixed_precision no --fsdp_config.fsdp_version 2 \
  --num-processes=8)
expect_in "$out" "mixed_precision: 'no'" "  fsdp_version: 2" "num_processes: 8"
# The DeepSpeed file as `accelerate config` writes it.
out=$("$braid" config show --config_file "$data/accelerate_deepspeed.yaml")
expect_in "$out" "distributed_type: DEEPSPEED" "  zero_stage: 3" "  offload_param_device: nvme"
# A job file with the program's own keys: shown, named on stderr, and overridable.
printf 'mixed_precision: bf16\nmax_steps: 200\nlr: 0.003\n' >"$work/job.yaml"
out=$("$braid" config show --config_file "$work/job.yaml" --max_steps 10 2>&1)
expect_in "$out" "keys of the program, not of the configuration: lr, max_steps" \
  "max_steps: 10" "lr: 0.003" "mixed_precision: bf16"
run_fails "$braid" config show --config_file "$work/job.yaml" --max_step 10
expect_in "$out" "closest known key is 'max_steps'"
# Without a file: the default file under HOME written above.
expect_in "$("$braid" config show)" "# resolved from $HOME/.cache/braid/default_config.yaml"
# Errors: an unknown override names the closest key; a bad file names file:line.
run_fails "$braid" config show --config_file "$data/accelerate_fsdp.yaml" --mixed_precison bf16
expect_in "$out" "unknown configuration key 'mixed_precison'" "closest known key is 'mixed_precision'"
printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_stratgy: FULL_SHARD\n' >"$work/bad.yaml"
run_fails "$braid" config show --config_file "$work/bad.yaml"
expect_in "$out" "'fsdp_sharding_stratgy' in fsdp_config ($work/bad.yaml:3:3)" \
  "closest known key is 'fsdp_sharding_strategy'"
printf 'dynamo_config:\n  dynamo_backend: INDUCTOR\n' >"$work/dynamo.yaml"
run_fails "$braid" config show --config_file "$work/dynamo.yaml"
expect_in "$out" "dynamo_backend INDUCTOR" "no graph compiler"
run_fails "$braid" config show --config_file "$work/missing.yaml"
expect_in "$out" "$work/missing.yaml"

# The questions, answered through a pipe. Multi-CPU, 2 machines, FSDP 1 with HYBRID_SHARD,
# size-based wrap, bf16.
answers=(
  1              # machine: multi-CPU
  2              # machines
  1              # rank of this machine
  10.200.0.1     # main process IP
  ""             # port: 29500
  ""             # same network: yes
  no             # debug
  no             # DeepSpeed
  yes            # FSDP
  0              # FSDP version 1
  HYBRID_SHARD   # sharding strategy, by name
  ""             # offload: no
  1              # SIZE_BASED_WRAP
  1e6            # min params
  2              # NO_PREFETCH
  ""             # state dict: SHARDED_STATE_DICT
  ""             # forward prefetch: no
  no             # CPU RAM efficient loading
  ""             # sync module states: yes
  yes            # activation checkpointing
  8              # processes
  bf16           # mixed precision, by name
)
q=$work/q.yaml
out=$(printf '%s\n' "${answers[@]}" | "$braid" config --config_file "$q")
expect_in "$out" "Which type of machine are you using?" " [1] multi-CPU" \
  "What should be your sharding strategy?" "braid configuration saved at $q"
out=$("$braid" config show --config_file "$q")
expect_in "$out" "distributed_type: FSDP" "use_cpu: true" "num_machines: 2" "machine_rank: 1" \
  "main_process_ip: '10.200.0.1'" "main_process_port: 29500" "num_processes: 8" \
  "  fsdp_sharding_strategy: HYBRID_SHARD" "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP" \
  "  fsdp_min_num_params: 1000000" "  fsdp_backward_prefetch: NO_PREFETCH" \
  "  fsdp_state_dict_type: SHARDED_STATE_DICT" "  fsdp_sync_module_states: true" \
  "  fsdp_activation_checkpointing: true" "mixed_precision: bf16"

# DeepSpeed on one machine, with a bad answer asked again.
answers=(
  0      # no distributed training
  maybe  # CPU only? refused, asked again
  yes    # CPU only
  yes    # DeepSpeed
  no     # no JSON file
  3      # ZeRO-3
  1      # offload optimizer: cpu
  2      # offload params: nvme
  ""     # nvme path: /nvme
  4      # accumulation steps
  yes    # clipping
  0.5    # value
  yes    # 16-bit save
  yes    # zero3 init
  2      # processes
  fp16   # precision
)
out=$(printf '%s\n' "${answers[@]}" | "$braid" config --config_file "$q")
expect_in "$out" "'maybe' is not valid here; expected yes or no."
out=$("$braid" config show --config_file "$q")
expect_in "$out" "distributed_type: DEEPSPEED" "  zero_stage: 3" "  offload_optimizer_device: cpu" \
  "  offload_param_device: nvme" "  offload_param_nvme_path: /nvme" \
  "  gradient_accumulation_steps: 4" "  gradient_clipping: 0.5" "  zero3_init_flag: true" \
  "  zero3_save_16bit_model: true" "mixed_precision: fp16" "num_processes: 2"

# Megatron-LM on one machine: tensor x pipeline parallel degrees.
answers=(
  1      # multi-CPU
  ""     # one machine
  ""     # debug: no
  no     # DeepSpeed
  no     # FSDP
  yes    # Megatron-LM
  2      # tp degree
  no     # sequence parallelism
  2      # pp degree
  4      # micro-batches
  no     # recompute
  ""     # distributed optimizer: yes
  0.5    # clipping
  8      # processes
  bf16   # precision
)
out=$(printf '%s\n' "${answers[@]}" | "$braid" config --config_file "$q")
expect_in "$out" "What is the Tensor Parallelism degree/size?"
out=$("$braid" config show --config_file "$q")
expect_in "$out" "distributed_type: MEGATRON_LM" "  megatron_lm_tp_degree: 2" \
  "  megatron_lm_pp_degree: 2" "  megatron_lm_num_micro_batches: 4" \
  "  megatron_lm_sequence_parallelism: false" "  megatron_lm_recompute_activations: false" \
  "  megatron_lm_use_distributed_optimizer: true" "  megatron_lm_gradient_clipping: 0.5" \
  "num_processes: 8"

# Every answer left empty (end of input): the defaults, one process without distribution.
out=$("$braid" config --config_file "$q" </dev/null)
expect_in "$out" "braid configuration saved at $q"
out=$("$braid" config show --config_file "$q")
expect_in "$out" "distributed_type: 'NO'" "mixed_precision: 'no'" "num_processes: 1" "gpu_ids: all"
# A question without a default (the main process IP) left unanswered is an error.
run_fails bash -c "printf '1\n2\n0\n' | '$braid' config --config_file '$work/none.yaml'"
expect_in "$out" "no answer to 'What is the IP address"

echo "config CLI tests passed"

#!/usr/bin/env bash
# `braid estimate-memory` (docs/memory.md): the table for presets of both families and for
# config.json files, the ordering the stages must have, and the messages for bad input.
#   estimate_memory_cli_test.sh BRAID
set -euo pipefail
braid=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$braid" estimate-memory gpt2 --num_processes 8 --batch_size 2 --seq_len 512)
echo "$out"
[[ $(grep -c '^float32 \|^bfloat16 ' <<<"$out") -eq 8 ]] || fail "expected 8 rows (2 dtypes x 4 stages)"
grep -q "124.4M parameters" <<<"$out" || fail "gpt2 has 124.4M parameters"
# Peak per rank falls (weakly) with the stage; bf16 parameters need less than f32.
for dt in float32 bfloat16; do
  peaks=($(awk -v d="$dt" '$1 == d {print $3}' <<<"$out"))
  for i in 1 2 3; do
    awk -v a="${peaks[$((i - 1))]}" -v b="${peaks[$i]}" 'BEGIN {exit !(b <= a)}' ||
      fail "$dt: stage $i peak ${peaks[$i]} > stage $((i - 1)) peak ${peaks[$((i - 1))]}"
  done
done
f3=$(awk '$1 == "float32" && $2 == 3 {print $3}' <<<"$out")
b3=$(awk '$1 == "bfloat16" && $2 == 3 {print $3}' <<<"$out")
awk -v f="$f3" -v b="$b3" 'BEGIN {exit !(b < f)}' || fail "bf16 stage 3 ($b3) not below f32 ($f3)"

# A transformers config.json (file or folder), one stage, one dtype, with the breakdown.
cat >"$tmp/config.json" <<'JSON'
{"model_type": "gpt2", "vocab_size": 1000, "n_positions": 128, "n_embd": 64, "n_layer": 2,
 "n_head": 4, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
JSON
out=$("$braid" estimate-memory "$tmp" --zero_stages 3 --dtypes float32 -n 2 --details)
grep -q "^float32   3 " <<<"$out" || fail "no stage-3 row for the config folder"
grep -q "sharded model" <<<"$out" || fail "--details prints the breakdown"
"$braid" estimate-memory "$tmp/config.json" --zero_stages 1 --dtypes bf16 >/dev/null

# Llama: the Hub name of a preset, and a LlamaForCausalLM config.json.
out=$("$braid" estimate-memory meta-llama/Llama-2-7b-hf -n 8 --batch_size 1 --seq_len 2048 \
  --dtypes bf16)
echo "$out"
grep -q "llama, 32 LlamaDecoderLayer blocks" <<<"$out" || fail "Llama-2-7b is a llama of 32 blocks"
grep -q "6738.4M parameters" <<<"$out" || fail "Llama-2-7b has 6738.4M parameters"
peaks=($(awk '$1 == "bf16" {print $3}' <<<"$out"))
[[ ${#peaks[@]} -eq 4 ]] || fail "expected 4 Llama rows"
awk -v a="${peaks[0]}" -v b="${peaks[3]}" 'BEGIN {exit !(b < a / 3)}' ||
  fail "Llama-2-7b: stage 3 (${peaks[3]}) is not below a third of stage 0 (${peaks[0]})"
mkdir "$tmp/llama"
cat >"$tmp/llama/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512,
 "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 128}
JSON
out=$("$braid" estimate-memory "$tmp/llama" -n 2 --activation_checkpointing)
grep -q "^bfloat16  3 " <<<"$out" || fail "no stage-3 row for the Llama config"
grep -q "activation checkpointing" <<<"$out" || fail "the header names checkpointing"

# Bad input names the value.
err=$("$braid" estimate-memory gpt3 2>&1) && fail "an unknown model must fail"
grep -q "'gpt3' is not a preset" <<<"$err" || fail "message: $err"
echo '{"model_type": "t5", "d_model": 512}' >"$tmp/t5.json"
err=$("$braid" estimate-memory "$tmp/t5.json" 2>&1) && fail "an unknown family must fail"
grep -q 'model_type "t5" is not a family braid implements' <<<"$err" || fail "message: $err"
err=$("$braid" estimate-memory gpt2 --dtypes int8 2>&1) && fail "a bad dtype must fail"
grep -q "got 'int8'" <<<"$err" || fail "message: $err"
err=$("$braid" estimate-memory gpt2 --zero_stages 4 2>&1) && fail "stage 4 must fail"
"$braid" estimate-memory --help | grep -q "num_processes" || fail "--help lists the options"
echo "OK"

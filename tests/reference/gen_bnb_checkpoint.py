#!/usr/bin/env python3
"""Writes tests/reference/bnb_checkpoints/: checkpoints written by bitsandbytes and transformers
themselves (issue 34), for accel/tests/quant/bnb_checkpoint_test.cc, which loads them into braid
and compares their bytes with braid's own quantizer and their tokens with the ones recorded here
(docs/quantization.md, "What is verified against what"). NOT run by CI: it needs PyTorch 2 and
bitsandbytes, which Debian's python3-torch (1.13) is too old for. Made once in a throwaway venv:

    /usr/bin/python3 -m venv /opt/bnb-venv
    /opt/bnb-venv/bin/pip install torch bitsandbytes transformers accelerate safetensors
    /opt/bnb-venv/bin/python tests/reference/gen_bnb_checkpoint.py write

The committed files were made with torch 2.15.0 (PyPI's wheel, run on the CPU), bitsandbytes
0.50.2, transformers 5.25.0, accelerate 1.16.0, safetensors 0.8.0 (the exact versions are in each
generation.json).

Route: transformers' own, nothing by hand. AutoModelForCausalLM.from_pretrained loads the f32
folders of tests/reference/hf_quant (gen_hf_quant_models.py) with a BitsAndBytesConfig on the CPU
(device_map="cpu", dtype=float32: the unquantized layers and the biases stay f32), and
save_pretrained(safe_serialization=True) writes the quantized model at once, before any forward
(a forward on a CPU with AVX512-BF16 repacks 4-bit weights for bitsandbytes' CPU kernel, with
the absmax in bf16, and a save after that writes the absmax from those bf16 values). On import,
bitsandbytes 0.50.2 tries to fetch a CPU kernel from the Hugging Face Hub and, offline, warns
and falls back to its own library (libbitsandbytes_cpu's gemv_4bit_inference_cpu_*_bf16).
Folders <model>-<format>, model in gpt2 /
llama, format:
  int8    load_in_8bit=True (llm_int8_threshold 6.0)
  nf4     load_in_4bit=True, bnb_4bit_quant_type="nf4", compute dtype float32
  nf4-dq  the same with bnb_4bit_use_double_quant=True
  fp4     bnb_4bit_quant_type="fp4", compute dtype float32
Each has what save_pretrained writes (config.json with quantization_config, model.safetensors,
generation_config.json) and:
  generation.json       prompt, tokens_f32 (transformers in f32 in this venv; must equal the
                        committed hf_quant tokens), tokens (transformers + bitsandbytes,
                        model.generate(prompt, max_new_tokens=16, do_sample=False), as it runs
                        by default on the generating CPU), for 4-bit tokens_dequant (the same
                        with bitsandbytes' AVX512-BF16 repacking turned off: dequantize_4bit in
                        f32, then torch's linear), the cpu path taken, versions
  logits.safetensors    logits f32 [1, 19, 64]: model(tokens_f32).logits on the default path;
                        for 4-bit also logits_dequant on the dequantizing path

The second mode checks the other direction, braid's files loaded by transformers + bitsandbytes:

    BRAID_BNB_EXPORT=/tmp/braid-bnb ctest --test-dir build -R BnbCheckpoint
    /opt/bnb-venv/bin/python tests/reference/gen_bnb_checkpoint.py load-braid /tmp/braid-bnb

The test writes, for every folder here, braid's quantized_state_dict of the same model quantized
by braid from the f32 checkpoint (model.safetensors, with this folder's config.json); the script
loads each with from_pretrained (no missing or unexpected key allowed), generates, and compares
tokens and logits with generation.json / logits.safetensors. It prints one line per folder and
exits non-zero on a mismatch.
"""
import json
import os
import shutil
import sys

import torch
import accelerate
import bitsandbytes as bnb
import safetensors
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "hf_quant")
NEW_TOKENS = 16
MODELS = ("gpt2", "llama")
FORMATS = {
    "int8": dict(load_in_8bit=True),
    "nf4": dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=False,
                bnb_4bit_compute_dtype=torch.float32),
    "nf4-dq": dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                   bnb_4bit_compute_dtype=torch.float32),
    "fp4": dict(load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_use_double_quant=False,
                bnb_4bit_compute_dtype=torch.float32),
}


def versions():
    return {"torch": torch.__version__, "bitsandbytes": bnb.__version__,
            "transformers": transformers.__version__, "accelerate": accelerate.__version__,
            "safetensors": safetensors.__version__}


def load(folder, **kw):
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                       device_map="cpu",
                                                       output_loading_info=True, **kw)
    bad = {k: sorted(v) for k, v in info.items() if v}
    assert not bad, f"{folder}: {bad}"
    model.eval()
    return model


def run(model, prompt, tokens_f32):
    with torch.no_grad():
        tokens = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                                pad_token_id=0, attention_mask=torch.ones_like(prompt))
        logits = model(tokens_f32).logits.float().contiguous()
    return tokens[0].tolist(), logits


def no_cpu_repack(model):
    """bitsandbytes' Linear4bit repacks its weight for the AVX512-BF16 kernel (bf16 input and
    absmax) on the first CPU forward; off, matmul_4bit dequantizes in f32 and calls linear."""
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit):
            m.support_avx512bf16_for_cpu = False


def write(out):
    for name in MODELS:
        src = os.path.join(SOURCE, name)
        ref = load_file(os.path.join(src, "generation.safetensors"))
        prompt, want = ref["prompt"], ref["tokens"]
        tokens_f32, _ = run(load(src), prompt, want)
        assert tokens_f32 == want[0].tolist(), f"{name}: f32 tokens {tokens_f32} != committed"
        for fmt, kw in FORMATS.items():
            folder = os.path.join(out, f"{name}-{fmt}")
            shutil.rmtree(folder, ignore_errors=True)
            model = load(src, quantization_config=BitsAndBytesConfig(**kw))
            model.save_pretrained(folder, safe_serialization=True)  # before any forward
            tokens, logits = run(model, prompt, want)
            four_bit = "load_in_4bit" in kw
            gen = {"prompt": prompt[0].tolist(), "tokens_f32": tokens_f32, "tokens": tokens,
                   "cpu_path": "int8" if not four_bit else
                   ("avx512bf16 repack (gemv_4bit_inference_cpu_*_bf16)"
                    if bnb.functional.has_avx512bf16() else "dequantize_4bit + linear"),
                   "versions": versions()}
            tensors = {"logits": logits}
            if four_bit:
                model = load(folder)  # the saved file, as a user would load it
                no_cpu_repack(model)
                gen["tokens_dequant"], tensors["logits_dequant"] = run(model, prompt, want)
            with open(os.path.join(folder, "generation.json"), "w") as f:  # a key a line
                f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}"
                                            for k, v in gen.items()) + "\n}\n")
            # No metadata: safetensors writes its keys in hash order, and the versions are in
            # generation.json; so a rerun gives the same bytes.
            save_file(tensors, os.path.join(folder, "logits.safetensors"))
            for f in os.listdir(folder):
                os.chmod(os.path.join(folder, f), 0o644)
            print(name, fmt, "tokens", tokens, "== f32" if tokens == tokens_f32 else "!= f32")


def load_braid(exported, refs):
    failed = 0
    for entry in sorted(os.listdir(exported)):
        folder, ref = os.path.join(exported, entry), os.path.join(refs, entry)
        gen = json.load(open(os.path.join(ref, "generation.json")))
        want = load_file(os.path.join(ref, "logits.safetensors"))
        prompt = torch.tensor([gen["prompt"]])
        model = load(folder)  # asserts no missing / unexpected keys
        qc = model.config.quantization_config
        four_bit = qc.load_in_4bit if not isinstance(qc, dict) else qc["load_in_4bit"]
        if four_bit:
            no_cpu_repack(model)
        tokens, logits = run(model, prompt, torch.tensor([gen["tokens_f32"]]))
        key = "logits_dequant" if four_bit else "logits"
        scale = want[key].abs().max().item()
        err = (logits - want[key]).abs().max().item() / scale
        same = tokens == gen["tokens_dequant" if four_bit else "tokens"]
        # int8: braid quantizes the f32 weight, bitsandbytes its f16 rounding (codes one step
        # apart in about 1% of the weights); 4-bit: the same codes up to double quantization's
        # last bits.
        ok = same and err < (1e-4 if four_bit else 1e-2)
        failed += not ok
        print(f"{entry}: braid's file loaded by transformers + bitsandbytes: tokens "
              f"{'equal' if same else 'DIFFER'}, max |logit - bnb's own file's| / max |logit| "
              f"= {err:.2e} ({key})")
    print(versions())
    return failed


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "write"
    if mode == "write":
        write(sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "bnb_checkpoints"))
    elif mode == "load-braid":
        sys.exit(1 if load_braid(sys.argv[2], os.path.join(HERE, "bnb_checkpoints")) else 0)
    else:
        sys.exit(f"usage: {sys.argv[0]} write [out] | load-braid <exported folder>")

#!/usr/bin/env python3
"""Generates torch_gpt.safetensors: transformers' GPT2LMHeadModel (run by PyTorch) on a fixed
batch, the reference for braid's GPT forward and backward (tests/reference/torch_gpt_test.cc).

Run with Debian's interpreter (python3-torch 1.13) and transformers 4.40:
    /usr/bin/python3 tests/reference/gen_torch_gpt.py tests/reference/torch_gpt.safetensors
scripts/install_deps.sh installs transformers for /usr/bin/python3. Every random number comes
from torch.manual_seed(20261201), so a rerun with the same versions gives the same bytes.

Model: GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=2, n_head=4,
activation_function="gelu_new", dropouts 0, layer_norm_epsilon=1e-5), initialized by
transformers (normal 0.02, c_proj scaled by 1/sqrt(2 n_layer)) and then perturbed (biases and
LayerNorm affine parameters get noise too, so every gradient term is exercised).
Batch: ids [2, 12] (T < n_positions), targets [2, 12] with three positions at -100.
Loss: torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1),
ignore_index=-100) (mean over the 21 counted targets), then loss.backward().

Tensors (every name of the model is Hugging Face's; lm_head.weight is tied to wte and left
out, as save_pretrained does):
  weight.<name>          f32 initial parameters (the f64 case uses them upcast exactly)
  ids, targets           i64
  f64.logits, f64.loss, f64.grad.<name>     the model in float64
  f32.logits, f32.loss, f32.grad.<name>     the model in float32
  bf16.logits, bf16.loss, bf16.grad.<name>  f32 model under torch.autocast("cpu", bfloat16);
                                            logits are bf16 values stored as f32
  smooth.loss, smooth.dlogits               cross_entropy(f32 logits, label_smoothing=0.1),
                                            and its gradient w.r.t. the logits
Metadata: torch and transformers versions, and the config as JSON ("config").
"""
import json
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel


def main(out_path):
    torch.manual_seed(20261201)
    cfg = GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, layer_norm_epsilon=1e-5)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}  # no lm_head (tied)

    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    targets = torch.randint(0, cfg.vocab_size, (2, 12))
    targets[0, 3] = -100
    targets[1, 0] = -100
    targets[1, 11] = -100

    out = {"ids": ids, "targets": targets}
    for n, w in weights.items():
        out["weight." + n] = w.float().contiguous()

    def run(prefix, dtype, autocast):
        m = GPT2LMHeadModel(cfg).eval()
        m.load_state_dict({**weights, "lm_head.weight": weights["transformer.wte.weight"]},
                          strict=False)
        m.to(dtype)
        m.zero_grad()
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = m(ids).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, cfg.vocab_size), targets.reshape(-1), ignore_index=-100)
        else:
            logits = m(ids).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, cfg.vocab_size), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        store = torch.float64 if dtype == torch.float64 else torch.float32
        out[prefix + ".logits"] = logits.detach().to(store).contiguous()
        out[prefix + ".loss"] = loss.detach().to(store).reshape(1)
        for n, p in m.named_parameters():
            out[prefix + ".grad." + n] = p.grad.detach().to(store).contiguous()
        return logits

    run("f64", torch.float64, False)
    logits32 = run("f32", torch.float32, False)
    run("bf16", torch.float32, True)

    lg = logits32.detach().clone().requires_grad_(True)
    smooth = torch.nn.functional.cross_entropy(lg.reshape(-1, cfg.vocab_size), targets.reshape(-1),
                                               ignore_index=-100, label_smoothing=0.1)
    smooth.backward()
    out["smooth.loss"] = smooth.detach().reshape(1)
    out["smooth.dlogits"] = lg.grad.detach().contiguous()

    meta = {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "config": json.dumps({k: getattr(cfg, k) for k in (
                "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                "activation_function", "layer_norm_epsilon")})}
    save_file(out, out_path, metadata=meta)


if __name__ == "__main__":
    main(sys.argv[1])

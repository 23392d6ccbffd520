#!/usr/bin/env python3
"""PyTorch's side of bench/run_gpt.sh: tokens/s of one training step (forward, cross-entropy,
backward, AdamW step) of the tiny GPT of the models issue, run by transformers'
GPT2LMHeadModel on PyTorch's CPU backend.

Model: GPT2Config(vocab_size=256, n_positions=256, n_embd=256, n_layer=4, n_head=4,
activation_function="gelu_new", dropouts 0); batch 8 x 256 tokens (2048 tokens a step);
AdamW(lr=3e-4, weight_decay=0.01) with foreach=True (faster than the single-tensor path here).
fp32, or bf16 through torch.autocast("cpu", dtype=torch.bfloat16) with f32 parameters.

Tuned as a PyTorch user would: torch.set_num_threads(threads); OMP_WAIT_POLICY=PASSIVE is left
to the caller (run_gpt.sh sets it: with 2 threads on 2 cores, ACTIVE spin-waits cost
throughput when the other core is busy), OPENBLAS_CORETYPE likewise.
Prints one JSON line per dtype: {"dtype", "threads", "tokens_per_s" (median of the steps),
"step_ms" list, "loss_first", "loss_last"}.
BRAID_GPT_MODEL=gpt2 runs GPT-2 small instead (124M: vocab 50257, context 1024, d 768, 12 layers,
12 heads) at batch 4 x 256 tokens, as braid_bench_gpt does; BRAID_GPT_BATCH overrides the batch.
usage: gpt_vs_torch.py <threads> <steps> <warmup> <dtype>...
"""
import json
import os
import statistics
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def run(dtype, threads, steps, warmup):
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model_name = os.environ.get("BRAID_GPT_MODEL", "tiny")
    if model_name not in ("tiny", "gpt2"):
        sys.exit(f"BRAID_GPT_MODEL='{model_name}': expected tiny or gpt2")
    small = model_name == "gpt2"
    V = 50257 if small else 256
    cfg = GPT2Config(vocab_size=V, n_positions=1024 if small else 256,
                     n_embd=768 if small else 256, n_layer=12 if small else 4,
                     n_head=12 if small else 4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)
    B, T = int(os.environ.get("BRAID_GPT_BATCH", 4 if small else 8)), 256
    data = torch.randint(0, V, (steps + warmup, B, T + 1))
    times, losses = [], []
    for i in range(steps + warmup):
        x, y = data[i, :, :-1], data[i, :, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        else:
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= warmup:
            times.append(dt)
    med = statistics.median(times)
    return {"model": model_name, "batch": B, "dtype": dtype, "threads": threads, "tokens_per_s": B * T / med,
            "step_ms": [round(t * 1e3, 2) for t in times], "loss_first": losses[0],
            "loss_last": losses[-1], "torch": torch.__version__}


def main():
    threads, steps, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    for dtype in sys.argv[4:]:
        print(json.dumps(run(dtype, threads, steps, warmup)), flush=True)


if __name__ == "__main__":
    main()

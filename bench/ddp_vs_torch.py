#!/usr/bin/env python3
"""PyTorch's side of bench/run_zero.sh: one DDP training step (forward, cross-entropy,
backward with gloo's all-reduce, AdamW step) of the tiny GPT of bench/gpt_vs_torch.py on 2
processes x 1 thread, the same model, batch and step as bench/zero_bench.cc runs in braid.

Model: transformers' GPT2LMHeadModel, GPT2Config(vocab_size=256, n_positions=256, n_embd=256,
n_layer=4, n_head=4, activation_function="gelu_new", dropouts 0); global batch 8 x 256 tokens
(2048 tokens a step), 8 / world sequences per rank; DistributedDataParallel with its defaults
(gloo, bucket_cap_mb 25; the bool causal-mask buffers, which gloo cannot broadcast, are left
out of DDP's buffer sync); AdamW(lr=3e-4, weight_decay=0.01, foreach=True). fp32, or bf16
through torch.autocast("cpu", dtype=torch.bfloat16) with f32 parameters.

Exposed all-reduce: the same steps again inside ddp.no_sync() (backward without the reducer's
all-reduce: compute only); exposed_ms = median synced step - median no_sync step, the time
the step waits for gloo beyond what DDP overlaps with the backward.

Tuned as a PyTorch user would: torch.set_num_threads(1) per rank, OMP_WAIT_POLICY=PASSIVE,
OPENBLAS_CORETYPE=SkylakeX, OPENBLAS_NUM_THREADS=1 (set here before torch loads unless the
caller set them). Prints one JSON line per dtype (rank 0): {"dtype", "world", "tokens_per_s",
"step_ms" (rank 0's synced steps), "step_ms_median", "nosync_tokens_per_s", "nosync_ms",
"exposed_ms", "loss_first", "loss_last", "torch"}.
usage: ddp_vs_torch.py <steps> <warmup> <dtype>... [--world N]
"""
import json
import os
import socket
import statistics
import sys
import time

for _k, _v in (("OMP_WAIT_POLICY", "PASSIVE"), ("OPENBLAS_CORETYPE", "SkylakeX"),
               ("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402  (after the environment above)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

# BRAID_GPT_MODEL=gpt2: GPT-2 small (124M: vocab 50257, context 1024, d 768, 12 layers, 12
# heads) on a global batch of 4 x 256 tokens, as bench/zero_bench.cc; BRAID_GPT_BATCH sets it.
MODEL = os.environ.get("BRAID_GPT_MODEL", "tiny")
if MODEL not in ("tiny", "gpt2"):
    sys.exit(f"BRAID_GPT_MODEL='{MODEL}': expected tiny or gpt2")
SMALL = MODEL == "gpt2"
V = 50257 if SMALL else 256
B, T = int(os.environ.get("BRAID_GPT_BATCH", 4 if SMALL else 8)), 256


def batch(step, first, count):
    """Sequences [first, first + count) of step `step`'s global batch."""
    g = torch.Generator().manual_seed(1000003 * step + 17)
    data = torch.randint(0, V, (B, T + 1), generator=g)[first:first + count]
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def timed_steps(ddp, opt, dtype, steps, warmup, rank, world, sync):
    times, losses = [], []
    per_rank = B // world
    dist.barrier()
    for i in range(steps + warmup):
        x, y = batch(i, rank * per_rank, per_rank)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        ctx = ddp.no_sync() if not sync else _null()
        with ctx:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                logits = ddp(x).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
            loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= warmup:
            times.append(dt * 1e3)
    return times, losses


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def worker(rank, world, port, steps, warmup, dtypes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    cfg = GPT2Config(vocab_size=V, n_positions=1024 if SMALL else 256,
                     n_embd=768 if SMALL else 256, n_layer=12 if SMALL else 4,
                     n_head=12 if SMALL else 4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    for dtype in dtypes:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(cfg).train()
        # GPT-2's causal masks are bool buffers, which gloo cannot broadcast; they are the same
        # constants on every rank, so DDP is told to leave them alone (as users do).
        DDP._set_params_and_buffers_to_ignore_for_model(
            model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
        ddp = DDP(model)
        opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.01, foreach=True)
        synced, losses = timed_steps(ddp, opt, dtype, steps, warmup, rank, world, sync=True)
        nosync, _ = timed_steps(ddp, opt, dtype, steps, warmup, rank, world, sync=False)
        med, med_nosync = statistics.median(synced), statistics.median(nosync)
        if rank == 0:
            print(json.dumps({
                "dtype": dtype, "world": world, "tokens_per_s": B * T / med * 1e3,
                "step_ms": [round(t, 2) for t in synced], "step_ms_median": med,
                "nosync_tokens_per_s": B * T / med_nosync * 1e3, "nosync_ms": med_nosync,
                "exposed_ms": med - med_nosync, "loss_first": losses[0], "loss_last": losses[-1],
                "torch": torch.__version__}), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    world = 2
    if "--world" in args:
        i = args.index("--world")
        world = int(args[i + 1])
        del args[i:i + 2]
    steps, warmup, dtypes = int(args[0]), int(args[1]), args[2:]
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port, steps, warmup, dtypes), nprocs=world, join=True)


if __name__ == "__main__":
    main()

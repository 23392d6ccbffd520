"""ZeRO for a framework with its own autograd, from Python: a tiny torch MLP whose gradients
torch's autograd computes, sharded and stepped by braid.FlatParameters and braid.AdamW, against
the same training loop in torch alone (torch.optim.AdamW, gradients summed over the global
batch in the same order).

    braid launch --nproc-per-node W /usr/bin/python3 test_zero.py OUT_PREFIX

Every rank runs, on rank r, micro-batches r, r + W, ... of a global batch of G = 4; per step
finish_gradients(1 / G), clip_grad_norm_(0.5) and a learning-rate schedule. Checked here:
  - stage 3 and stage 0 end with the same bits (braid's ordered reduction);
  - a stage-3 run saved after step 3 and resumed at stage 1 ends with the same bits;
  - braid's parameters equal torch's within 1e-6 of each tensor's largest magnitude (the two
    AdamW implementations round differently), and so do the gradient norms (1e-5);
  - the loss falls.
Rank 0 writes the final parameters to OUT_PREFIX_w<W>.safetensors; run_zero.sh compares the
files of W = 1 and W = 2 bit for bit. Exits 77 (ctest: skipped) without numpy or torch.
"""
import os
import shutil
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch.utils.dlpack as tdl
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import numpy and torch ({e}); "
          "apt-get install python3-numpy python3-torch")
    sys.exit(77)

import braid

G, ROWS, STEPS, SAVE_AFTER = 4, 5, 5, 3
SIZES = [6, 16, 16, 3]
UNITS = [("mlp.0", ["weight", "bias"]), ("mlp.1", ["weight", "bias"]),
         ("head", ["proj.weight", "proj.bias"])]
LR, WD, MAX_NORM = 1e-2, 0.01, 0.5


def lr_at(step):
    return LR * (1.0 - 0.1 * step)


def initial_params():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(SIZES[i], SIZES[i + 1]) for i in range(3)]
    return [[l.weight.detach().clone(), l.bias.detach().clone()] for l in layers]


def micro_batch(step, m):
    g = torch.Generator().manual_seed(1000 * step + m)
    x = torch.randn(ROWS, SIZES[0], generator=g)
    mix = torch.linspace(-1, 1, SIZES[0] * SIZES[-1]).reshape(SIZES[0], SIZES[-1])
    return x, torch.sin(x @ mix)


def forward(params, x):
    h = x
    for u, (w, b) in enumerate(params):
        h = F.linear(h, w, b)
        if u < 2:
            h = torch.tanh(h)
    return h


def train_torch():
    """The reference: one process, whole parameters, torch's AdamW."""
    params = [[p.clone().requires_grad_() for p in unit] for unit in initial_params()]
    flat = [p for unit in params for p in unit]
    opt = torch.optim.AdamW(flat, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    norms = []
    for step in range(STEPS):
        acc = None
        for m in range(G):
            x, y = micro_batch(step, m)
            grads = torch.autograd.grad(F.mse_loss(forward(params, x), y), flat)
            acc = list(grads) if acc is None else [a + g for a, g in zip(acc, grads)]
        for p, a in zip(flat, acc):
            p.grad = a * (1.0 / G)
        norms.append(float(torch.nn.utils.clip_grad_norm_(flat, MAX_NORM)))
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.step()
        opt.zero_grad()
    return {f"{u}.{n}": p.detach() for (u, names), unit in zip(UNITS, params)
            for n, p in zip(names, unit)}, norms


def train_braid(pg, stage, first=0, last=STEPS, save=None, resume=None):
    """The same loop with braid holding the parameters; returns the final state, the norms and
    the global losses."""
    units = [(u, list(zip(names, values))) for (u, names), values in
             zip(UNITS, initial_params())]
    fp = braid.FlatParameters(units, pg, stage=stage)
    opt = braid.AdamW(fp, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=WD)
    if resume:
        fp.load_checkpoint(resume)
    norms, losses = [], []
    for step in range(first, last):
        loss_sum = 0.0
        for j in range(G // pg.size):
            x, y = micro_batch(step, j * pg.size + pg.rank)
            fp.begin_forward()
            leaves = []
            h = x
            for u in range(fp.num_units):
                fp.gather(u)
                w, b = (tdl.from_dlpack(fp.param(u, i)).requires_grad_() for i in range(2))
                h = F.linear(h, w, b)
                if u < 2:
                    h = torch.tanh(h)
                leaves.append((w, b))
                fp.release(u)
            fp.end_forward()
            loss = F.mse_loss(h, y)
            loss.backward()
            loss_sum += loss.item()
            fp.begin_backward()
            for u in reversed(range(fp.num_units)):
                fp.gather(u)
                fp.reduce_gradients(u, [p.grad for p in leaves[u]])
            fp.end_backward()
        fp.finish_gradients(1.0 / G)
        norms.append(fp.clip_grad_norm_(MAX_NORM))
        opt.lr = lr_at(step)
        opt.step()
        total = np.array([loss_sum], np.float64)
        pg.all_reduce(total)
        losses.append(total[0] / G)
        if save and step + 1 == SAVE_AFTER:
            fp.save_checkpoint(save)
    state = {n: tdl.from_dlpack(t).clone() for n, t in fp.full_state_dict().items()}
    return state, norms, losses


def same_bits(a, b, what):
    assert list(a) == list(b), f"{what}: names {list(a)} vs {list(b)}"
    for n in a:
        assert torch.equal(a[n], b[n]), f"{what}: {n} differs (expected the same bits)"


def main():
    out_prefix = sys.argv[1]
    pg = braid.init()
    ckpt = f"{out_prefix}_w{pg.size}_ckpt"
    if pg.rank == 0 and os.path.exists(ckpt):
        shutil.rmtree(ckpt)
    pg.barrier()

    s3, norms3, losses = train_braid(pg, stage=3, save=ckpt)
    s0, norms0, _ = train_braid(pg, stage=0)
    resumed, _, _ = train_braid(pg, stage=1, first=SAVE_AFTER, resume=ckpt)
    same_bits(s3, s0, "stage 3 vs stage 0")
    same_bits(s3, resumed, "stage 3 vs saved at stage 3 and resumed at stage 1")
    assert norms3 == norms0, (norms3, norms0)
    assert norms3[0] > MAX_NORM, f"the first norm {norms3[0]} should be clipped"
    assert losses[-1] < losses[0], f"the loss did not fall: {losses}"

    ref, ref_norms = train_torch()
    assert list(ref) == list(s3), (list(ref), list(s3))
    for n in ref:
        err = (s3[n] - ref[n]).abs().max().item()
        scale = ref[n].abs().max().item()
        assert err <= 1e-6 * scale, f"{n}: braid and torch differ by {err} (scale {scale})"
    for got, want in zip(norms3, ref_norms):
        assert abs(got - want) <= 1e-5 * want, f"gradient norm {got} vs torch's {want}"

    if pg.rank == 0:
        print("loss " + " ".join(f"{l:.6f}" for l in losses))
        print(f"norms braid {norms3[0]:.6f} torch {ref_norms[0]:.6f}")
        braid.save_safetensors(f"{out_prefix}_w{pg.size}.safetensors", s3)
        print(f"{pg.size} ranks: stages 3, 0 and a resume agree bit for bit; torch within 1e-6")


if __name__ == "__main__":
    main()

"""Train a small GPT-2 (transformers' GPT2LMHeadModel) with ZeRO from braid while torch's
autograd computes the gradients, then the same model under torch DDP (gloo) with torch's
AdamW, and print both losses.

    braid launch --nproc-per-node 2 /usr/bin/python3 bindings/python/examples/torch_zero.py \
        [--steps 20] [--stage 3] [--check]

The data is a character-level tokenization of /usr/share/common-licenses/GPL-3 (no downloads).
Every step takes a global batch of G micro-batches; rank r runs micro-batches r, r + W, ...

The braid side (BraidZero below) is the whole integration a framework needs:
  - each GPT2Block and the embeddings / final layer norm are FlatParameters units, registered
    from the modules' own parameters; the tied lm_head.weight is transformer.wte.weight, so it
    is registered once (under transformer.wte) and installed at both places;
  - forward pre-hooks gather a unit and install braid's buffers as the module's parameters
    (torch views through DLPack, no copy); forward hooks release it;
  - after loss.backward() each unit's gradients go to reduce_gradients, last unit first; then
    finish_gradients(1 / G) and braid.AdamW.step().
The units keep their parameters from the forward to the backward (reshard_after_forward=False):
torch's autograd holds the gathered weights it saved for the backward anyway, so freeing them
after the forward would only add a second all-gather.

--check (the ctest python_example_torch_zero) asserts that braid's final loss equals DDP's
within 1e-5 relative (the two reduce in different orders and their AdamW implementations
round differently, so the last bits differ) and that the loss fell.
"""
import argparse
import contextlib
import copy
import sys
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.utils.dlpack as tdl
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import numpy, torch and transformers ({e})")
    sys.exit(77)

import braid

TEXT = "/usr/share/common-licenses/GPL-3"
SEQ = 64
TOLERANCE = 1e-5


class BraidZero:
    """A torch model whose parameters braid.FlatParameters holds, one unit per module named."""

    def __init__(self, model, unit_names, pg, stage):
        modules = dict(model.named_modules())
        self.units = [modules[name] for name in unit_names]
        # Where each Parameter object appears (module, attribute): tied weights appear twice.
        places = {}
        for mod in model.modules():
            for attr, p in mod._parameters.items():
                if p is not None:
                    places.setdefault(id(p), []).append((mod, attr))
        specs, self.places, seen = [], [], set()
        for name, unit in zip(unit_names, self.units):
            params = [(n, p) for n, p in unit.named_parameters() if id(p) not in seen]
            seen.update(id(p) for _, p in params)
            specs.append((name, [(n, p.detach()) for n, p in params]))
            self.places.append([places[id(p)] for _, p in params])
        missing = [n for n, p in model.named_parameters() if id(p) not in seen]
        assert not missing, f"parameters outside every unit: {missing}"
        self.fp = braid.FlatParameters(specs, pg, stage=stage, reshard_after_forward=False)
        self.installed = [[] for _ in self.units]
        # A unit is released after the last module that uses its parameters (lm_head for wte).
        last_user = {}
        for u, unit in enumerate(self.units):
            last_user[u] = unit
            for where in self.places[u]:
                for mod, _ in where:
                    if mod is not unit and not any(mod is m for m in unit.modules()):
                        last_user[u] = mod
        for u, unit in enumerate(self.units):
            unit.register_forward_pre_hook(lambda mod, args, u=u: self._gather(u))
            last_user[u].register_forward_hook(lambda mod, args, out, u=u: self.fp.release(u))

    def _gather(self, u):
        self.fp.gather(u)
        self.installed[u] = []
        for i, where in enumerate(self.places[u]):
            p = torch.nn.Parameter(tdl.from_dlpack(self.fp.param(u, i)))
            for mod, attr in where:
                mod._parameters[attr] = p
            self.installed[u].append(p)

    def forward_backward(self, model, ids):
        self.fp.begin_forward()
        loss = model(input_ids=ids, labels=ids).loss
        self.fp.end_forward()
        loss.backward()
        self.fp.begin_backward()
        for u in reversed(range(len(self.units))):
            self.fp.gather(u)
            self.fp.reduce_gradients(u, [p.grad for p in self.installed[u]])
        self.fp.end_backward()
        return loss.item()


def make_model(vocab):
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=SEQ, vocab_size=vocab,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    return GPT2LMHeadModel(config)


def micro_batch(data, step, m, batch):
    g = torch.Generator().manual_seed(100003 * step + m)
    starts = torch.randint(0, len(data) - SEQ, (batch,), generator=g)
    return torch.stack([data[s:s + SEQ] for s in starts.tolist()])


def train_braid(model, data, pg, args):
    units = (["transformer.wte", "transformer.wpe"] +
             [f"transformer.h.{i}" for i in range(model.config.n_layer)] + ["transformer.ln_f"])
    zero = BraidZero(model, units, pg, args.stage)
    opt = braid.AdamW(zero.fp, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for step in range(args.steps):
        loss = np.zeros(1, np.float64)
        for j in range(args.micro_batches // pg.size):
            loss += zero.forward_backward(model, micro_batch(data, step, j * pg.size + pg.rank,
                                                             args.batch))
        zero.fp.finish_gradients(1.0 / args.micro_batches)
        opt.step()
        pg.all_reduce(loss)
        losses.append(loss[0] / args.micro_batches)
    return losses


def train_ddp(model, data, args):
    rank, size = dist.get_rank(), dist.get_world_size()
    # gloo cannot broadcast the attention's bool mask buffers; they are constants anyway.
    DDP._set_params_and_buffers_to_ignore_for_model(
        model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    rounds = args.micro_batches // size
    losses = []
    for step in range(args.steps):
        loss_sum = torch.zeros(1, dtype=torch.float64)
        for j in range(rounds):
            ids = micro_batch(data, step, j * size + rank, args.batch)
            sync = j == rounds - 1  # DDP averages over ranks once, at the last micro-batch
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss = ddp(input_ids=ids, labels=ids).loss
                (loss * (size / args.micro_batches)).backward()
            loss_sum += loss.item()
        opt.step()
        opt.zero_grad()
        dist.all_reduce(loss_sum)
        losses.append(loss_sum.item() / args.micro_batches)
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--stage", type=int, default=3, choices=[0, 1, 2, 3])
    parser.add_argument("--micro-batches", type=int, default=4, help="G, per step, all ranks")
    parser.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--check", action="store_true",
                        help=f"assert braid's final loss equals DDP's within {TOLERANCE} "
                             "relative and that the loss fell")
    args = parser.parse_args()

    pg = braid.init()
    assert args.micro_batches % pg.size == 0, "--micro-batches must be a multiple of the ranks"
    text = open(TEXT, encoding="utf-8").read()
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)
    model = make_model(len(vocab))
    ddp_model = copy.deepcopy(model)  # before braid takes the parameters over

    t0 = time.perf_counter()
    braid_losses = train_braid(model, data, pg, args)
    t1 = time.perf_counter()
    braid.init_torch_distributed(pg, "gloo")
    ddp_losses = train_ddp(ddp_model, data, args)
    t2 = time.perf_counter()
    dist.destroy_process_group()

    if pg.rank == 0:
        print(f"GPT-2 {sum(p.numel() for p in ddp_model.parameters())} parameters, vocab "
              f"{len(vocab)}, {pg.size} ranks, ZeRO stage {args.stage}, global batch "
              f"{args.micro_batches} x {args.batch} x {SEQ} tokens")
        print("step  braid loss   DDP loss")
        for s, (b, d) in enumerate(zip(braid_losses, ddp_losses)):
            print(f"{s:4d}  {b:10.6f}  {d:10.6f}")
        print(f"time per step: braid {1e3 * (t1 - t0) / args.steps:.1f} ms, DDP (gloo) "
              f"{1e3 * (t2 - t1) / args.steps:.1f} ms")
    if args.check:
        b, d = braid_losses[-1], ddp_losses[-1]
        assert abs(b - d) <= TOLERANCE * abs(d), \
            f"final loss: braid {b} vs DDP {d} (relative difference {abs(b - d) / abs(d):.2e})"
        assert braid_losses[-1] < braid_losses[0] - 0.1, f"the loss did not fall: {braid_losses}"
        if pg.rank == 0:
            print(f"check: final loss braid {b:.6f} DDP {d:.6f}, relative difference "
                  f"{abs(b - d) / abs(d):.1e} <= {TOLERANCE}; loss fell from "
                  f"{braid_losses[0]:.4f}")


if __name__ == "__main__":
    main()

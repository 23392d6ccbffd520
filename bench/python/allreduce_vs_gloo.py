#!/usr/bin/python3
"""braid's all_reduce from Python (braid.ProcessGroup on torch CPU tensors, through DLPack)
against torch.distributed's gloo all_reduce on the same tensors, in the same processes:

    braid launch --nproc-per-node 2 /usr/bin/python3 bench/python/allreduce_vs_gloo.py \
        [--sizes 16,1M,64M] [--repeats 5] [--json FILE]

bench/python/run_vs_gloo.sh runs it and, in the same invocation, the machine's limit for the
same sizes (braid bench --peer limit), and prints them side by side (docs/performance.md).

Measured as `braid bench` and bench/collectives_vs_gloo.py measure (docs/bench.md): per size
and library, warm-up calls, then `repeats` timed loops after a barrier; the median loop's time
per call, averaged over ranks. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (nccl-tests'
all_reduce factor). Each library's result is checked once before it is timed. The third
column is braid on a tensor from pg.empty_shared (the shm backend's own memory, where braid
skips the staging copy), viewed by torch through DLPack.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.utils.dlpack as tdl

import braid


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def size_str(b):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= m:
            return f"{b / m:g} {unit}"
    return f"{b} B"


def measure(call, barrier, iters, warmup, repeats):
    for _ in range(warmup):
        call()
    loops = []
    for _ in range(repeats):
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        loops.append((time.perf_counter() - t0) / iters)
    return statistics.median(loops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="16,1M,64M", help="bytes per rank, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the rows to this file (rank 0)")
    args = parser.parse_args()

    pg = braid.init()
    braid.init_torch_distributed(pg, "gloo")
    n, me = pg.size, pg.rank
    factor = 2 * (n - 1) / n
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        count = max(1, size // 4)
        nbytes = count * 4
        iters = max(3, min(2000, int(5e7 / nbytes)))  # about 50 MB moved per timed loop
        warmup = max(2, iters // 10)
        plain = torch.zeros(count, dtype=torch.float32)
        shared_t = pg.empty_shared((count,), "f32")
        shared = tdl.from_dlpack(shared_t)
        # One checked call per library first: every rank contributes rank + 1.
        for x, reduce in ((plain, lambda x: pg.all_reduce(x)),
                          (plain, lambda x: dist.all_reduce(x)),
                          (shared, lambda x: pg.all_reduce(shared_t))):
            x.fill_(me + 1.0)
            reduce(x)
            assert torch.all(x == n * (n + 1) / 2), "all_reduce gave a wrong result"
            x.zero_()  # timed calls on zeros: the values stay finite
        times = {
            "braid": measure(lambda: pg.all_reduce(plain), pg.barrier, iters, warmup,
                             args.repeats),
            "gloo": measure(lambda: dist.all_reduce(plain), dist.barrier, iters, warmup,
                            args.repeats),
            "braid shared": measure(lambda: pg.all_reduce(shared_t), pg.barrier, iters, warmup,
                                    args.repeats),
        }
        secs = torch.tensor(list(times.values()), dtype=torch.float64)
        pg.all_reduce(secs, op="avg")
        rows.append((nbytes, count, dict(zip(times, secs.tolist()))))
        del shared, shared_t

    if me == 0:
        print(f"# all_reduce sum f32, {n} ranks, backend {pg.backend} (braid {braid.__version__})"
              f" vs gloo (torch {torch.__version__}); busbw = algbw * {factor:g}")
        print(f"# {'size':>9} {'count':>9}  {'braid us':>9} {'busbw':>7}  {'gloo us':>9} "
              f"{'busbw':>7}  {'ratio':>6}  {'shared us':>9} {'busbw':>7}")
        for nbytes, count, t in rows:
            bw = {k: nbytes / v / 1e9 * factor for k, v in t.items()}
            print(f"  {size_str(nbytes):>9} {count:>9}  {t['braid'] * 1e6:9.1f} {bw['braid']:7.2f}"
                  f"  {t['gloo'] * 1e6:9.1f} {bw['gloo']:7.2f}  {bw['braid'] / bw['gloo']:6.1f}"
                  f"  {t['braid shared'] * 1e6:9.1f} {bw['braid shared']:7.2f}")
        print("# busbw in GB/s; ratio = braid busbw / gloo busbw (torch tensors both)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"tool": "allreduce_vs_gloo.py", "nranks": n, "backend": pg.backend,
                           "busbw_factor": factor, "repeats": args.repeats,
                           "rows": [{"size": nbytes, "count": count,
                                     "time_us": {k: v * 1e6 for k, v in t.items()},
                                     "busbw_gbps": {k: nbytes / v / 1e9 * factor
                                                    for k, v in t.items()}}
                                    for nbytes, count, t in rows]}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

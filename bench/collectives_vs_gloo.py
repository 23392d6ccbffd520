#!/usr/bin/python3
"""Gloo (torch.distributed, CPU tensors) measured the way `braid bench` measures (docs/bench.md):
per size, `repeats` timed loops of -n iterations after a barrier, the median loop's time per
iteration, averaged over ranks; algbw = size / time, busbw = algbw * nccl-tests' factor.

  /usr/bin/python3 bench/collectives_vs_gloo.py --nproc 4 -b 16 -e 64M -f 4 -n 20 -w 5 \
      --op all_reduce --op all_gather --op reduce_scatter

Prints nccl-tests' table (one placement: what torch offers for gloo), one per op. Gloo in
torch has no reduce_scatter; that op is reported as skipped, not emulated.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n}


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def time_str(us):
    return "%7.0f" % us if us >= 10000 else "%7.1f" % us if us >= 100 else "%7.2f" % us


def make_call(op, count, n, rank):
    if op == "all_reduce":
        t = torch.ones(count, dtype=torch.float32)
        return lambda: dist.all_reduce(t), count * 4
    if op == "all_gather":
        src = torch.full((count,), float(rank), dtype=torch.float32)
        # torch's gloo has only the list form; the list holds views of one buffer.
        outs = list(torch.empty(count * n, dtype=torch.float32).chunk(n))
        return lambda: dist.all_gather(outs, src), count * n * 4
    return None, 0


def worker(rank, n, port, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=n)
    lines = []
    for op in args.op:
        lines.append("# Collective test: %s (gloo, torch %s), %d ranks" % (op, torch.__version__, n))
        if op == "reduce_scatter":
            lines.append("# gloo: skipped reduce_scatter: ProcessGroupGloo has no reduce_scatter")
            continue
        lines.append("#       size         count      type   redop    root     time   algbw   busbw")
        lines.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)")
        size = args.b
        bws = []
        while size <= args.e:
            count = size // 4 // (n if op == "all_gather" else 1)
            call, nbytes = make_call(op, count, n, rank)
            for _ in range(args.w):
                call()
            loops = []
            for _ in range(args.repeats):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.n):
                    call()
                loops.append((time.perf_counter() - t0) / args.n)
            sec = torch.tensor([statistics.median(loops)], dtype=torch.float64)
            dist.all_reduce(sec)
            sec = sec.item() / n
            algbw = nbytes / 1e9 / sec
            busbw = algbw * FACTORS[op](n)
            bws.append(busbw)
            lines.append("%12d  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f" % (
                nbytes, count, "float", "sum" if op != "all_gather" else "none", -1,
                time_str(sec * 1e6), algbw, busbw))
            size *= args.f
        lines.append("# Avg bus bandwidth    : %g " % (sum(bws) / max(len(bws), 1)))
    if rank == 0:
        queue.put("\n".join(lines))
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("-b", type=parse_size, default=16)
    p.add_argument("-e", type=parse_size, default=64 << 20)
    p.add_argument("-f", type=int, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--port", type=int, default=29731)
    p.add_argument("--op", action="append", choices=sorted(FACTORS))
    args = p.parse_args()
    args.op = args.op or ["all_reduce"]
    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.nproc, args.port, args, queue))
             for r in range(args.nproc)]
    for pr in procs:
        pr.start()
    report = None
    while report is None and any(pr.is_alive() for pr in procs):
        try:
            report = queue.get(timeout=1.0)
        except Exception:  # queue.Empty: a rank may have failed; check again
            pass
    for pr in procs:
        pr.join()
    print(report or "# gloo: no report (a rank failed)")
    return max(pr.exitcode for pr in procs)


if __name__ == "__main__":
    sys.exit(main())

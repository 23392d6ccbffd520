#!/usr/bin/python3
"""The peer of braid's fused AdamW step (bench/kernels_bench.cc, adamw_*): one
torch.optim.AdamW step on one parameter, single-tensor (foreach=False) and multi-tensor
(foreach=True), timed as the median of several steps after a warm-up step that creates the
state. Run by bench/run_optim.sh; alone:

    /usr/bin/python3 bench/optim_vs_torch.py [threads] [--n 67108864] [--steps 9] [--json]

threads (default 2) goes to torch.set_num_threads. GB/s counts the bytes the step must move,
as braid's benchmark does: param read + write, grad read, exp_avg and exp_avg_sq read + write,
each in its dtype (torch keeps the state in the parameter's dtype): 28 bytes per element for
f32, 14 for bf16 (bf16 param and grad; torch's AdamW has no f32 master weights). torch's
single-tensor step makes several passes and a temporary, so its real traffic is larger.
"""
import argparse
import json
import statistics
import sys
import time

import torch

BYTES_PER_ELEMENT = {torch.float32: 28, torch.bfloat16: 14}


def time_adamw(n, dtype, foreach, steps):
    """Median seconds of one AdamW step on n elements (lr 1e-3, weight decay 0.01)."""
    p = torch.nn.Parameter(torch.ones(n, dtype=dtype))
    p.grad = torch.full_like(p, 0.5)
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=foreach)
    opt.step()  # creates exp_avg and exp_avg_sq
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("threads", nargs="?", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--n", type=int, action="append", help="elements (repeatable; 64 Mi and 1 Mi)")
    ap.add_argument("--steps", type=int, default=9, help="timed steps per case (median)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for n in args.n or [1 << 26, 1 << 20]:
        for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            for foreach in (True, False):
                sec = time_adamw(n, dtype, foreach, args.steps)
                rows.append({"dtype": name, "n": n, "foreach": foreach, "seconds": sec,
                             "bytes_per_second": n * BYTES_PER_ELEMENT[dtype] / sec})
    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}
    if args.json:
        json.dump(info, sys.stdout)
        print()
        return
    print(f"# torch {info['torch']}, {info['threads']} threads, median of {args.steps} steps")
    print(f"{'dtype':6} {'n':>10} {'foreach':>8} {'ms/step':>9} {'GB/s':>7}")
    for r in rows:
        print(f"{r['dtype']:6} {r['n']:10} {str(r['foreach']):>8} {r['seconds'] * 1e3:9.2f} "
              f"{r['bytes_per_second'] / 1e9:7.1f}")


if __name__ == "__main__":
    main()

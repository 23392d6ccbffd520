"""What braid's Python binding costs per call: a blocking all_reduce of 4 floats on a one-rank
group (no launcher: braid.init() makes one), where the collective itself is nearly free, on a
braid.Tensor, a numpy array and a torch tensor; and torch's own __dlpack__ for comparison.

    PYTHONPATH=build/bindings/python /usr/bin/python3 bench/python/binding_overhead.py
"""
import timeit

import numpy as np
import torch

import braid


def per_call(fn, n=20000):
    return min(timeit.repeat(fn, number=n, repeat=5)) / n


def main():
    pg = braid.init()
    for name, x in (("braid.Tensor", braid.zeros(4)), ("numpy array", np.zeros(4, np.float32)),
                    ("torch tensor", torch.zeros(4))):
        print(f"all_reduce of 4 floats, {name}: {per_call(lambda: pg.all_reduce(x)) * 1e6:.2f} us")
    t = torch.zeros(4)
    print(f"torch's own __dlpack__: {per_call(lambda: t.__dlpack__()) * 1e6:.2f} us")


if __name__ == "__main__":
    main()

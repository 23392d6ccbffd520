#!/usr/bin/env python3
"""Generates torch_ops.safetensors: inputs and PyTorch outputs for braid's tensor ops.

Run with a Python that has PyTorch (Debian: /usr/bin/python3 with python3-torch):
    /usr/bin/python3 tests/reference/gen_torch_reference.py tests/reference/torch_ops.safetensors
The output is committed (small); tests/reference/torch_reference_test.cc reads it with
braid's own safetensors reader and compares braid's results with dtype-aware tolerances.
The file is written by hand (header + raw little-endian bytes) so that generating it needs
only torch, not the safetensors package.

Each case "name" has tensors "name.x" (and "name.y" for binary ops) and "name.out", and a
metadata entry name -> "op" or "op:arg".
"""
import json
import struct
import sys

import torch

torch.manual_seed(20261130)
cases = {}      # name -> spec string
tensors = {}    # full tensor name -> torch tensor

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64"}
SHORT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def add(name, spec, out, x, y=None):
    cases[name] = spec
    tensors[name + ".x"] = x
    if y is not None:
        tensors[name + ".y"] = y
    tensors[name + ".out"] = out


def unary_cases():
    base = torch.randn(256) * 3
    base[:6] = torch.tensor([0.0, -0.0, 20.0, -20.0, 1e-3, -1e-3])
    positive = base.abs() + 0.05
    fns = {
        "exp": (torch.exp, base.clamp(-80, 80)), "log": (torch.log, positive),
        "tanh": (torch.tanh, base), "sigmoid": (torch.sigmoid, base),
        "relu": (torch.relu, base), "gelu": (torch.nn.functional.gelu, base),
        "gelu_tanh": (lambda t: torch.nn.functional.gelu(t, approximate="tanh"), base),
        "silu": (torch.nn.functional.silu, base), "sqrt": (torch.sqrt, positive),
        "rsqrt": (torch.rsqrt, positive), "neg": (torch.neg, base), "abs": (torch.abs, base),
    }
    for op, (fn, x) in fns.items():
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            xi = x.to(dt)
            # torch computes reduced-precision pointwise ops in f32 and rounds once, as braid does
            add(f"{op}_{SHORT[dt]}", op, fn(xi.float()).to(dt), xi)


def softmax_cases():
    x = torch.randn(7, 33) * 4
    for dt in (torch.float32, torch.bfloat16):
        xi = x.to(dt)
        add(f"softmax_last_{SHORT[dt]}", "softmax:-1", torch.softmax(xi.float(), -1).to(dt), xi)
        add(f"log_softmax_last_{SHORT[dt]}", "log_softmax:-1",
            torch.log_softmax(xi.float(), -1).to(dt), xi)
    add("softmax_dim0_f32", "softmax:0", torch.softmax(x, 0), x)


def reduction_cases():
    x = torch.randn(5, 77)
    add("sum_all_f32", "sum", x.sum(), x)
    add("mean_all_f32", "mean", x.mean(), x)
    add("amax_all_f32", "amax", x.amax(), x)
    add("norm_all_f32", "norm", torch.linalg.vector_norm(x), x)
    add("sum_dim1_f32", "sum:1", x.sum(1), x)
    add("mean_dim0_f32", "mean:0", x.mean(0), x)
    xb = x.to(torch.bfloat16)
    add("sum_all_bf16_to_f32", "sum_f32", xb.float().sum(), xb)


def matmul_cases():
    a = torch.randn(17, 33)
    b = torch.randn(33, 9)
    add("matmul_f32", "matmul", a @ b, a, b)
    add("matmul_f32_bt", "matmul_bt", a @ b, a, b.t().contiguous())
    ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
    add("matmul_bf16", "matmul", (ab.float() @ bb.float()).to(torch.bfloat16), ab, bb)
    a3 = torch.randn(3, 4, 6)
    b3 = torch.randn(3, 6, 5)
    add("bmm_f32", "matmul", torch.bmm(a3, b3), a3, b3)


def binary_cases():
    x = torch.randn(4, 5)
    y = torch.randn(5)
    for dt in (torch.float32, torch.bfloat16):
        xi, yi = x.to(dt), y.to(dt)
        for op, fn in (("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                       ("div", torch.div), ("maximum", torch.maximum)):
            add(f"{op}_bcast_{SHORT[dt]}", op, fn(xi.float(), yi.float()).to(dt), xi, yi)


def write(path):
    header = {"__metadata__": dict(cases)}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.contiguous()
        if t.dtype in (torch.bfloat16, torch.float16):
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


unary_cases()
softmax_cases()
reduction_cases()
matmul_cases()
binary_cases()
write(sys.argv[1])
print(f"{len(cases)} cases, {len(tensors)} tensors, torch {torch.__version__}")

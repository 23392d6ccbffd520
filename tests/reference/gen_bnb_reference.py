#!/usr/bin/env python3
"""Generates bnb_quant.safetensors: bitsandbytes-format quantization references for
braid's kernels/src/cpu/quant.cc (checked by bnb_reference_test.cc).

The bitsandbytes package itself could not be run on the machine that generated the
committed file (it needs PyTorch; see docs/quantization.md, "What is verified against
what"). This script therefore reimplements bitsandbytes' published algorithm in numpy,
written from its source rather than from braid's C++:

  - the NF4 and FP4 code tables: bitsandbytes/functional.py, get_4bit_type();
  - 4-bit quantization: csrc/kernels.cu, kQuantizeBlockwise with dQuantizeNF4 / dQuantizeFP4:
    absmax per block, x * (1 / absmax), the comparison trees with strict '>' at the
    midpoints, two codes per byte, the first element in the high nibble;
  - the 8-bit dynamic code: functional.py, create_dynamic_map(signed=True) (torch.linspace in
    f32 emulated by ATen's scalar formula), and 8-bit block-wise quantization:
    kQuantizeBlockwise with dQuantize<0> (the binary search and midpoint rule);
  - double quantization: functional.py, quantize_4bit(compress_statistics=True): offset =
    absmax.mean(), quantize_blockwise(absmax - offset, blocksize=256);
  - LLM.int8: functional.py int8_vectorwise_quant (row absmax, round(x * 127 / absmax),
    outliers |x| >= threshold left out of the absmax and their columns zeroed).

Unlike braid's trees, the 4-bit codes here are found by a vectorised nearest-value search
(argmin over the code table, as bitsandbytes' pure-torch CPU fallback does), with the tie and
sign rules of the CUDA trees applied on top: an independent route to the same codes.

bitsandbytes' own compiled CPU library (libbitsandbytes_cpu.so, loaded with ctypes: it needs
no torch) is used where it has an entry point, when its path is given as the second argument:
  - cquantize_blockwise_cpu_fp32: the 8-bit block-wise quantization of double quantization;
    stored as "blockwise8.lib_q" beside this script's dQuantize<0> codes ("blockwise8.q").
    The absmax agree; the codes differ for about 0.15% of values, each within about 1e-5 of
    a midpoint between two code values, where the library's search (csrc/cpu_ops.cpp) does
    not pick the nearer one and the CUDA kernel's does: braid follows the CUDA kernel;
  - cdequantize_blockwise_cpu_nf4_fp32 / _fp4_fp32: 4-bit dequantization; stored as
    "<case>.<qt>.dequant" (bitsandbytes' own output) for braid's dequantize_4bit to match.
bitsandbytes 0.50.2's 4-bit *quantization* on CPU is torch code (backends/default/ops.py,
torch.bucketize over the code midpoints); it is ported below (bucketize_4bit) and compared:
the codes agree except where its documented differences from the CUDA trees apply (an
all-zero block: the clamp to 1e-38 makes every value code "0.0" instead of code 0; the tail
block divides by absmax instead of multiplying by the reciprocal; FP4 values within 0.0026 of
zero take the other of the two zero codes, 0b0000 or 0b1000, both +0 in the table; a value
exactly at a negative midpoint goes to the lower code, where the sign-magnitude tree rounds
toward zero). The counts
of differing codes and of differing code values per case are stored in the metadata
("bucketize_diffs": "<case>.<qt>" and "<case>.<qt>.value").

Run (the committed file was made with bitsandbytes 0.50.2's wheel, unpacked):
    pip download --no-deps bitsandbytes==0.50.2 && unzip bitsandbytes-0.50.2-*.whl -d bnb
    python3 tests/reference/gen_bnb_reference.py tests/reference/bnb_quant.safetensors \
        bnb/bitsandbytes/libbitsandbytes_cpu.so
Needs numpy and safetensors. Every input comes from numpy's default_rng(20261206).
"""

import json
import sys

import numpy as np
from safetensors.numpy import save_file

F32 = np.float32

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=F32)
FP4 = (np.array([0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, 0.0, -0.0625, -8, -12, -4, -6,
                 -2, -3], dtype=F32) / F32(12.0)).astype(F32)


def linspace_f32(start, end, steps):
    start, end = F32(start), F32(end)
    step = F32((end - start) / F32(steps - 1))
    half = steps // 2
    return np.array([start + step * F32(i) if i < half else end - step * F32(steps - i - 1)
                     for i in range(steps)], dtype=F32)


def dynamic_map_signed():
    data = []
    for i in range(7):
        b = linspace_f32(0.1, 1.0, 2 ** i + 1)
        means = ((b[:-1] + b[1:]) / F32(2.0)).astype(F32)
        scale = F32(10.0 ** (i - 6))
        data += list((scale * means).astype(F32))
        data += list((-scale * means).astype(F32))
    data += [F32(0.0), F32(1.0)]
    return np.array(sorted(data), dtype=F32)


def nearest_code(scaled, table, fp4):
    """Nearest entry of `table`; at an exact midpoint the lower value (the trees use '>').
    NaN (an all-zero block) gives code 0, as the trees' comparisons all fail."""
    order = np.argsort(table, kind="stable")
    vals = table[order]
    out = np.zeros(scaled.shape, dtype=np.uint8)
    for idx, x in np.ndenumerate(scaled):
        if np.isnan(x):
            out[idx] = 0
            continue
        mag = abs(x) if fp4 else x
        cand = vals if not fp4 else vals[vals >= 0]
        cidx = order if not fp4 else order[vals >= 0]
        d = np.abs(cand.astype(np.float64) - np.float64(mag))
        best = int(np.argmin(d))
        # A tie goes to the lower value: the trees take the upper one only when x > midpoint.
        ties = np.nonzero(d == d[best])[0]
        best = int(ties[0])
        code = int(cidx[best])
        if fp4:
            code = code & 0b0111  # +0 rather than -0 for the magnitude
            if x < 0:
                code |= 0b1000
        out[idx] = code
    return out


def quantize_4bit(x, table, blocksize, fp4):
    n = x.size
    blocks = (n + blocksize - 1) // blocksize
    absmax = np.zeros(blocks, dtype=F32)
    codes = np.zeros(n, dtype=np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):
        for b in range(blocks):
            blk = x[b * blocksize:(b + 1) * blocksize]
            m = F32(np.max(np.abs(blk)))
            absmax[b] = m
            inv = F32(F32(1.0) / m)
            codes[b * blocksize:(b + 1) * blocksize] = nearest_code((blk * inv).astype(F32),
                                                                    table, fp4)
    if n % 2:
        codes = np.append(codes, np.uint8(0))
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    return packed, absmax


def dquantize(code, x):
    """dQuantize<0> from csrc/kernels.cu, transcribed."""
    pivot, upper_pivot, lower_pivot = 127, 255, 0
    lower, upper = F32(-1.0), F32(1.0)
    val = code[pivot]
    i = 64
    while i > 0:
        if x > val:
            lower_pivot, lower = pivot, val
            pivot += i
        else:
            upper_pivot, upper = pivot, val
            pivot -= i
        val = code[pivot]
        i >>= 1
    if upper_pivot == 255:
        upper = code[upper_pivot]
    if lower_pivot == 0:
        lower = code[lower_pivot]
    if x > val:
        mid = F32((upper + val) * F32(0.5))
        return upper_pivot if x > mid else pivot
    mid = F32((lower + val) * F32(0.5))
    return lower_pivot if x < mid else pivot


def quantize_blockwise_8bit(x, code, blocksize):
    n = x.size
    blocks = (n + blocksize - 1) // blocksize
    absmax = np.zeros(blocks, dtype=F32)
    q = np.zeros(n, dtype=np.uint8)
    for b in range(blocks):
        blk = x[b * blocksize:(b + 1) * blocksize]
        m = F32(np.max(np.abs(blk)))
        absmax[b] = m
        inv = F32(F32(1.0) / m)
        for j, v in enumerate(blk):
            q[b * blocksize + j] = dquantize(code, F32(v * inv))
    return q, absmax


def int8_rows(x, threshold):
    a = np.abs(x)
    outl = (a >= threshold) if threshold > 0 else np.zeros_like(x, dtype=bool)
    absmax = np.where(outl, F32(0), a).max(axis=1).astype(F32)
    with np.errstate(divide="ignore"):
        scale = np.where(absmax > 0, F32(127.0) / absmax, F32(0)).astype(F32)
    q = np.clip(np.rint((x * scale[:, None]).astype(F32)), -127, 127).astype(np.int8)
    cols = np.nonzero(outl.any(axis=0))[0].astype(np.int64)
    q[:, cols] = 0
    return q, absmax, cols


def bucketize_4bit(x, table, blocksize):
    """bitsandbytes 0.50.2 backends/default/ops.py quantize_4bit (the CPU path), in numpy."""
    order = np.argsort(table, kind="stable")
    bounds = ((table[order[:-1]] + table[order[1:]]) / F32(2)).astype(F32)
    n = x.size
    rem = n % blocksize
    full = n - rem
    a = x[:full].reshape(-1, blocksize)
    absmax = np.abs(a).max(axis=1).astype(F32)
    scaled = np.clip(a * (F32(1.0) / np.maximum(absmax, F32(1e-38)))[:, None], -1, 1).reshape(-1)
    if rem:
        am = max(F32(np.abs(x[full:]).max()), F32(1e-38))
        scaled = np.concatenate([scaled, np.clip(x[full:] / am, -1, 1)]).astype(F32)
    q = np.searchsorted(bounds, scaled, side="left")  # torch.bucketize(right=False)
    return order[q].astype(np.uint8)


class BnbLib:
    """ctypes front of libbitsandbytes_cpu.so (signatures from backends/cpu/ops.py)."""

    def __init__(self, path):
        import ctypes as ct
        self.ct = ct
        self.lib = ct.CDLL(path)

    def _p(self, a):
        return a.ctypes.data_as(self.ct.c_void_p)

    def quantize_blockwise(self, code, x, blocksize):
        n = x.size
        absmax = np.zeros((n + blocksize - 1) // blocksize, F32)
        q = np.zeros(n, np.uint8)
        self.lib.cquantize_blockwise_cpu_fp32(self._p(code), self._p(x), self._p(absmax), self._p(q),
                                              self.ct.c_longlong(blocksize), self.ct.c_longlong(n))
        return q, absmax

    def dequantize_4bit(self, qt, packed, absmax, blocksize, rows, cols):
        out = np.zeros(rows * cols, F32)
        fn = getattr(self.lib, f"cdequantize_blockwise_cpu_{qt}_fp32")
        fn(self._p(packed), self._p(absmax), self._p(out), self.ct.c_longlong(blocksize),
           self.ct.c_longlong(rows), self.ct.c_longlong(cols))
        return out


def main(path, lib_path=None):
    rng = np.random.default_rng(20261206)
    out, cases, diffs = {}, [], {}
    lib = BnbLib(lib_path) if lib_path else None
    code8 = dynamic_map_signed()
    out["dynamic_code"] = code8
    out["nf4_code"] = NF4
    out["fp4_code"] = FP4
    inputs = {
        "randn_4096": rng.standard_normal(4096).astype(F32),
        "mixed_odd_325": np.concatenate([rng.standard_normal(192).astype(F32) * F32(0.02),
                                         np.zeros(64, F32),  # an all-zero block
                                         rng.uniform(-3, 3, 69).astype(F32)]),
        "tiny_and_ties": (np.array([FP4[1] / 2, -FP4[1] / 2, 1e-4, -1e-4] * 16, dtype=F32)
                          * F32(1.0)).astype(F32),
    }
    inputs["tiny_and_ties"][0] = F32(1.0)  # absmax 1: the midpoints hit exactly
    for name, x in inputs.items():
        out[f"{name}.x"] = x
        for qt, table in (("nf4", NF4), ("fp4", FP4)):
            packed, absmax = quantize_4bit(x, table, 64, qt == "fp4")
            out[f"{name}.{qt}.packed"] = packed
            out[f"{name}.{qt}.absmax"] = absmax
            codes = np.stack([packed >> 4, packed & 15], axis=1).reshape(-1)[:x.size]
            other = bucketize_4bit(x, table, 64)
            diffs[f"{name}.{qt}"] = int(np.sum(codes != other))
            diffs[f"{name}.{qt}.value"] = int(np.sum(table[codes] != table[other]))
            if lib is not None and x.size % 2 == 0:
                out[f"{name}.{qt}.dequant"] = lib.dequantize_4bit(qt, packed, absmax, 64, 1, x.size)
            if np.all(absmax > 0):  # double quantization of the absmax (quantize_4bit)
                offset = F32(np.mean(absmax.astype(np.float64)))
                centred = (absmax - offset).astype(F32)
                q2, a2 = quantize_blockwise_8bit(centred, code8, 256)
                out[f"{name}.{qt}.dq_absmax"] = q2
                out[f"{name}.{qt}.dq_nested_absmax"] = a2
                out[f"{name}.{qt}.dq_offset"] = np.array([offset], dtype=F32)
                if name == "randn_4096":
                    # QuantState.as_dict(packed=True)'s quant_state entry for this tensor viewed
                    # as a [64, 64] f32 weight: pack_dict_to_tensor(json.dumps(...)) bytes.
                    state = {"quant_type": qt, "blocksize": 64, "dtype": "float32",
                             "shape": (64, 64), "nested_blocksize": 256,
                             "nested_dtype": "float32", "nested_offset": float(offset)}
                    out[f"{name}.{qt}.quant_state_json"] = np.frombuffer(
                        json.dumps(state).encode("utf-8"), dtype=np.uint8).copy()
        cases.append(name)
    w = (rng.standard_normal((24, 96)) * 0.05).astype(F32)
    act = rng.standard_normal((4, 96)).astype(F32)
    act[1, 5], act[3, 70] = F32(40.0), F32(-6.0)  # -6.0 sits exactly at the threshold
    for name, m, thr in (("int8_w", w, 0.0), ("int8_act", act, 6.0)):
        q, absmax, cols = int8_rows(m, thr)
        out[f"{name}.x"] = m
        out[f"{name}.q"] = q
        out[f"{name}.absmax"] = absmax
        out[f"{name}.outlier_cols"] = cols if cols.size else np.array([-1], np.int64)
    if lib is not None:  # 8-bit block-wise: bitsandbytes' CPU library beside dQuantize<0>
        y = (rng.standard_normal(256 * 40) * 0.01).astype(F32)
        lq, la = lib.quantize_blockwise(code8, y, 256)
        q2, a2 = quantize_blockwise_8bit(y, code8, 256)
        assert np.array_equal(la, a2), "quantize_blockwise absmax"
        out["blockwise8.x"], out["blockwise8.q"], out["blockwise8.absmax"] = y, q2, a2
        out["blockwise8.lib_q"] = lq
        diffs["blockwise8_lib_vs_cuda"] = int(np.sum(lq != q2))
    meta = {"generator": "numpy reimplementation of bitsandbytes' published algorithm"
                         + (" + libbitsandbytes_cpu.so (bitsandbytes 0.50.2)" if lib else ""),
            "numpy_version": np.__version__, "cases": json.dumps(cases),
            "bucketize_diffs": json.dumps(diffs)}
    save_file({k: np.ascontiguousarray(v) for k, v in out.items()}, path, metadata=meta)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)

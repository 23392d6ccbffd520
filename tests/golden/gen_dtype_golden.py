#!/usr/bin/env python3
"""Golden cases for braid's low-precision float conversions (core/float_types.h).

The reference is numpy (float16) and ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2),
converting from float32. The C++ test (dtype_golden_test.cc) compares braid bit-exactly
against the files this script writes; docs/dtypes.md describes the cases.

Usage: gen_dtype_golden.py OUTPUT_DIR

Every file has the same layout, all little-endian:
  8 bytes  magic b"BRDGOLD1"
  u32      input size in bytes  (1, 2 or 4)
  u32      output size in bytes (1, 2 or 4)
  u64      count
  count x input  bit patterns
  count x output bit patterns
Files: decode_<fmt>.bin (every bit pattern of <fmt> -> f32 bits) and
encode_<fmt>.bin (f32 bits -> <fmt> bits) for fmt in f16, bf16, e4m3fn, e5m2.
"""

import os
import struct
import sys

try:
    import ml_dtypes
    import numpy as np
except ImportError as e:  # the C++ test names this script when the files are missing
    sys.exit(f"gen_dtype_golden.py: {e}. Install the reference: pip install numpy ml_dtypes")

MAGIC = b"BRDGOLD1"
SEED = 0x5EED_B4A1D  # fixed: the random cases are the same on every run
N_RANDOM_BITS = 1_000_000  # uniformly random f32 bit patterns
N_RANDOM_IN_RANGE = 500_000  # random f32 with exponents around the target's range

FORMATS = {
    # name: (numpy type, bit-pattern storage type)
    "f16": (np.float16, np.uint16),
    "bf16": (ml_dtypes.bfloat16, np.uint16),
    "e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8),
    "e5m2": (ml_dtypes.float8_e5m2, np.uint8),
}


def write_cases(path, inputs, outputs):
    assert inputs.shape == outputs.shape
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<IIQ", inputs.dtype.itemsize, outputs.dtype.itemsize, inputs.size))
        f.write(inputs.astype(inputs.dtype.newbyteorder("<")).tobytes())
        f.write(outputs.astype(outputs.dtype.newbyteorder("<")).tobytes())


def all_patterns(bits_type):
    return np.arange(np.iinfo(bits_type).max + 1, dtype=np.int64).astype(bits_type)


def decode_table(target, bits_type):
    patterns = all_patterns(bits_type)
    with np.errstate(all="ignore"):
        f32 = patterns.view(target).astype(np.float32)
    return patterns, f32.view(np.uint32)


def exact_f32(values_f64):
    """float64 values that must be exactly representable in float32."""
    f32 = values_f64.astype(np.float32)
    assert np.array_equal(f32.astype(np.float64), values_f64), "a case is not exact in f32"
    return f32


def neighbours(f32):
    """f32 values one ulp below and above each input."""
    return np.concatenate([np.nextafter(f32, np.float32(-np.inf)),
                           np.nextafter(f32, np.float32(np.inf))])


def encode_inputs(target, bits_type, rng):
    patterns, decoded = decode_table(target, bits_type)
    values = decoded.view(np.float32)
    finite = np.unique(values[np.isfinite(values)].astype(np.float64))
    positive = finite[finite >= 0]  # includes 0 and every subnormal
    # The value just past the largest finite one, had the exponent range been wider
    # (for e4m3fn: had the NaN code been a number): max + ulp(max). Its midpoint with max
    # is the overflow threshold.
    top = positive[-1]
    beyond = top + (top - positive[-2])
    ladder = np.append(positive, beyond)
    midpoints = (ladder[:-1] + ladder[1:]) / 2.0
    mid_f32 = exact_f32(midpoints)
    cases = [
        exact_f32(positive),
        mid_f32,
        neighbours(mid_f32),
        neighbours(exact_f32(positive)),
    ]
    past_top = np.array([beyond, 2.0 * top, 4.0 * top])
    cases.append(exact_f32(past_top[past_top < 2.0**128]))  # bf16's lie beyond f32 too
    special_bits = np.array(
        [
            0x7F800000,  # +Inf
            0x7F7FFFFF,  # f32 max
            0x00800000,  # f32 min normal
            0x007FFFFF,  # largest f32 subnormal
            0x00000001,  # smallest f32 subnormal
            0x00400000,
            0x00000002,
            0x7FC00000,  # quiet NaN
            0x7F800001,  # signalling NaN, smallest payload
            0x7FBFFFFF,  # signalling NaN, largest payload
            0x7FC00001,
            0x7FFFFFFF,
            0x7F802000,  # a payload that fits a half's mantissa
        ],
        dtype=np.uint32,
    )
    cases.append(special_bits.view(np.float32))
    # f32 subnormals: every power of two and a random sample.
    cases.append((np.uint32(1) << np.arange(23, dtype=np.uint32)).view(np.float32))
    cases.append(rng.integers(1, 1 << 23, size=4096, dtype=np.uint32).view(np.float32))
    # random values whose exponent is spread over the target's range and a little beyond
    lo = np.log2(positive[1]) - 3
    hi = min(np.log2(top) + 2, 127.9)  # bf16's range reaches the top of f32's
    exps = rng.uniform(lo, hi, size=N_RANDOM_IN_RANGE)
    cases.append(np.exp2(exps).astype(np.float32))
    positive_cases = np.concatenate(cases).astype(np.float32)
    signed = np.concatenate([positive_cases, -positive_cases])
    random_bits = rng.integers(0, 1 << 32, size=N_RANDOM_BITS, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([signed.view(np.uint32), random_bits])


def encode_expected(inputs, target, bits_type):
    with np.errstate(all="ignore"):
        return inputs.view(np.float32).astype(target).view(bits_type)


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: gen_dtype_golden.py OUTPUT_DIR")
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    total = 0
    for name, (target, bits_type) in FORMATS.items():
        patterns, decoded = decode_table(target, bits_type)
        write_cases(os.path.join(out, f"decode_{name}.bin"), patterns, decoded)
        inputs = encode_inputs(target, bits_type, rng)
        expected = encode_expected(inputs, target, bits_type)
        write_cases(os.path.join(out, f"encode_{name}.bin"), inputs, expected)
        total += patterns.size + inputs.size
        print(f"{name}: {patterns.size} decode cases, {inputs.size} encode cases")
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write(f"numpy {np.__version__}\nml_dtypes {ml_dtypes.__version__}\nseed {SEED:#x}\n")
    print(f"wrote {total} cases to {out} (numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__})")


if __name__ == "__main__":
    main(sys.argv)

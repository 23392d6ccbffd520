"""Shared pieces of braid's interop tests (docs/files.md, "Interop").

The sample set below mirrors samples() in interop_tool.cc: the same names, dtypes, shapes
and values, written down a second time so that a mistake on either side shows up as a
mismatch. Float values are exactly representable in their dtype, so every correct
conversion gives the same bits; NaN is compared as "is NaN" (payloads may differ).
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

INF = math.inf
NAN = math.nan
COMMON = [0.0, -0.0, 1.0, -2.5, 0.375, 3.0]
FLOAT_EXTRA = {
    "F64": [1e300, 5e-324, INF, -INF, NAN],
    "F32": [3.4028234663852886e38, 2.0**-149, INF, -INF, NAN],
    "F16": [65504.0, 2.0**-24, INF, -INF, NAN],
    "BF16": [3.3895313892515355e38, 2.0**-133, INF, -INF, NAN],
    "F8_E4M3": [448.0, 2.0**-9, -448.0, NAN],
    "F8_E5M2": [57344.0, 2.0**-16, INF, -INF, NAN],
}
FLOAT_NAMES = {"F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16",
               "F8_E4M3": "f8e4m3", "F8_E5M2": "f8e5m2"}
UNICODE_NAME = "\u00fcn\u00efcode/name.\u00df"
METADATA = {"format": "pt", "writer": "braid", "\u00fcn\u00ef": "c\u00f8d\u00e9"}
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
# Bytes. With the sample sizes (88, 44, 22, 22, 10, 11, 48, ...) the 88-byte f64 tensor is
# over the limit (alone in its shard) and 44 + 22 fills a shard exactly: both edges of the rule.
SHARD_LIMIT = 66


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def require(modules, install_hint):
    """Imports each module or fails the test naming what is missing and how to install it."""
    loaded = []
    for name in modules:
        try:
            loaded.append(__import__(name, fromlist=["_"]))
        except ImportError as e:
            fail(f"{sys.executable} cannot import '{name}' ({e}); this interop test needs it. "
                 f"Install: {install_hint}")
    return loaded


def sample_spec():
    """[(name, safetensors dtype, shape, values in C order)] in the order braid writes them."""
    out = []
    for st in ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"]:
        values = COMMON + FLOAT_EXTRA[st]
        out.append((FLOAT_NAMES[st], st, [len(values)], values))
    out += [
        ("i64", "I64", [6], [0, 1, -1, -2**63, 2**63 - 1, 123456789012345]),
        ("i32", "I32", [6], [0, 1, -1, -2**31, 2**31 - 1, 123456]),
        ("i16", "I16", [6], [0, 1, -1, -32768, 32767, 1234]),
        ("i8", "I8", [6], [0, 1, -1, -128, 127, 12]),
        ("u8", "U8", [6], [0, 1, 127, 128, 255, 12]),
        ("bool", "BOOL", [6], [True, False, True, True, False, False]),
        ("matrix.2d", "F32", [2, 3], [0, 0.5, 1, 1.5, 2, 2.5]),
        ("scalar", "F64", [], [7.25]),
        ("empty", "F32", [0, 3], []),
        (UNICODE_NAME, "I32", [3], [7, 8, 9]),
    ]
    return out


def numpy_dtype(st):
    import numpy as np
    import ml_dtypes
    return {
        "F64": np.float64, "F32": np.float32, "F16": np.float16,
        "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2, "I64": np.int64, "I32": np.int32,
        "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
    }[st]


def sample_arrays():
    """The sample set as numpy arrays (ml_dtypes for bf16 and fp8)."""
    import numpy as np
    out = []
    for name, st, shape, values in sample_spec():
        dt = numpy_dtype(st)
        if st in FLOAT_NAMES:
            arr = np.array(values, dtype=np.float64).astype(dt).reshape(shape)
        else:
            arr = np.array(values, dtype=dt).reshape(shape)
        out.append((name, st, arr))
    return out


def same_array(actual, expected, what):
    """Shape, dtype and bits equal; NaN positions only need to be NaN on both sides."""
    import numpy as np
    if actual.shape != expected.shape:
        fail(f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}")
    if actual.dtype != expected.dtype:
        fail(f"{what}: dtype {actual.dtype}, expected {expected.dtype}")
    a = np.ascontiguousarray(actual).reshape(-1)
    e = np.ascontiguousarray(expected).reshape(-1)
    if str(expected.dtype) in FLOAT_DTYPES:
        a_nan = np.isnan(a.astype(np.float64))
        e_nan = np.isnan(e.astype(np.float64))
        if not np.array_equal(a_nan, e_nan):
            fail(f"{what}: NaN at {np.nonzero(a_nan)[0].tolist()}, "
                 f"expected at {np.nonzero(e_nan)[0].tolist()}")
        a, e = a[~a_nan], e[~e_nan]
    if a.tobytes() != e.tobytes():
        fail(f"{what}: values {a.tolist()}, expected {e.tolist()}")


def read_raw(path):
    """Header and raw bytes of a .safetensors file, parsed by hand (for dtypes numpy lacks)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    return header, data[8 + n:]


def raw_array(path, name):
    import numpy as np
    header, data = read_raw(path)
    info = header[name]
    begin, end = info["data_offsets"]
    return np.frombuffer(data[begin:end], dtype=numpy_dtype(info["dtype"])).reshape(info["shape"])


def split_rule(sizes, limit):
    """braid's split rule, written again here: greedy in order; a tensor over the limit alone."""
    shards, current = [], 0
    for i, size in enumerate(sizes):
        if not shards or not shards[-1] or current + size > limit:
            shards.append([])
            current = 0
        shards[-1].append(i)
        current += size
    return shards


def shard_name(i, n):
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def run_tool(tool, *args, expect_ok=True):
    proc = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
    if expect_ok and proc.returncode != 0:
        fail(f"{tool} {' '.join(map(str, args))} exited {proc.returncode}: {proc.stderr}")
    return proc


def dump(tool, path):
    """braid's view of a file / index / folder: {"metadata", "tensors": [{name, dtype, shape, hex}]}."""
    return json.loads(run_tool(tool, "dump", path).stdout)

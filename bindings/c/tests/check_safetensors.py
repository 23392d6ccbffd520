"""safetensors written through braid's C ABI, read by Python's safetensors package, and back.

1. `safetensors_test save DIR` writes DIR/model.safetensors and the sharded folder DIR/sharded;
2. safetensors (numpy; bf16 through ml_dtypes) opens every file: names, dtypes, shapes, values
   and the metadata must be what the C program passed (the strided view saved in C order);
   the sharded folder must have an index naming every tensor and more than one shard;
3. `safetensors_test load DIR` loads both back through braidSafetensorsLoad and checks them.

usage: check_safetensors.py <safetensors_test> <work folder>
"""
import json
import os
import shutil
import subprocess
import sys


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
    import numpy as np
    from safetensors import safe_open
except ImportError as e:
    fail(f"{e}: this test needs numpy, ml_dtypes and safetensors (pip install numpy ml_dtypes "
         "safetensors)")

EXPECTED = {
    "w_f32": ("F32", [2, 3], np.arange(6, dtype=np.float64).reshape(2, 3) * 0.5 - 1.0),
    "b_bf16": ("BF16", [4], np.array([1.5, -2.0, 3.25, 100.0])),
    "step_i64": ("I64", [3], np.array([1 << 40, -5, 7], dtype=np.int64)),
    "mask_bool": ("BOOL", [3], np.array([True, False, True])),
    "strided_f32": ("F32", [3, 2], np.array([[1.0, 11.0], [2.0, 12.0], [3.0, 13.0]])),
}
METADATA = {"format": "pt", "producer": "braid c test"}


def header_of(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def check_tensors(path, names, metadata):
    header = header_of(path)
    with safe_open(path, framework="np") as f:
        if metadata is not None and f.metadata() != metadata:
            fail(f"{path}: metadata {f.metadata()}, expected {metadata}")
        if sorted(f.keys()) != sorted(names):
            fail(f"{path}: tensors {sorted(f.keys())}, expected {sorted(names)}")
        for name in names:
            st, shape, want = EXPECTED[name]
            if header[name]["dtype"] != st:
                fail(f"{path}: '{name}' has dtype {header[name]['dtype']}, expected {st}")
            got = f.get_tensor(name)
            if list(got.shape) != shape:
                fail(f"{path}: '{name}' has shape {list(got.shape)}, expected {shape}")
            if st == "I64" or st == "BOOL":
                same = np.array_equal(got, want)
            else:
                same = np.array_equal(got.astype(np.float64), want)
            if not same:
                fail(f"{path}: '{name}' is {got.tolist()}, expected {want.tolist()}")


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    tool, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    subprocess.run([tool, "save", work], check=True)

    check_tensors(os.path.join(work, "model.safetensors"), list(EXPECTED), METADATA)
    if os.path.exists(os.path.join(work, "refused.safetensors")):
        fail("a refused save left refused.safetensors behind")

    folder = os.path.join(work, "sharded")
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    if sorted(weight_map) != sorted(EXPECTED):
        fail(f"index names {sorted(weight_map)}, expected {sorted(EXPECTED)}")
    shards = sorted(set(weight_map.values()))
    if len(shards) < 2:
        fail(f"64-byte shards gave {shards}, expected several files")
    for shard in shards:
        names = [n for n, s in weight_map.items() if s == shard]
        check_tensors(os.path.join(folder, shard), names, None)

    subprocess.run([tool, "load", work], check=True)
    print(f"check_safetensors: {len(EXPECTED)} tensors and metadata read by safetensors "
          f"{__import__('safetensors').__version__}; sharded into {len(shards)} files; "
          "loaded back through the C ABI")


if __name__ == "__main__":
    main()

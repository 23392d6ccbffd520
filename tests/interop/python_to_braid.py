"""The Python safetensors package writes, braid reads (docs/files.md, "Interop").

1. safetensors.numpy.save_file writes the sample set (all dtypes numpy and ml_dtypes bf16
   cover) with metadata; safetensors.serialize_file writes the fp8 tensors. braid's dump
   must give each tensor's name, dtype, shape and exact bytes, and the metadata.
2. A sharded folder written from Python (save_file per shard by the split rule, the index
   as transformers writes it) must load in braid with every tensor.
3. Broken files made from valid ones (truncated, a duplicate name, an index naming a
   missing shard) must make braid fail with "corrupt data", not crash.

usage: python_to_braid.py <braid_interop_tool> <work folder>
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

np, ml_dtypes, safetensors = ic.require(
    ["numpy", "ml_dtypes", "safetensors"], "pip install numpy ml_dtypes safetensors")
from safetensors.numpy import save_file  # noqa: E402

FP8_TYPE_NAMES = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def serialize_fp8(arrays, path, metadata):
    """Writes fp8 arrays through the package's low-level writer (its numpy API has no fp8)."""
    try:
        from safetensors import TensorSpec  # safetensors >= 0.7
        specs = {name: TensorSpec(dtype=FP8_TYPE_NAMES[st], shape=list(arr.shape),
                                  data_ptr=arr.ctypes.data, data_len=arr.nbytes)
                 for name, st, arr in arrays}
    except ImportError:
        specs = {name: {"dtype": FP8_TYPE_NAMES[st], "shape": list(arr.shape),
                        "data": arr.tobytes()} for name, st, arr in arrays}
    safetensors.serialize_file(specs, path, metadata=metadata)


def check_dump(dumped, expected, what):
    got = {t["name"]: t for t in dumped["tensors"]}
    if len(got) != len(dumped["tensors"]) or set(got) != {n for n, _, _ in expected}:
        ic.fail(f"{what}: braid read {[t['name'] for t in dumped['tensors']]}, "
                f"expected {[n for n, _, _ in expected]}")
    for name, st, arr in expected:
        t = got[name]
        want = {"dtype": st, "shape": list(arr.shape), "hex": np.ascontiguousarray(arr).tobytes().hex()}
        have = {k: t[k] for k in want}
        if have != want:
            ic.fail(f"{what}: tensor '{name}': braid read {have}, expected {want}")


def expect_corrupt(tool, path, needle):
    proc = ic.run_tool(tool, "dump", path, expect_ok=False)
    if proc.returncode != 2 or "corrupt data" not in proc.stderr or needle not in proc.stderr:
        ic.fail(f"braid on broken {path}: exit {proc.returncode}, stderr {proc.stderr!r}; "
                f"expected exit 2 and 'corrupt data' ... '{needle}'")


def main():
    tool, work = sys.argv[1], ic.fresh_dir(sys.argv[2])
    samples = ic.sample_arrays()
    plain = [s for s in samples if not s[1].startswith("F8")]
    fp8 = [s for s in samples if s[1].startswith("F8")]

    path = os.path.join(work, "numpy.safetensors")
    save_file({name: arr for name, _, arr in plain}, path, metadata=ic.METADATA)
    dumped = ic.dump(tool, path)
    if dumped["metadata"] != ic.METADATA:
        ic.fail(f"{path}: braid read metadata {dumped['metadata']}, expected {ic.METADATA}")
    check_dump(dumped, plain, path)

    fp8_path = os.path.join(work, "fp8.safetensors")
    serialize_fp8(fp8, fp8_path, {"format": "np"})
    check_dump(ic.dump(tool, fp8_path), fp8, fp8_path)
    print(f"safetensors {safetensors.__version__} files: {len(plain) + len(fp8)} tensors read "
          "exactly by braid")

    folder = ic.fresh_dir(os.path.join(work, "sharded"))
    plan = ic.split_rule([arr.nbytes for _, _, arr in plain], ic.SHARD_LIMIT)
    weight_map = {}
    for s, shard in enumerate(plan):
        name = ic.shard_name(s, len(plan))
        save_file({plain[i][0]: plain[i][2] for i in shard}, os.path.join(folder, name),
                  metadata={"format": "np"})
        weight_map.update({plain[i][0]: name for i in shard})
    index = {"metadata": {"total_size": sum(arr.nbytes for _, _, arr in plain)},
             "weight_map": weight_map}
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path, "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    check_dump(ic.dump(tool, folder), plain, folder)
    print(f"sharded folder of {len(plan)} shards read by braid")

    # Broken files.
    with open(path, "rb") as f:
        good = f.read()
    truncated = os.path.join(work, "truncated.safetensors")
    with open(truncated, "wb") as f:
        f.write(good[:-1])
    expect_corrupt(tool, truncated, "truncated.safetensors")

    header = (b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
              b'"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
    duplicate = os.path.join(work, "duplicate.safetensors")
    with open(duplicate, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(8))
    expect_corrupt(tool, duplicate, "duplicate key 'w'")

    missing = sorted(set(weight_map.values()))[-1]
    os.remove(os.path.join(folder, missing))
    expect_corrupt(tool, folder, missing)
    print("broken files rejected as corrupt data")
    print("PASS")


if __name__ == "__main__":
    main()

"""braid writes, the Python safetensors package reads (docs/files.md, "Interop").

1. braid_interop_tool writes the sample set (every dtype) with metadata to one file;
   safetensors.safe_open (numpy) must open it and return each tensor's values. For dtypes
   safetensors' numpy backend cannot return (fp8) the header and bytes are read by hand
   and the values checked with ml_dtypes.
2. braid writes the same set sharded; the index must match the split rule written again
   in Python, hold total_size, and every shard must open in safetensors.

usage: braid_to_python.py <braid_interop_tool> <work folder>
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

np, ml_dtypes, safetensors = ic.require(
    ["numpy", "ml_dtypes", "safetensors"], "pip install numpy ml_dtypes safetensors")
from safetensors import safe_open  # noqa: E402


def check_file(path, expected, metadata):
    """Every expected (name, st, array) is in `path` with the right values and dtype."""
    header, _ = ic.read_raw(path)
    via_package, by_hand = [], []
    with safe_open(path, framework="np") as f:
        if f.metadata() != metadata:
            ic.fail(f"{path}: metadata {f.metadata()}, expected {metadata}")
        if set(f.keys()) != {name for name, _, _ in expected}:
            ic.fail(f"{path}: tensors {sorted(f.keys())}, expected {[n for n, _, _ in expected]}")
        for name, st, arr in expected:
            if header[name]["dtype"] != st:
                ic.fail(f"{path}: tensor '{name}' has dtype {header[name]['dtype']}, expected {st}")
            try:
                got = f.get_tensor(name)
                via_package.append(name)
            except (AttributeError, TypeError, KeyError) as e:
                if not st.startswith("F8"):
                    ic.fail(f"{path}: safetensors could not read {st} tensor '{name}': {e}")
                got = ic.raw_array(path, name)
                by_hand.append(name)
            ic.same_array(got, arr, f"{path}: tensor '{name}'")
    return via_package, by_hand


def main():
    tool, work = sys.argv[1], ic.fresh_dir(sys.argv[2])
    expected = ic.sample_arrays()

    single = os.path.join(work, "braid.safetensors")
    ic.run_tool(tool, "write", single)
    package, by_hand = check_file(single, expected, ic.METADATA)
    print(f"single file: {len(package)} tensors read by safetensors {safetensors.__version__}, "
          f"{len(by_hand)} ({', '.join(by_hand)}) by hand with ml_dtypes")

    folder = os.path.join(work, "sharded")
    ic.run_tool(tool, "write-sharded", folder, str(ic.SHARD_LIMIT))
    sizes = [arr.nbytes for _, _, arr in expected]
    plan = ic.split_rule(sizes, ic.SHARD_LIMIT)
    want_map = {expected[i][0]: ic.shard_name(s, len(plan)) for s, shard in enumerate(plan)
                for i in shard}
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path, encoding="utf-8") as f:
        text = f.read()
    index = json.loads(text)
    if index["weight_map"] != want_map:
        ic.fail(f"weight_map {index['weight_map']}\nexpected (split rule) {want_map}")
    if index["metadata"] != {"total_size": sum(sizes)}:
        ic.fail(f"index metadata {index['metadata']}, expected total_size {sum(sizes)}")
    if text != json.dumps(index, indent=2, sort_keys=True, ensure_ascii=False) + "\n":
        ic.fail("index text is not json.dumps(indent=2, sort_keys=True) + newline")
    files = sorted(os.listdir(folder))
    if files != sorted(set(want_map.values()) | {"model.safetensors.index.json"}):
        ic.fail(f"sharded folder holds {files}")
    for s, shard in enumerate(plan):
        check_file(os.path.join(folder, ic.shard_name(s, len(plan))),
                   [expected[i] for i in shard], ic.METADATA)
    print(f"sharded: {len(plan)} shards of at most {ic.SHARD_LIMIT} bytes match the split rule")
    print("PASS")


if __name__ == "__main__":
    main()

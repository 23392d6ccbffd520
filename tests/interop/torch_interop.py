"""PyTorch and braid exchange safetensors files (docs/files.md, "Interop").

1. torch writes (safetensors.torch.save_file: bf16, f16, f32, f64, i64, i32, i16, i8,
   u8, bool, a 0-d tensor, a transposed-then-contiguous one) with metadata; braid's dump
   must give the exact bytes torch holds.
2. braid writes its sample set; torch (safe_open framework="pt") must return each tensor
   with the values expected. fp8 is checked only where torch has float8 types
   (torch >= 2.1); the numpy test covers it everywhere.

Runs under the interpreter that has torch (Debian's python3-torch for /usr/bin/python3).
usage: torch_interop.py <braid_interop_tool> <work folder>
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch, safetensors = ic.require(
    ["torch", "safetensors"],
    "apt-get install python3-torch; python3 -m pip install --break-system-packages safetensors")
ic.require(["safetensors.torch"], "python3 -m pip install safetensors (with torch installed)")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

ST_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
            torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
            torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
TORCH_TYPES = {v: k for k, v in ST_NAMES.items()}
for st, attr in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
    if hasattr(torch, attr):
        TORCH_TYPES[st] = getattr(torch, attr)


def torch_bytes(t):
    """The C-order bytes of a tensor; 2-byte floats through int16 since numpy has no bf16."""
    flat = t.detach().contiguous().reshape(-1)
    if t.dtype in (torch.bfloat16, torch.float16):
        flat = flat.view(torch.int16)
    elif t.dtype not in (torch.float64, torch.float32, torch.int64, torch.int32, torch.int16,
                         torch.int8, torch.uint8, torch.bool):
        flat = flat.view(torch.uint8)
    return flat.numpy().tobytes()


def torch_to_braid(tool, work):
    vals = torch.arange(-12, 12, dtype=torch.float64) / 3  # thirds: rounding in every type
    tensors = {
        "bf16": vals.to(torch.bfloat16).reshape(4, 6),
        "f16": vals.to(torch.float16),
        "f32": vals.to(torch.float32).reshape(2, 3, 4),
        "f64": vals,
        "i64": torch.tensor([-2**63, 2**63 - 1, 0, -1]),
        "i32": torch.tensor([-2**31, 2**31 - 1, 5], dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5, dtype=torch.bfloat16),
        "transposed": vals.to(torch.float32).reshape(4, 6).t().contiguous(),
        "special": torch.tensor([math.inf, -math.inf, -0.0, 2.0**-24], dtype=torch.float16),
    }
    path = os.path.join(work, "torch.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    dumped = ic.dump(tool, path)
    if dumped["metadata"] != {"format": "pt"}:
        ic.fail(f"braid read metadata {dumped['metadata']} from {path}")
    got = {t["name"]: t for t in dumped["tensors"]}
    if set(got) != set(tensors):
        ic.fail(f"braid read {sorted(got)}, torch wrote {sorted(tensors)}")
    for name, t in tensors.items():
        want = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "hex": torch_bytes(t).hex()}
        have = {k: got[name][k] for k in want}
        if have != want:
            ic.fail(f"tensor '{name}' written by torch: braid read {have}, expected {want}")
    print(f"torch {torch.__version__} -> braid: {len(tensors)} tensors exact")


def braid_to_torch(tool, work):
    path = os.path.join(work, "braid.safetensors")
    ic.run_tool(tool, "write", path)
    checked, skipped = [], []
    with safe_open(path, framework="pt") as f:
        if f.metadata() != ic.METADATA:
            ic.fail(f"torch read metadata {f.metadata()}, expected {ic.METADATA}")
        for name, st, shape, values in ic.sample_spec():
            if st not in TORCH_TYPES:
                skipped.append(name)
                continue
            got = f.get_tensor(name)
            want = torch.tensor(values, dtype=torch.float64 if st in ic.FLOAT_NAMES else None)
            want = want.to(TORCH_TYPES[st]).reshape(shape)
            if got.dtype != want.dtype or list(got.shape) != list(want.shape):
                ic.fail(f"tensor '{name}': torch got {got.dtype} {list(got.shape)}, "
                        f"expected {want.dtype} {list(want.shape)}")
            if st in ic.FLOAT_NAMES:
                nan_got, nan_want = torch.isnan(got.double()), torch.isnan(want.double())
                if not torch.equal(nan_got, nan_want):
                    ic.fail(f"tensor '{name}': NaN positions differ")
                got, want = got[~nan_got], want[~nan_want]
            if torch_bytes(got) != torch_bytes(want):
                ic.fail(f"tensor '{name}': torch read {got.tolist()}, expected {want.tolist()}")
            checked.append(name)
    note = f"; skipped {skipped}: torch {torch.__version__} has no such dtype" if skipped else ""
    print(f"braid -> torch: {len(checked)} tensors exact{note}")


def main():
    tool, work = sys.argv[1], ic.fresh_dir(sys.argv[2])
    torch_to_braid(tool, work)
    braid_to_torch(tool, work)
    print("PASS")


if __name__ == "__main__":
    main()

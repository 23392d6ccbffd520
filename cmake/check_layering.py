#!/usr/bin/env python3
"""Fails when a braid source includes a layer above its own (docs/layout.md).

Layers, bottom to top: core < kernels < tensor < comm < amp < nn < shard < accel, and
apps, examples and bindings on top (side by side: none of them includes another). A file
under <folder>/ may include "braid/<other>/..." only when <other> is its own folder or
sits below it. Run by the build (target braid_check_layering) and by ctest.

The compute seam (docs/kernels.md, "Kernel tables"): above tensor/, code reaches kernels
through braid/kernels/table.h only. Including a device's own kernel header
(braid/kernels/cpu.h, braid/kernels/cuda.h, braid/kernels/cpu_quant.h) is allowed in kernels/
and tensor/ alone.

Any model (docs/parallelism.md, "Any model"): shard/ and accel/ reach models through
braid/nn/causal_lm.h (nn::CausalLM and its ParallelPlan). Their library code (src/ and
include/) may not include a model family's header (braid/nn/gpt.h, braid/nn/llama.h); their
tests may, to use a family as a fixture.

Usage: check_layering.py [ROOT]   (ROOT defaults to the repository this file lives in)
Exit status: 0 clean, 1 violations found (each printed as file:line: message).
"""

import pathlib
import re
import sys

LAYERS = ["core", "kernels", "tensor", "comm", "amp", "nn", "shard", "accel"]
TOP = ["apps", "examples", "bindings"]
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK.update({name: len(LAYERS) for name in TOP})

SUFFIXES = {".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".hip", ".inc", ".in"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]braid/([A-Za-z0-9_]+)/')
DEVICE_KERNELS = re.compile(r'^\s*#\s*include\s*[<"](braid/kernels/(?:cpu|cuda|cpu_quant)\.h)[>"]')
DEVICE_KERNELS_ALLOWED = {"kernels", "tensor"}
MODEL_HEADER = re.compile(r'^\s*#\s*include\s*[<"](braid/nn/(?:gpt|llama)\.h)[>"]')
MODEL_FREE = {"shard", "accel"}


def allowed(own: str, included: str) -> bool:
    if included not in RANK or included == own:
        return True
    if own in TOP and included in TOP:
        return False  # top-level folders are siblings, not layers
    return RANK[included] < RANK[own]


def check_file(path: pathlib.Path, own: str, root: pathlib.Path) -> list[str]:
    errors = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return [f"{path}: cannot read: {e}"]
    for lineno, line in enumerate(text.splitlines(), 1):
        m = INCLUDE.match(line)
        if m and not allowed(own, m.group(1)):
            rel = path.relative_to(root)
            errors.append(
                f"{rel}:{lineno}: layer '{own}' includes braid/{m.group(1)}/, which is not below it "
                f"(order: {' < '.join(LAYERS)} < {{{', '.join(TOP)}}})")
        d = DEVICE_KERNELS.match(line)
        if d and own not in DEVICE_KERNELS_ALLOWED:
            rel = path.relative_to(root)
            errors.append(
                f"{rel}:{lineno}: layer '{own}' includes {d.group(1)}; above tensor/ kernels are "
                f"reached through braid/kernels/table.h (kernels_for(device))")
        mh = MODEL_HEADER.match(line)
        rel_parts = path.relative_to(root).parts
        if mh and own in MODEL_FREE and len(rel_parts) > 1 and rel_parts[1] in ("src", "include"):
            rel = path.relative_to(root)
            errors.append(
                f"{rel}:{lineno}: layer '{own}' includes the model header {mh.group(1)}; shard/ and "
                f"accel/ reach models through braid/nn/causal_lm.h (nn::CausalLM)")
    return errors


def check_tree(root: pathlib.Path) -> list[str]:
    errors = []
    for folder in RANK:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                errors.extend(check_file(path, folder, root))
    return errors


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1]) if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
    if not root.is_dir():
        print(f"check_layering: root '{root}' is not a directory", file=sys.stderr)
        return 2
    errors = check_tree(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layering: {len(errors)} layering violation(s) under {root}", file=sys.stderr)
        return 1
    print(f"check_layering: OK ({root})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

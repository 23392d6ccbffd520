#!/usr/bin/env python3
"""Fails when an object file compiled for one SIMD level exports a symbol another file could
also define (a template instantiation, an inline function, a static member).

Why: the linker keeps ONE copy of such weak/COMDAT symbols. If kernels/src/cpu/foo_avx512.cc
and a baseline file both instantiate std::vector<float>::resize, the linker may keep the
AVX-512 copy and the baseline path then crashes with SIGILL on a CPU without AVX-512. Every
symbol a *_avx2 / *_avx512 / *_avx512bf16 object exports must therefore carry its level in
its name (namespace braid::kernels::cpu::avx512::, braid_eigen_avx512::, ...).

Usage: check_isa_symbols.py NM OBJECT...   (objects not named *_avx* are ignored)
"""
import re
import subprocess
import sys

ALLOWED = {"DW.ref.__gxx_personality_v0"}


def level_of(path):
    m = re.search(r"_(avx512bf16|avx512|avx2)\.cc\.o(bj)?$", path)
    return m.group(1) if m else None


def main():
    nm, objects = sys.argv[1], sys.argv[2:]
    bad = []
    checked = 0
    for obj in objects:
        level = level_of(obj)
        if not level:
            continue
        checked += 1
        out = subprocess.run([nm, "-C", "--defined-only", "--extern-only", obj],
                             check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) < 3:
                continue
            symbol = parts[2]
            if symbol in ALLOWED:
                continue
            if symbol.startswith("__odr_asan."):
                # AddressSanitizer's ODR indicator of a global (not a weak symbol): nm cannot
                # demangle it, so look for the level as a namespace component of the mangled
                # name that follows ("6avx512" in _ZN5braid7kernels3cpu6avx512...).
                mangled = symbol[len("__odr_asan."):]
                if re.search(r"(?<![0-9])" + str(len(level)) + level + r"(?=[0-9A-Z])", mangled):
                    continue
            tag = re.search(r"(::|_)" + level + r"(::|$)", symbol) or \
                re.search(r"\b" + level + "::", symbol) or ("_" + level + "::") in symbol
            if not tag:
                bad.append(f"{obj}: {symbol}")
    if checked == 0:
        print("check_isa_symbols: no *_avx* objects given", file=sys.stderr)
        return 1
    if bad:
        print("symbols exported by SIMD-level objects without their level in the name "
              "(make them internal: anonymous namespace / static, or rename):", file=sys.stderr)
        for b in bad[:50]:
            print("  " + b, file=sys.stderr)
        return 1
    print(f"check_isa_symbols: {checked} objects clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The quantized Linear rows of bench/quant_bench.cc at the amx level (the fused 4-bit GEMM on AMX
# tiles for bf16 inputs of >= 32 rows, Note [gemm_4bit on AMX]) and, right after, with AMX off
# (BRAID_CPU_ISA=avx512bf16): one thread, GPT-2's mlp.c_fc (768 -> 3072), median of 9.
# Usage: bench/results/2026-12-06-quant-amx/run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
"$build/bin/braid_bench_quant" 9 >"$out/amx.txt" 2>&1
BRAID_CPU_ISA=avx512bf16 "$build/bin/braid_bench_quant" 9 >"$out/avx512bf16.txt" 2>&1
# After the bf16 few-rows GEMM (bf16gemm_rows): the amx level again, and the avx512 level (no
# vdpbf16ps: the widened path) for the bf16 GEMM rows.
"$build/bin/braid_bench_quant" 9 >"$out/amx-rows.txt" 2>&1
BRAID_CPU_ISA=avx512 "$build/bin/braid_bench_quant" 9 >"$out/avx512-rows.txt" 2>&1

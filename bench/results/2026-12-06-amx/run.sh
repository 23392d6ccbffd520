#!/usr/bin/env bash
# Issue 35 item 3 (bf16 training against PyTorch) after the AMX bf16 GEMM, in one sitting:
#   1. the bf16 GEMM, one thread, 1024^3: amx level, avx512bf16 level (vdpbf16ps), f32 and
#      OpenBLAS sgemm beside them (braid_bench_kernels; FLOP/s from CPU time);
#   2. the tiny GPT, 1 process x 2 threads, braid vs PyTorch (bench/run_gpt.sh), and once
#      with BRAID_CPU_ISA=avx512bf16 (braid without AMX) against the same PyTorch;
#   3. GPT-2 small (124M) at T 256, batch 4, 1 process x 2 threads (BRAID_GPT_MODEL=gpt2);
#   4. GPT-2 small, 2 ranks x 1 thread: braid DDP (ZeRO-0) and ZeRO-3 against PyTorch DDP over
#      gloo, bf16 (bench/run_zero.sh).
# Usage: bench/results/2026-12-06-amx/run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
mkdir -p "$out"
{
  grep -m1 "model name" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  git rev-parse --short HEAD 2>/dev/null || true
} >"$out/machine.txt"
k="$build/bench/braid_bench_kernels"
BRAID_NUM_THREADS=1 "$k" --benchmark_min_time=1 \
  --benchmark_filter='gemm_bf16_braid/1024|sgemm_braid/1024|sgemm_openblas/1024' >"$out/gemm_amx.txt" 2>&1
BRAID_CPU_ISA=avx512bf16 BRAID_NUM_THREADS=1 "$k" --benchmark_min_time=1 \
  --benchmark_filter='gemm_bf16_braid/1024' >"$out/gemm_avx512bf16.txt" 2>&1
bash bench/run_gpt.sh "$build" 2 5 3 >"$out/tiny_gpt.txt" 2>&1
BRAID_CPU_ISA=avx512bf16 bash bench/run_gpt.sh "$build" 2 5 1 >"$out/tiny_gpt_avx512bf16.txt" 2>&1
BRAID_GPT_MODEL=gpt2 bash bench/run_gpt.sh "$build" 2 3 2 >"$out/gpt2_small.txt" 2>&1
BRAID_GPT_MODEL=gpt2 BRAID_ZERO_STAGES="0 3" BRAID_ZERO_DTYPES="bf16" BRAID_ZERO_OVERLAP=off \
  bash bench/run_zero.sh "$build" 3 1 >"$out/gpt2_small_ddp.txt" 2>&1
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"

#!/usr/bin/env bash
# Issue 35 item 3 after the bf16 attention on AMX tiles, in one sitting:
#   1. the machine's state before (one thread: memcpy 64 KiB, bf16 GEMM 1024^3), to tell the
#      slow state of the VM apart (docs/bench.md, "The machine probe");
#   2. one tiny GPT layer's attention, forward + backward, one thread: amx level (tiles) and
#      avx512bf16 level (f32 fma chains), three times each, alternating;
#   3. the tiny GPT, 1 process x 2 threads, braid vs PyTorch (bench/run_gpt.sh, 5 rounds);
#   4. GPT-2 small (124M) at T 256, batch 4, 1 process x 2 threads (2 rounds);
#   5. the machine's state after.
# Usage: bench/results/2026-12-06-attn/run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
mkdir -p "$out"
k="$build/bench/braid_bench_kernels"
probe() {
  echo "# $1: load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  BRAID_NUM_THREADS=1 "$k" --benchmark_filter='memcpy/16384$|gemm_bf16_braid/1024' 2>&1 |
    grep -E '^(memcpy|gemm)'
}
{
  grep -m1 "model name" /proc/cpuinfo
  echo "nproc $(nproc)"
  git rev-parse --short HEAD 2>/dev/null || true
  probe before
} >"$out/machine.txt"
for r in 1 2 3; do
  for isa in amx avx512bf16; do
    echo -n "$isa "
    BRAID_CPU_ISA=$isa BRAID_NUM_THREADS=1 "$k" --benchmark_filter='attention' 2>&1 | grep attention_bf16_tiny
  done
done >"$out/attention.txt"
bash bench/run_gpt.sh "$build" 2 5 5 >"$out/tiny_gpt.txt" 2>&1
BRAID_GPT_MODEL=gpt2 bash bench/run_gpt.sh "$build" 2 3 2 >"$out/gpt2_small.txt" 2>&1
probe after >>"$out/machine.txt"

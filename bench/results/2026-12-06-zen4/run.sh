#!/usr/bin/env bash
# Issue 35's tables on an AMD EPYC (Zen 4) 2-vCPU KVM guest, the machine kind the issue's
# figures came from (Zen 5 there), in one sitting: braid / the limit program / OpenMPI for the
# shm collectives, and braid / PyTorch for the training steps.
#   1. the machine's state before (one thread: memcpy 64 KiB, bf16 GEMM 1024^3);
#   2. 2 ranks, small messages (16 B - 4 KiB), every op, braid interleaved with OpenMPI and the
#      limit program (broadcast first: the first op of a job is slowed at its smallest sizes
#      for every library, docs/performance.md "Small messages");
#   3. 2 ranks, 16 B - 64 MiB; 4 ranks, 16 B - 16 MiB; 8 ranks, 16 B - 4 MiB (same peers);
#   4. the tiny GPT, 1 process x 2 threads, against PyTorch (bench/run_gpt.sh, 5 rounds);
#   5. GPT-2 small (124M) at T 256, batch 4, 1 process x 2 threads (2 rounds), and 2 ranks x 1
#      thread, braid DDP (ZeRO-0) and ZeRO-3 against torch DDP over gloo (bench/run_zero.sh);
#   6. the machine's state after.
# Usage: bench/results/2026-12-06-zen4/run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
mkdir -p "$out"
k="$build/bench/braid_bench_kernels"
braid="$build/bin/braid"
probe() {
  echo "# $1: load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  BRAID_NUM_THREADS=1 "$k" --benchmark_filter='memcpy/16384$|gemm_bf16_braid/1024' 2>&1 |
    grep -E '^(memcpy|gemm)'
}
{
  grep -m1 "model name" /proc/cpuinfo
  lscpu | grep -E "^(CPU family|Model|Flags)" | cut -c1-60
  echo "nproc $(nproc)"
  git rev-parse --short HEAD 2>/dev/null || true
  probe before
} >"$out/machine.txt"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op broadcast --op all_reduce --op reduce_scatter --op all_gather)
peers=(--peer mpi --peer limit)
"${mpi[@]}" -np 2 "$braid" bench -b 16 -e 4K -f 4 -n 200 --repeats 5 -c 1 "${ops[@]}" "${peers[@]}" \
  >"$out/np2-small.txt" 2>&1
"${mpi[@]}" -np 2 "$braid" bench -b 16 -e 64M -f 4 -n 20 --repeats 5 -c 1 "${ops[@]}" "${peers[@]}" \
  >"$out/np2.txt" 2>&1
"${mpi[@]}" -np 4 "$braid" bench -b 16 -e 16M -f 4 -n 50 --repeats 3 -c 1 "${ops[@]}" "${peers[@]}" \
  >"$out/np4.txt" 2>&1
"${mpi[@]}" -np 8 "$braid" bench -b 16 -e 4M -f 16 -n 10 --repeats 3 "${ops[@]}" "${peers[@]}" \
  >"$out/np8.txt" 2>&1
bash bench/run_gpt.sh "$build" 2 5 5 >"$out/tiny_gpt.txt" 2>&1
BRAID_GPT_MODEL=gpt2 bash bench/run_gpt.sh "$build" 2 3 2 >"$out/gpt2_small.txt" 2>&1
BRAID_GPT_MODEL=gpt2 BRAID_ZERO_STAGES="0 3" BRAID_ZERO_DTYPES=bf16 BRAID_ZERO_OVERLAP=off \
  bash bench/run_zero.sh "$build" 3 1 >"$out/gpt2_small_ddp.txt" 2>&1 || true
probe after >>"$out/machine.txt"

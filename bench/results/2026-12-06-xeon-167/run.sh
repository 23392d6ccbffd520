#!/usr/bin/env bash
# Issue 35's tables on one machine from single runs (docs/performance.md, "Issue 35 on a Xeon
# with AMX: braid / limit / OpenMPI / PyTorch from single runs"; family 6 model 167): braid / limit program / OpenMPI for the four collectives at
# 2 and 4 ranks, and the bf16 training steps against PyTorch (tiny GPT, GPT-2 small in one
# process, GPT-2 small with 2 ranks against torch DDP over gloo).
# Usage: run.sh [out dir (this folder)] [build dir (build)]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
build=${2:-build}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ops=(--op all_reduce --op all_gather --op reduce_scatter --op broadcast)
{
  grep -m1 "model name" /proc/cpuinfo
  grep -m1 "^model\s" /proc/cpuinfo
  echo "nproc $(nproc); load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)"
  git rev-parse --short HEAD 2>/dev/null || true
} >"$out/machine.txt"
"${mpi[@]}" -np 2 "$build/bin/braid" bench -b 16 -e 64M -f 4 -n 20 --repeats 5 -c 1 "${ops[@]}" \
  --peer mpi --peer limit -J "$out/w2.json" >"$out/w2.txt" 2>&1
"${mpi[@]}" -np 4 "$build/bin/braid" bench -b 16 -e 16M -f 16 -n 10 --repeats 3 -c 1 "${ops[@]}" \
  --peer mpi --peer limit -J "$out/w4.json" >"$out/w4.txt" 2>&1
bash bench/run_gpt.sh "$build" 2 5 3 >"$out/tiny_gpt.txt" 2>&1
BRAID_GPT_MODEL=gpt2 bash bench/run_gpt.sh "$build" 2 3 2 >"$out/gpt2_small.txt" 2>&1
BRAID_GPT_MODEL=gpt2 BRAID_ZERO_STAGES="0 3" BRAID_ZERO_DTYPES="bf16" BRAID_ZERO_OVERLAP=off \
  bash bench/run_zero.sh "$build" 3 1 >"$out/gpt2_small_ddp.txt" 2>&1
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u)" >>"$out/machine.txt"

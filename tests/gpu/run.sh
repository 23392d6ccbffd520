#!/usr/bin/env bash
# Builds and runs braid's GPU checks on a machine with an NVIDIA GPU and nothing but its own
# image (no package installs): configures tests/gpu/ (core/ + kernels/ + bench/ only) for that
# GPU, builds the GPU test binaries and benchmark, runs the host tests of the CUDA code,
# `ctest -L gpu`, then bench/gpu_optim_bench. Full logs and summary.md (written last) go to OUT_DIR.
# Every step has a timeout (60 + 220 + 90 + 30 + 60 s: under 8 minutes in all).
#
#   tests/gpu/run.sh OUT_DIR
#
# Needs: cmake >= 3.25, ninja or make, a C++20 compiler, CUDA in /usr/local/cuda (or nvcc on
# PATH), Eigen 3.4 headers. GTest is needed for the tests; without it the benchmark still runs.
# Environment:
#   CMAKE_CUDA_ARCHITECTURES  GPU architectures to build for (default 90: H100 / H200)
#   BRAID_GPU_BUILD_DIR       build folder (default build-gpu/ in the repository)
#   BRAID_GPU_DEPS            extra CMAKE_PREFIX_PATH where Eigen3 / GTest were staged
#   BRAID_JOBS                parallel build jobs (default: the number of cores)
# Exit status:
#   0  everything ran and passed
#   1  a step failed or timed out (its log in OUT_DIR says why)
#   2  usage error
#   3  a prerequisite is missing (CUDA compiler, Eigen, GTest; GTest missing: the benchmark
#      still runs first)
#   4  built and the host tests passed, but no usable GPU: the GPU steps were skipped (what a
#      machine without a GPU gives)
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BRAID_GPU_BUILD_DIR:-$root/build-gpu}
arch=${CMAKE_CUDA_ARCHITECTURES:-90}
jobs=${BRAID_JOBS:-$(nproc)}
t_start=$(date +%s)

summary_rows=()
status=0
missing=()

# run_step NAME TIMEOUT_S LOG CMD...: runs CMD with a timeout, output to OUT_DIR/LOG; records
# the result for summary.md. Returns CMD's status (124 on timeout).
run_step() {
  local name=$1 limit=$2 logname=$3 log=$out/$3
  shift 3
  local t0 rc=0
  t0=$(date +%s)
  echo "==== $name (timeout ${limit}s, log $log)"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  local dt=$(($(date +%s) - t0)) result=ok
  if ((rc == 124 || rc == 137)); then
    result="timed out after ${limit}s"
  elif ((rc != 0)); then
    result="failed (exit $rc)"
  fi
  echo "==== $name: $result in ${dt}s"
  summary_rows+=("| $name | $result | ${dt}s | $logname |")
  return "$rc"
}

skip_step() {
  echo "==== $1: skipped ($2)"
  summary_rows+=("| $1 | skipped: $2 | - | - |")
}

# shellcheck disable=SC2317 # run from the EXIT trap
write_summary() {
  {
    echo "# braid GPU run"
    echo
    echo "- commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
      git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname)"
    echo "- CMAKE_CUDA_ARCHITECTURES: $arch; build folder: $build"
    if [[ -f $out/gpu.txt ]]; then echo "- $(head -1 "$out/gpu.txt")"; fi
    if ((${#missing[@]})); then echo "- missing: ${missing[*]}"; fi
    echo "- total: $(($(date +%s) - t_start))s; exit status $status"
    echo
    echo "| step | result | time | log |"
    echo "|---|---|---|---|"
    printf '%s\n' "${summary_rows[@]}"
    if [[ -f $out/ctest_gpu.log ]]; then
      echo
      echo "## ctest -L gpu"
      echo
      echo '```'
      grep -E 'tests passed|tests failed|Total Test time|\(Failed\)|\(Timeout\)|\(Skipped\)' \
        "$out/ctest_gpu.log" | head -40 || true
      echo '```'
    fi
    if [[ -f $out/bench.log ]]; then
      echo
      echo "## bench/gpu_optim_bench"
      echo
      grep -E '^\||^device|^GB/s' "$out/bench.log" || true
    fi
  } >"$out/summary.md"
  echo "summary: $out/summary.md"
}
trap 'status=$?; write_summary' EXIT

# ---- prerequisites ---------------------------------------------------------------------------

{
  echo "uname: $(uname -a)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo missing)"
  echo "ninja: $(ninja --version 2>/dev/null || echo missing)"
  echo "c++: $(c++ --version 2>/dev/null | head -1 || echo missing)"
  echo "nvcc: $({ nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null; } | tail -2 | head -1 || echo missing)"
  echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo unavailable)"
  ls -d /usr/include/eigen3 /usr/include/nlohmann /usr/include/gtest 2>&1 || true
} >"$out/env.log"

have_header() {  # have_header DIR: under /usr/include, /usr/local/include or BRAID_GPU_DEPS
  local d
  for d in /usr/include /usr/local/include ${BRAID_GPU_DEPS:+"$BRAID_GPU_DEPS/include"}; do
    [[ -e $d/$1 ]] && return 0
  done
  return 1
}
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  missing+=("nvcc (CUDA in /usr/local/cuda)")
fi
if ! have_header eigen3/Eigen/Core; then
  missing+=("Eigen 3.4 headers (eigen3/Eigen/Core)")
fi
if ((${#missing[@]})); then
  echo "tests/gpu/run.sh: missing ${missing[*]}; nothing can be built" >&2
  status=3
  exit 3
fi
build_tests=ON
if ! have_header gtest/gtest.h; then
  echo "tests/gpu/run.sh: GTest is missing (no gtest/gtest.h under /usr/include," \
    "/usr/local/include or BRAID_GPU_DEPS): the GPU tests cannot be built; the benchmark still" \
    "runs, and the script exits with 3" >&2
  missing+=("GTest (gtest/gtest.h)")
  build_tests=OFF
fi

# ---- configure and build -----------------------------------------------------------------------

gen=()
if [[ ! -f $build/CMakeCache.txt ]]; then
  if command -v ninja >/dev/null; then gen=(-G Ninja); else gen=(-G "Unix Makefiles"); fi
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
run_step "configure" 60 configure.log \
  cmake -S "$root/tests/gpu" -B "$build" "${gen[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBRAID_WITH_CUDA=ON -DBRAID_WITH_HIP=OFF -DBRAID_WITH_NCCL=OFF \
  -DBRAID_WITH_UCX=OFF -DBRAID_WITH_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DBRAID_BUILD_TESTS=$build_tests ${BRAID_GPU_DEPS:+"-DCMAKE_PREFIX_PATH=$BRAID_GPU_DEPS"} ||
  { status=1; exit 1; }

targets=(braid_gpu_optim_bench)
[[ $build_tests == ON ]] && targets+=(braid_kernels_cuda_test braid_kernels_cuda_host_test)
run_step "build ${targets[*]}" 220 build.log \
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { status=1; exit 1; }
bench=$build/bin/braid_gpu_optim_bench

# ---- run ---------------------------------------------------------------------------------------

# The host tests run the CUDA code's shared arithmetic and argument checks: no GPU needed.
if [[ $build_tests == ON ]]; then
  run_step "host tests of the CUDA code" 30 ctest_host.log \
    "$build/kernels/braid_kernels_cuda_host_test" || status=1
else
  skip_step "host tests of the CUDA code" "GTest missing"
fi

probe_rc=0
"$bench" --probe >"$out/gpu.txt" 2>&1 || probe_rc=$?
cat "$out/gpu.txt"
if ((probe_rc != 0)); then
  reason=$(head -1 "$out/gpu.txt")
  skip_step "ctest -L gpu" "$reason"
  skip_step "bench/gpu_optim_bench" "$reason"
  ((status == 0)) && status=4
  ((${#missing[@]})) && status=3
  echo "tests/gpu/run.sh: built; no usable GPU here, so the GPU steps did not run (exit $status)"
  exit "$status"
fi

if [[ $build_tests == ON ]]; then
  # One process per test, each with its own CUDA context: run several at once.
  run_step "ctest -L gpu" 90 ctest_gpu.log \
    ctest --test-dir "$build" -L gpu -j "$((jobs < 8 ? jobs : 8))" --output-on-failure --timeout 80 \
    --output-junit "$out/ctest_gpu.xml" || status=1
else
  skip_step "ctest -L gpu" "GTest missing"
fi
run_step "bench/gpu_optim_bench" 60 bench.log "$bench" || status=1
cat "$out/bench.log"

((status == 0 && ${#missing[@]})) && status=3
exit "$status"

#!/usr/bin/env bash
# Everything CI checks (.ci/run runs exactly this), on Debian 12 as root:
#   1. installs the dependencies (scripts/install_deps.sh)
#   2. fails on unformatted C++ (scripts/format.sh --check)
#   3. builds build/ (Release, with benchmarks) and runs the whole ctest suite
#   4. builds build-asan/ with -DBRAID_SANITIZE=address,undefined and runs the suite again
#   5. builds the libFuzzer targets in build-fuzz/ (clang 15) and runs each for a short fixed
#      time over its seed corpus, failing on any crash (docs/fuzzing.md)
# Tests labelled "gpu" run only where a GPU is present. Prints each step's time.
#   BRAID_TEST_TIMEOUT  per-test timeout in seconds (default 600)
#   BRAID_SKIP_ASAN=1   skip step 4 (for a quick local run; CI never sets it)
#   BRAID_SKIP_FUZZ=1   skip step 5 (likewise)
#   BRAID_FUZZ_SECONDS  seconds each fuzz target runs in step 5 (default 10)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$BRAID_ROOT"

timeout=${BRAID_TEST_TIMEOUT:-600}
ctest_args=(--output-on-failure --timeout "$timeout" -j "$BRAID_JOBS")
if braid_have_gpu; then
  echo "GPU found: tests labelled 'gpu' run"
  gpu_filter=()
else
  echo "no GPU: tests labelled 'gpu' are left out"
  gpu_filter=(-LE gpu)
fi

step "install dependencies" bash scripts/install_deps.sh
step "format check" bash scripts/format.sh --check

step "configure build/ (Release)" braid_configure build -DCMAKE_BUILD_TYPE=Release \
  -DBRAID_BUILD_TESTS=ON -DBRAID_BUILD_BENCH=ON -DBRAID_BUILD_EXAMPLES=ON -DBRAID_SANITIZE=
step "build build/" braid_build build
step "ctest build/" ctest --test-dir build "${ctest_args[@]}" "${gpu_filter[@]}"

if [[ ${BRAID_SKIP_ASAN:-0} != 1 ]]; then
  # -O1: sanitized tests run several times faster than at -O0 and still report exact lines.
  # -g1: line tables and function names only, all a sanitizer report needs; full -g made
  # the statically linked test binaries about 300 MB each and build-asan/ 20 GB, which filled
  # the disk of a CI run (2026-12-06).
  # GPU components off: nvcc does not take -fsanitize, and sanitizers cover host code.
  step "configure build-asan/ (address,undefined)" braid_configure build-asan \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
    -DBRAID_SANITIZE=address,undefined -DBRAID_BUILD_TESTS=ON -DBRAID_BUILD_BENCH=OFF \
    -DBRAID_WITH_CUDA=OFF -DBRAID_WITH_HIP=OFF -DBRAID_WITH_NCCL=OFF
  step "build build-asan/" braid_build build-asan
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # The kill soak (label soak) runs in the Release pass only: docs/faults.md, "Kill soak".
  # So do the tests labelled large: minutes of GEMMs at a real model size in Release, several
  # times that at -O1 with the sanitizers (not measured), on code that smaller tests run here
  # (docs/layout.md, "Labels with a special meaning").
  step "ctest build-asan/" ctest --test-dir build-asan "${ctest_args[@]}" -LE "gpu|soak|large"
fi

if [[ ${BRAID_SKIP_FUZZ:-0} != 1 ]]; then
  # Only the fuzz targets are built (not the apps, tests or python module of that folder).
  step "configure build-fuzz/ (libFuzzer, clang 15)" braid_configure_fuzz build-fuzz
  step "build build-fuzz/ (fuzz targets)" cmake --build build-fuzz -j "$BRAID_JOBS" --target braid_fuzz
  fuzz_seconds=${BRAID_FUZZ_SECONDS:-10}
  step "fuzz: each target ${fuzz_seconds} s" bash tests/fuzz/run.sh build-fuzz \
    -max_total_time="$fuzz_seconds" -timeout=20 -rss_limit_mb=2048
fi

step_summary
echo "test.sh: all steps passed"

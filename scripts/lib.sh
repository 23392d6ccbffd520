# shellcheck shell=bash
# Shared helpers for scripts/*.sh (sourced, not run). Keeps the build settings of
# quickstart.sh and test.sh in one place.
#   BRAID_JOBS     parallel build/test jobs (default: the number of cores)
#   BRAID_GENERATOR CMake generator for new build folders (default: Ninja when installed)

BRAID_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BRAID_JOBS=${BRAID_JOBS:-$(nproc)}
_braid_t0=$(date +%s)
_braid_steps=()
_braid_current=""

# step <name> <command...>: runs one timed step; the summary prints every step's time.
step() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  echo
  echo "==== $name"
  _braid_current=$name
  "$@"
  _braid_current=""
  local dt=$(($(date +%s) - t0))
  _braid_steps+=("$(printf '%5ds  %s' "$dt" "$name")")
  echo "==== $name: done in ${dt}s"
}

step_summary() {
  trap - EXIT
  echo
  echo "==== timings"
  printf '%s\n' "${_braid_steps[@]}"
  printf '%5ds  total\n' "$(($(date +%s) - _braid_t0))"
}

# On a failure (set -e), still print the timings and name the step that failed.
_braid_on_exit() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    step_summary
    echo "FAILED (exit $rc) in step: ${_braid_current:-outside any step}" >&2
  fi
}
trap _braid_on_exit EXIT

# braid_configure <build-dir> [cmake args...]: configures (or reconfigures) a build folder.
# An existing folder keeps its generator; ccache is used when installed.
braid_configure() {
  local dir=$1
  shift
  local args=(-S "$BRAID_ROOT" -B "$dir")
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    local gen=${BRAID_GENERATOR:-}
    if [[ -z $gen ]] && command -v ninja >/dev/null; then gen=Ninja; fi
    [[ -n $gen ]] && args+=(-G "$gen")
  fi
  if command -v ccache >/dev/null; then
    # BASEDIR makes paths relative so clones in other folders (CI) share the cache.
    export CCACHE_BASEDIR=$BRAID_ROOT
    args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  cmake "${args[@]}" "$@"
}

# braid_configure_fuzz <build-dir> [cmake args...]: the libFuzzer build of tests/fuzz/
# (docs/fuzzing.md): clang 15, every library instrumented for libFuzzer, ASan and UBSan
# (cmake/BraidFuzz.cmake); GPU components and the UCX / MPI transports off, as no parser needs
# them; no tests, benchmarks or examples. Build it with --target braid_fuzz.
# -O1 -gline-tables-only: reports keep file:line, and the build takes about a third less CPU
# time than with -g (full debug info), which matters to CI's 2 cores.
braid_configure_fuzz() {
  local dir=$1
  shift
  braid_configure "$dir" -DCMAKE_C_COMPILER=clang-15 -DCMAKE_CXX_COMPILER=clang++-15 \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" -DBRAID_FUZZ=ON -DBRAID_SANITIZE= \
    -DBRAID_BUILD_TESTS=OFF -DBRAID_BUILD_BENCH=OFF -DBRAID_BUILD_EXAMPLES=OFF \
    -DBRAID_WITH_CUDA=OFF -DBRAID_WITH_HIP=OFF -DBRAID_WITH_NCCL=OFF \
    -DBRAID_WITH_UCX=OFF -DBRAID_WITH_MPI=OFF "$@"
}

braid_build() {
  cmake --build "$1" -j "$BRAID_JOBS"
}

# True when an NVIDIA or AMD GPU is usable here; tests labelled "gpu" run only then.
braid_have_gpu() {
  { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; } ||
    { command -v rocm-smi >/dev/null && rocm-smi --showid 2>/dev/null | grep -q GPU; }
}

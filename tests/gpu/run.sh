#!/usr/bin/env bash
# Proves braid's GPU work on the first NVIDIA GPU machine it meets, with nothing but that
# machine's image (no package installs): configures tests/gpu/ (core/, kernels/, tensor/,
# comm/ with NCCL, bench/'s GPU benchmarks) for that GPU, builds the benchmarks and the test
# binaries, and runs, each under a timeout:
#   1. the host tests of the CUDA code (ctest -L unit -LE gpu: the *_host_test binaries);
#   2. ctest -L gpu (kernels' cuda and table conformance tests, core's cuda runtime tests,
#      comm's nccl tests: single-rank, and two-rank where 2 GPUs are visible);
#   3. bench/gpu_optim_bench and bench/gpu_kernels_bench (GB/s against a device copy, GEMM
#      TFLOP/s against cuBLASLt);
#   4. the main job on the GPU: always skipped for now, with the reason.
# Everything (build included) runs inside one budget, 460 s by default, so the script ends
# within 8 minutes; summary.md is written last and printed at the end, its step table last.
#
#   tests/gpu/run.sh OUT_DIR
#
# On a bare GPU image, stage Eigen, nlohmann-json and the GoogleTest sources first on a
# machine that has them (tests/gpu/stage_deps.sh DIR), carry DIR along and set
# BRAID_GPU_DEPS=DIR (docs/gpu.md, "Running on a GPU").
# Needs: cmake >= 3.25, ninja or make, a C++20 compiler, CUDA (/usr/local/cuda or nvcc on
# PATH), Eigen 3.4 and nlohmann-json (installed or staged), GTest (installed, or its sources
# staged), NCCL (next to CUDA, in the system, or PyTorch's nvidia-nccl wheel).
# Environment:
#   BRAID_GPU_DEPS                 stage_deps.sh's folder: a CMAKE_PREFIX_PATH for Eigen3 and
#                                  nlohmann_json; its src/googletest is built when GTest is not
#                                  installed
#   BRAID_GPU_FORCE_STAGED_GTEST   1: build GTest from BRAID_GPU_DEPS even where it is installed
#   BRAID_GPU_BUDGET_S             the whole run's seconds (default 460); every step's timeout
#                                  is cut to what is left
#   BRAID_GPU_BUILD_DIR            build folder (default build-gpu/ in the repository)
#   CMAKE_CUDA_ARCHITECTURES       GPU architectures to build for (default 90: H100 / H200)
#   BRAID_JOBS                     parallel build jobs (default: the number of cores)
# OUT_DIR receives at most 8 files (what the device tool brings back): env.log, build.log
# (configure and both builds), ctest_host.log, ctest_gpu.log, ctest_gpu.xml (JUnit),
# bench.log (both benchmarks), gpu_kernels_bench.json, summary.md.
# Exit status:
#   0  everything ran and passed
#   1  a step failed or timed out (its log in OUT_DIR says why)
#   2  usage error
#   3  a prerequisite is missing: CUDA compiler, CMake, Eigen or nlohmann-json (nothing is
#      built), or GTest or NCCL (the rest still runs; the summary names what was left out)
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
if [[ -n ${BRAID_GPU_DEPS:-} && ! -d $BRAID_GPU_DEPS ]]; then
  echo "tests/gpu/run.sh: BRAID_GPU_DEPS=$BRAID_GPU_DEPS is not a folder (tests/gpu/stage_deps.sh DIR makes it)" >&2
  exit 2
fi
deps=${BRAID_GPU_DEPS:+$(cd "$BRAID_GPU_DEPS" && pwd)}
t_start=$(date +%s)
budget=${BRAID_GPU_BUDGET_S:-460}
deadline=$((t_start + budget))

rm -f "$out"/{env.log,build.log,ctest_host.log,ctest_gpu.log,ctest_gpu.xml,bench.log} \
  "$out"/{gpu_kernels_bench.json,summary.md}
summary_rows=()
status=0      # 1 once a step failed
missing=()    # prerequisites not found
notes=()      # one line each in summary.md
gpu_line=""   # the probe's first line

# cap NOMINAL KEEP: NOMINAL seconds, or fewer so that KEEP seconds of the budget remain after.
cap() {
  local left=$((deadline - $(date +%s) - $2))
  echo $(($1 < left ? $1 : left))
}

# run_step NAME TIMEOUT_S LOG CMD...: runs CMD with a timeout (never past the budget), its
# output appended to OUT_DIR/LOG; records the result for summary.md. Returns CMD's status
# (124 on timeout); a step left with under 5 s is skipped and returns 124.
run_step() {
  local name=$1 limit=$2 logname=$3 log=$out/$3
  shift 3
  local left=$((deadline - $(date +%s)))
  if ((limit > left)); then limit=$left; fi
  if ((limit < 5)); then
    skip_step "$name" "no time left in the ${budget} s budget"
    return 124
  fi
  local t0 rc=0
  t0=$(date +%s)
  echo "==== $name (timeout ${limit}s, log $log)"
  printf '==== %s\n$ %s\n' "$name" "$*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1 || rc=$?
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
    local commit=unknown
    if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
      git -C "$root" diff --quiet 2>/dev/null || commit+=" (with uncommitted changes)"
    fi
    echo "- commit: ${commit:-unknown}"
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(uname -n)"
    echo "- CMAKE_CUDA_ARCHITECTURES: $arch; build folder: $build; deps: ${deps:-none staged}"
    if [[ -n $gpu_line ]]; then echo "- $gpu_line"; fi
    local n
    for n in "${notes[@]}"; do echo "- $n"; done
    if ((${#missing[@]})); then echo "- missing: ${missing[*]}"; fi
    if [[ -f $out/ctest_gpu.log ]]; then
      echo
      echo "## ctest -L gpu"
      echo
      echo '```'
      grep -E 'tests passed|tests failed|Total Test time|\(Failed\)|\(Timeout\)|\(Skipped\)|\(SEGFAULT\)|\(Subprocess' \
        "$out/ctest_gpu.log" | head -60 || true
      echo '```'
    fi
    if [[ -f $out/bench.log ]]; then
      echo
      echo "## bench/gpu_optim_bench and bench/gpu_kernels_bench"
      echo
      grep -E '^\||^device|^==== |^bytes moved|^GB/s|^error' "$out/bench.log" |
        sed -E 's/^==== (.*)/\n**\1**\n/' || true
    fi
    echo
    echo "## Steps"
    echo
    echo "total: $(($(date +%s) - t_start))s; exit status $status"
    echo
    echo "| step | result | time | log |"
    echo "|---|---|---|---|"
    printf '%s\n' "${summary_rows[@]}"
  } >"$out/summary.md"
  echo
  cat "$out/summary.md"
  echo
  echo "summary: $out/summary.md"
}
# The exit status is decided here: a failure (or an unexpected error of the script) beats a
# missing prerequisite beats no GPU.
# shellcheck disable=SC2317 # run from the EXIT trap
finish() {
  local rc=$?
  if ((status == 1 || (rc != 0 && rc != 3 && rc != 4))); then
    status=1
  elif ((${#missing[@]})); then
    status=3
  else
    status=$rc
  fi
  write_summary
  exit "$status"
}
trap finish EXIT

# ---- prerequisites ---------------------------------------------------------------------------

have_file() {  # have_file PATH: under /usr/include, /usr/local/include or BRAID_GPU_DEPS/include
  local d
  for d in /usr/include /usr/local/include ${deps:+"$deps/include"}; do
    [[ -e $d/$1 ]] && return 0
  done
  return 1
}

# find_nccl: sets nccl_lib and nccl_inc. Looks next to CUDA, in the system, then in Python's
# nvidia-nccl wheel (PyTorch's: site-packages/nvidia/nccl/{lib,include}); a header staged by
# stage_deps.sh is used only for a library found without one.
nccl_lib="" nccl_inc=""
find_nccl() {
  local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib
    /usr/local/lib) d f sp=()
  mapfile -t sp < <(python3 -c 'import site, sysconfig
print("\n".join([sysconfig.get_paths()["purelib"]] + site.getsitepackages()))' 2>/dev/null || true)
  for d in "${sp[@]}" /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages; do
    [[ -d $d/nvidia/nccl/lib ]] && dirs+=("$d/nvidia/nccl/lib")
  done
  for d in "${dirs[@]}"; do
    for f in "$d/libnccl.so" "$d"/libnccl.so.[0-9]*; do
      if [[ -f $f ]]; then nccl_lib=$f && break 2; fi
    done
  done
  [[ -n $nccl_lib ]] || return 1
  for d in "$(dirname "$nccl_lib")/../include" /usr/local/cuda/include /usr/include /usr/local/include \
    ${deps:+"$deps/nccl/include"}; do
    if [[ -f $d/nccl.h ]]; then nccl_inc=$(cd "$d" && pwd) && return 0; fi
  done
  return 1
}

nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
# line N CMD...: line N of CMD's output, or "missing" when CMD fails or prints nothing.
line() {
  local n=$1 text
  shift
  text=$("$@" 2>/dev/null | sed -n "${n}p") || text=""
  echo "${text:-missing}"
}
{
  echo "uname: $(uname -a)"
  echo "cmake: $(line 1 cmake --version)"
  echo "ninja: $(line 1 ninja --version)"
  echo "c++: $(line 1 c++ --version)"
  echo "nvcc: $(line 4 "$nvcc_bin" --version)"
  echo "ccache: $(line 1 ccache --version)"
  echo "nvidia-smi: $(line 1 nvidia-smi --query-gpu=count,name,driver_version,memory.total --format=csv,noheader)"
  echo "BRAID_GPU_DEPS: ${deps:-unset}"
  if [[ -n $deps && -f $deps/MANIFEST.txt ]]; then sed 's/^/  /' "$deps/MANIFEST.txt"; fi
  ls -d /usr/include/eigen3 /usr/include/nlohmann /usr/include/gtest 2>&1 || true
} >"$out/env.log"

if [[ ! -x $nvcc_bin ]]; then missing+=("nvcc (CUDA in /usr/local/cuda)"); fi
if ! command -v cmake >/dev/null; then missing+=("cmake"); fi
if ! have_file eigen3/Eigen/Core; then missing+=("Eigen 3.4 headers (eigen3/Eigen/Core)"); fi
if ! have_file nlohmann/json.hpp; then missing+=("nlohmann-json headers (nlohmann/json.hpp)"); fi
if ((${#missing[@]})); then
  echo "tests/gpu/run.sh: missing ${missing[*]}; nothing can be built (stage them with" \
    "tests/gpu/stage_deps.sh DIR and set BRAID_GPU_DEPS=DIR)" >&2
  skip_step "configure and build" "missing ${missing[*]}"
  exit 3
fi

# GTest: installed, or built from the staged sources (forced with BRAID_GPU_FORCE_STAGED_GTEST=1).
build_tests=ON
gtest_args=(-DBRAID_GPU_GTEST_SOURCE=)  # empty: find_package(GTest), also in a reused build folder
staged_gtest=${deps:+$deps/src/googletest}
if [[ ${BRAID_GPU_FORCE_STAGED_GTEST:-0} == 1 ]] || ! have_file gtest/gtest.h; then
  if [[ -n $staged_gtest && -f $staged_gtest/CMakeLists.txt ]]; then
    gtest_args=(-DBRAID_GPU_GTEST_SOURCE="$staged_gtest")
    notes+=("GTest: built from the staged sources $staged_gtest")
  else
    echo "tests/gpu/run.sh: GTest is missing (not installed, and no BRAID_GPU_DEPS/src/googletest):" \
      "the tests cannot be built; the benchmarks still run, and the script exits with 3" >&2
    missing+=("GTest (installed, or staged by tests/gpu/stage_deps.sh)")
    build_tests=OFF
  fi
else
  notes+=("GTest: installed")
fi

nccl_args=(-DBRAID_WITH_NCCL=OFF)
have_nccl=0
if find_nccl; then
  have_nccl=1
  nccl_args=(-DBRAID_WITH_NCCL=ON "-DBRAID_NCCL_LIBRARY=$nccl_lib" "-DBRAID_NCCL_INCLUDE=$nccl_inc")
  notes+=("NCCL: $nccl_lib, header in $nccl_inc")
else
  missing+=("NCCL (libnccl${nccl_lib:+ found at $nccl_lib, but no nccl.h})")
fi
echo "NCCL: ${nccl_lib:-not found} ${nccl_inc:+(nccl.h in $nccl_inc)}" >>"$out/env.log"

# ---- configure and build -----------------------------------------------------------------------

gen=()
if [[ ! -f $build/CMakeCache.txt ]]; then
  if command -v ninja >/dev/null; then gen=(-G Ninja); else gen=(-G "Unix Makefiles"); fi
fi
extra=()
if command -v ccache >/dev/null; then
  extra+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# CMake 4 refuses projects that ask for a policy version below 3.5; none of braid's does, this
# keeps a staged dependency's older cmake_minimum_required from stopping the run.
if [[ $(cmake --version | head -1) =~ version\ ([0-9]+) ]] && ((BASH_REMATCH[1] >= 4)); then
  extra+=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
fi
run_step "configure" 90 build.log \
  cmake -S "$root/tests/gpu" -B "$build" "${gen[@]}" "${extra[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBRAID_WITH_CUDA=ON -DBRAID_WITH_HIP=OFF "${nccl_args[@]}" \
  -DBRAID_WITH_UCX=OFF -DBRAID_WITH_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DBRAID_BUILD_TESTS=$build_tests "${gtest_args[@]}" ${deps:+"-DCMAKE_PREFIX_PATH=$deps"} ||
  exit 1

# The build gets the budget less what running needs (200 s: what the tests and benchmarks take
# on an H100, with room); the benchmarks first, so that a test that does not compile still
# leaves the figures.
run_step "build benchmarks" "$(cap "$budget" 200)" build.log \
  cmake --build "$build" -j "$jobs" --target braid_gpu_optim_bench braid_gpu_kernels_bench ||
  exit 1
# The tests build past a failure (ninja -k 0, make -k): a binary that does not compile or link
# (say, comm/ against the image's NCCL) fails this step but leaves the others to run; ctest
# lists a binary that was not built without labels, so -L skips it.
tests_built=0
if [[ $build_tests == ON ]]; then
  keep_going=(-k)
  if grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt"; then keep_going=(-k 0); fi
  build_rc=0
  run_step "build tests" "$(cap "$budget" 200)" build.log \
    cmake --build "$build" -j "$jobs" --target braid_gpu_host_tests braid_gpu_tests -- \
    "${keep_going[@]}" || build_rc=$?
  if ((build_rc == 0)); then
    tests_built=1
  else
    status=1
    # Failed: run what was built. Timed out: nothing of it is trusted.
    if ((build_rc != 124 && build_rc != 137)); then
      tests_built=1
      notes+=("some test binaries did not build (build.log): ctest runs the others")
    fi
  fi
fi
grep -E 'tests/gpu: (gpu|host) test binaries' "$out/build.log" | sed 's/^-- //' >>"$out/env.log" || true

# ---- run ---------------------------------------------------------------------------------------

# Why the test steps do not run, or empty when they do.
tests_off=""
if [[ $build_tests == OFF ]]; then
  tests_off="GTest missing"
elif ((tests_built == 0)); then
  tests_off="the tests did not build (build.log)"
fi

# The host tests run the CUDA code's shared arithmetic and argument checks: no GPU needed.
if [[ -z $tests_off ]]; then
  run_step "host tests (ctest -L unit -LE gpu)" 60 ctest_host.log \
    ctest --test-dir "$build" -L unit -LE gpu -j "$jobs" --output-on-failure --timeout 50 ||
    status=1
else
  skip_step "host tests (ctest -L unit -LE gpu)" "$tests_off"
fi

main_job_reason="the Accelerator does not train on cuda yet (MULTI_GPU is refused; docs/gpu.md)"
# The probe exits with 2 where CUDA finds no device; anything else non-zero (a library that
# does not load, a hang) is a failure of this run, not a missing GPU.
probe_rc=0
probe=$(timeout --kill-after=5 60 "$build/bin/braid_gpu_optim_bench" --probe 2>&1) || probe_rc=$?
echo "$probe"
printf 'GPU probe (braid_gpu_optim_bench --probe, exit %d): %s\n' "$probe_rc" "$probe" >>"$out/env.log"
gpu_line=$(head -1 <<<"$probe")
if ((probe_rc != 0 && probe_rc != 2)); then
  summary_rows+=("| GPU probe | failed (exit $probe_rc): ${gpu_line:-no output} | - | env.log |")
  status=1
fi
if ((probe_rc != 0)); then
  reason=$gpu_line  # "no GPU: <CUDA's reason>"
  if ((probe_rc != 2)); then reason="the GPU probe failed (exit $probe_rc)"; fi
  skip_step "ctest -L gpu" "$reason"
  if ((have_nccl)); then notes+=("nccl tests: built, not run ($reason)"); fi
  skip_step "bench/gpu_optim_bench" "$reason"
  skip_step "bench/gpu_kernels_bench" "$reason"
  skip_step "main job on the GPU" "$main_job_reason"
  echo "tests/gpu/run.sh: built, but the GPU steps did not run: $reason"
  exit 4
fi

gpus=0
if [[ $gpu_line =~ ([0-9]+)\ GPU\(s\)\ visible ]]; then gpus=${BASH_REMATCH[1]}; fi
if ((gpus < 2)); then
  notes+=("$gpus GPU visible: the two-rank nccl tests skip (they need 2)")
fi
if ((!have_nccl)); then
  skip_step "nccl tests (braid_comm_nccl_test)" "NCCL not found (env.log)"
fi
if [[ -z $tests_off ]]; then
  # One process per test, each with its own CUDA context: several at once.
  run_step "ctest -L gpu" "$(cap 180 100)" ctest_gpu.log \
    ctest --test-dir "$build" -L gpu -j "$((jobs < 8 ? jobs : 8))" --output-on-failure \
    --timeout 120 --output-junit "$out/ctest_gpu.xml" || status=1
else
  skip_step "ctest -L gpu" "$tests_off"
fi
run_step "bench/gpu_optim_bench" "$(cap 60 45)" bench.log "$build/bin/braid_gpu_optim_bench" || status=1
run_step "bench/gpu_kernels_bench" 90 bench.log \
  "$build/bin/braid_gpu_kernels_bench" "$out/gpu_kernels_bench.json" || status=1
skip_step "main job on the GPU" "$main_job_reason"
exit 0

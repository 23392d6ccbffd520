#!/usr/bin/env bash
# Compiles every GPU kernel source (kernels/src/cuda/*.cu) with hipcc for AMD GPUs, objects
# only: the check that the CUDA sources plus vendor.h are valid HIP (docs/gpu.md, "HIP").
# Nothing is linked or run; Debian 12's HIP 5.2 (hipcc libamdhip64-dev) is enough.
#
#   scripts/hip_check.sh [OUT_DIR]    objects, logs and the generated config.h go to OUT_DIR
#                                     (kept), else to a temporary folder (removed)
#   BRAID_HIP_ARCHS   offload architectures, space-separated (default: gfx90a, MI200)
#   BRAID_HIPCC       the compiler (default: hipcc on PATH)
#   BRAID_JOBS        parallel compiles (default: the number of cores)
#
# Prints one line per source (compiled / skipped: why / FAILED) and exits 0 when every source
# that is not skipped compiled, 1 when one failed, 2 when hipcc is missing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hipcc=${BRAID_HIPCC:-hipcc}
read -r -a archs <<<"${BRAID_HIP_ARCHS:-gfx90a}"
jobs=${BRAID_JOBS:-$(nproc)}

# Sources that need a library Debian 12 does not package, by name, with the reason.
declare -A skip=(
  [gemm_fp8.cu]="uses cuBLASLt; the HIP equivalent, hipBLASLt, is not packaged in Debian 12"
)

if ! command -v "$hipcc" >/dev/null; then
  echo "hip_check: $hipcc not found (apt-get install hipcc libamdhip64-dev)" >&2
  exit 2
fi

if [[ $# -ge 1 ]]; then
  out=$1
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
out=$(cd "$out" && pwd)

# braid/core/config.h from core/config.h.in as a HIP build of the kernels would see it:
# BRAID_HAVE_HIP 1, and BRAID_HAVE_CUDA 1 because these are the sources behind
# braid/kernels/cuda.h (braid::kernels::cuda), which refuses to be included without it. Every
# other component 0: the kernels do not read them.
version=$(sed -n 's/^project(braid VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
IFS=. read -r major minor patch <<<"$version"
mkdir -p "$out/generated/braid/core"
sed -e 's/^#cmakedefine01 \(BRAID_HAVE_\(CUDA\|HIP\)\)$/#define \1 1/' \
  -e 's/^#cmakedefine01 \(.*\)$/#define \1 0/' \
  -e "s/@PROJECT_VERSION@/$version/" -e "s/@PROJECT_VERSION_MAJOR@/$major/" \
  -e "s/@PROJECT_VERSION_MINOR@/$minor/" -e "s/@PROJECT_VERSION_PATCH@/$patch/" \
  "$root/core/config.h.in" >"$out/generated/braid/core/config.h"

# -ffp-contract=off: clang fuses a * b + c into one FMA by default, as nvcc does; the CUDA
# build turns that off with -fmad=false (kernels/CMakeLists.txt) so that results keep the cpu
# reference's bits. Correctly rounded f32 division and sqrt and kept subnormals are clang's
# defaults, spelled out because the kernels rely on them as on nvcc's -prec-div=true
# -prec-sqrt=true -ftz=false. hipcc itself adds --rocm-path and --hip-device-lib-path.
flags=(-std=c++20 -ffp-contract=off -fhip-fp32-correctly-rounded-divide-sqrt
  -fno-gpu-flush-denormals-to-zero -Wall -Wextra -Wno-unused-parameter)
for a in "${archs[@]}"; do flags+=("--offload-arch=$a"); done
flags+=(-I "$out/generated" -I "$root/core/include" -I "$root/kernels/include"
  -I "$root/kernels/src/cuda")

# hipcc --version exits non-zero without a GPU (rocm_agent_enumerator finds no /sys/class/kfd).
version_text=$("$hipcc" --version 2>/dev/null || true)
echo "hip_check: $hipcc: $(grep -m1 -i 'HIP version' <<<"$version_text" || echo 'version unknown')"
echo "hip_check: $hipcc ${flags[*]} -c SRC -o OBJ"

# compile <src>: writes <name>.o, <name>.log (hipcc's output) and <name>.rc (exit status, time).
compile() {
  local src=$1 name t0 ms rc=0
  name=$(basename "$src" .cu)
  t0=$(date +%s%N)
  "$hipcc" "${flags[@]}" -c "$src" -o "$out/$name.o" >"$out/$name.log" 2>&1 || rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%s %d.%d\n' "$rc" $((ms / 1000)) $((ms % 1000 / 100)) >"$out/$name.rc"
}

start=$(date +%s)
sources=("$root"/kernels/src/cuda/*.cu)
for src in "${sources[@]}"; do
  file=$(basename "$src")
  [[ -v skip[$file] ]] && continue
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  compile "$src" &
done
wait

failed=0
skipped=0
for src in "${sources[@]}"; do
  file=$(basename "$src")
  name=${file%.cu}
  if [[ -v skip[$file] ]]; then
    printf '  %-20s skipped: %s\n' "$file" "${skip[$file]}"
    skipped=$((skipped + 1))
    continue
  fi
  read -r rc secs <"$out/$name.rc"
  warnings=$(grep -c 'warning:' "$out/$name.log" || true)
  if [[ $rc -eq 0 ]]; then
    printf '  %-20s compiled (%s s, %s warnings)\n' "$file" "$secs" "$warnings"
    ((warnings == 0)) || sed 's/^/      /' "$out/$name.log"
  else
    printf '  %-20s FAILED (exit %s):\n' "$file" "$rc"
    sed 's/^/      /' "$out/$name.log"
    failed=$((failed + 1))
  fi
done

echo "hip_check: ${archs[*]}: $failed failed, $skipped skipped, $(($(date +%s) - start)) s"
((failed == 0))

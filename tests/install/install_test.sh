#!/usr/bin/env bash
# Installs a braid build into a fresh prefix and proves the installed package is usable:
#   1. the expected files are there (libraries, headers with the generated config.h, the
#      CMake package, braid.pc, the braid CLI);
#   2. consumer/ configures with find_package(braid), builds and runs;
#   3. the same consumer/main.cc compiles and runs with `pkg-config --cflags --libs braid`;
#   4. components/ (find_package(braid COMPONENTS comm), braid::comm) configures with MPI, CUDA
#      and UCX hidden, links none of their libraries, and runs on shm;
#   5. the installed libbraid.so NEEDs no MPI, UCX, NCCL or CUDA library, and every plugin the
#      build made (libbraid_<component>.so) is installed beside it and loads there (with its
#      install RPATH: cudart from the toolkit's folder).
# Usage: install_test.sh BUILD_DIR CONSUMER_DIR WORK_DIR   (ctest: tests/install)
# Environment: CXX (compiler), BRAID_CMAKE (cmake), BRAID_SANITIZE (as the build used).
set -euo pipefail
build=$1 consumer=$2 work=$3
cmake=${BRAID_CMAKE:-cmake}
cxx=${CXX:-c++}
prefix=$work/prefix

san_flags=()
# python3 (not instrumented) loads sanitized libraries only with the sanitizers' runtimes
# preloaded; its own leaks are not braid's.
py_env=()
if [[ -n ${BRAID_SANITIZE:-} ]]; then
  san_flags=(-fsanitize="$BRAID_SANITIZE" -fno-omit-frame-pointer)
  preload=()
  if [[ $BRAID_SANITIZE == *address* ]]; then
    preload+=("$("${CXX:-c++}" -print-file-name=libasan.so)")
  fi
  if [[ $BRAID_SANITIZE == *undefined* ]]; then
    preload+=("$("${CXX:-c++}" -print-file-name=libubsan.so)")
  fi
  if [[ $BRAID_SANITIZE == *thread* ]]; then
    preload+=("$("${CXX:-c++}" -print-file-name=libtsan.so)")
  fi
  py_env=(env "LD_PRELOAD=${preload[*]}" "ASAN_OPTIONS=detect_leaks=0")
fi

rm -rf "$work"
mkdir -p "$work"

echo "== install $build into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"

echo "== installed files"
libdir=$(dirname "$(find "$prefix" -name braid.pc -path '*/pkgconfig/*' | head -1)")/..
libdir=$(cd "$libdir" && pwd)
for f in include/braid/core/config.h include/braid/core/error.h include/braid/tensor/tensor.h \
  include/braid/kernels/cpu.h bin/braid; do
  [[ -e $prefix/$f ]] || { echo "missing: $prefix/$f" >&2; exit 1; }
done
for f in libbraid_core libbraid_kernels libbraid_tensor; do
  compgen -G "$libdir/$f.*" >/dev/null || { echo "missing: $libdir/$f.{a,so}" >&2; exit 1; }
done
for f in cmake/braid/braidConfig.cmake cmake/braid/braidConfigVersion.cmake \
  cmake/braid/braidTargets.cmake pkgconfig/braid.pc; do
  [[ -e $libdir/$f ]] || { echo "missing: $libdir/$f" >&2; exit 1; }
done
echo "ok: headers, config.h, libraries, CMake package, braid.pc, bin/braid"
"$prefix/bin/braid" version

echo "== consumer through find_package(braid)"
"$cmake" -S "$consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="${san_flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/cmake-build" -j2
"$work/cmake-build/consumer"

echo "== consumer through pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs braid)
echo "pkg-config --cflags --libs braid: $flags"
# shellcheck disable=SC2086 # the flags are words
"$cxx" "${san_flags[@]}" -DEXPECTED_BRAID_VERSION="\"$(pkg-config --modversion braid)\"" \
  "$consumer/main.cc" $flags -o "$work/consumer-pkgconfig"
"$work/consumer-pkgconfig"
echo "== a consumer of part of braid: find_package(braid COMPONENTS comm), MPI / CUDA / UCX hidden"
# CMAKE_DISABLE_FIND_PACKAGE_*: find_package of those fails; PKG_CONFIG_LIBDIR: no ucx.pc.
PKG_CONFIG_LIBDIR=/nonexistent "$cmake" -S "$consumer/../components" -B "$work/components-build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  -DCMAKE_CXX_FLAGS="${san_flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" \
  >"$work/components-configure.log" || { cat "$work/components-configure.log"; exit 1; }
"$cmake" --build "$work/components-build" -j2
needed=$(readelf -d "$work/components-build/components_consumer" | grep NEEDED || true)
echo "$needed"
if grep -E "libmpi|libucp|libucs|libuct|libcudart|libcublas|libnccl" <<<"$needed"; then
  echo "FAIL: a shm-only consumer of braid::comm links a transport or CUDA library" >&2
  exit 1
fi
"$work/components-build/components_consumer"

echo "== libbraid.so and its plugins"
if compgen -G "$build/lib/libbraid.so*" >/dev/null; then
  lib=$(ls "$libdir"/libbraid.so.*.*.* 2>/dev/null | head -1)
  [[ -n $lib ]] || { echo "missing: $libdir/libbraid.so.<version>" >&2; exit 1; }
  lib_needed=$(readelf -d "$lib" | grep NEEDED || true)
  echo "$lib_needed"
  if grep -E "libmpi|libucp|libucs|libuct|libcudart|libcublas|libnccl" <<<"$lib_needed"; then
    echo "FAIL: the installed libbraid.so links a transport or CUDA library" >&2
    exit 1
  fi
  for built in "$build"/lib/libbraid_*.so; do
    [[ -e $built ]] || continue
    plugin=$libdir/$(basename "$built")
    [[ -e $plugin ]] || { echo "missing: $plugin (the build has $built)" >&2; exit 1; }
    # As the registries load it: libbraid.so first, then the plugin RTLD_NOW.
    "${py_env[@]}" python3 -c 'import ctypes, os, sys
ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
ctypes.CDLL(sys.argv[2], mode=os.RTLD_NOW)' "$lib" "$plugin" ||
      { echo "FAIL: the installed plugin $plugin does not load" >&2; exit 1; }
    echo "ok: $plugin loads"
  done
fi
echo "install test: all passed"

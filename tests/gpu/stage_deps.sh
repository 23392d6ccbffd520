#!/usr/bin/env bash
# Copies from this (Debian) machine what tests/gpu/run.sh needs on a bare GPU image and that
# image lacks (docs/gpu.md, "Running on a GPU"), into DIR, to be carried along with the
# repository:
#
#   tests/gpu/stage_deps.sh DIR        # here; then, there: BRAID_GPU_DEPS=DIR tests/gpu/run.sh OUT
#
#   DIR/include/eigen3/Eigen     Eigen 3.4 headers (Eigen/ only: braid includes Eigen/Core)
#   DIR/share/eigen3/cmake       their CMake config (find_package(Eigen3) with CMAKE_PREFIX_PATH=DIR)
#   DIR/include/nlohmann         nlohmann-json headers (tensor/ and comm/ parse JSON)
#   DIR/share/cmake/nlohmann_json  their CMake config
#   DIR/src/googletest           GoogleTest + GoogleMock SOURCES, without their own tests, docs
#                                and samples: built there from source by tests/gpu/CMakeLists.txt
#                                (Debian's static libraries were built by a toolchain the GPU image
#                                may not have)
#   DIR/nccl/include/nccl.h      NCCL's header, used there only when a libnccl is found without
#                                one (PyTorch's nvidia-nccl wheel; run.sh looks for it)
#   DIR/MANIFEST.txt             what was copied from where, with the Debian package versions
#
# Header-only libraries and sources only: nothing compiled here is carried, so the GPU image's
# own compiler builds everything. About 10 MiB. Running it again replaces what it staged.
# Sources can be moved with EIGEN_DIR, NLOHMANN_DIR, GTEST_SRC, NCCL_H.
# Exit status: 0 staged, 1 a source is missing (the message names its Debian package), 2 usage.
set -euo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
dir=$(mkdir -p "$1" && cd "$1" && pwd)
eigen=${EIGEN_DIR:-/usr/include/eigen3}
nlohmann=${NLOHMANN_DIR:-/usr/include/nlohmann}
gtest=${GTEST_SRC:-/usr/src/googletest}
nccl_h=${NCCL_H:-}
if [[ -z $nccl_h ]]; then
  for f in /usr/local/cuda/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h; do
    if [[ -f $f ]]; then nccl_h=$f && break; fi
  done
fi

need() {  # need PATH PACKAGE
  if [[ ! -e $1 ]]; then
    echo "tests/gpu/stage_deps.sh: $1 is missing (apt-get install $2)" >&2
    exit 1
  fi
}
need "$eigen/Eigen/Core" libeigen3-dev
need /usr/share/eigen3/cmake/Eigen3Config.cmake libeigen3-dev
need "$nlohmann/json.hpp" nlohmann-json3-dev
need /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake nlohmann-json3-dev
need "$gtest/googletest/CMakeLists.txt" googletest
need "$gtest/googlemock/CMakeLists.txt" googletest

# Only the paths this script creates are replaced: DIR may hold other things.
rm -rf "$dir/include/eigen3" "$dir/include/nlohmann" "$dir/share/eigen3" \
  "$dir/share/cmake/nlohmann_json" "$dir/src/googletest" "$dir/nccl"
mkdir -p "$dir/include/eigen3" "$dir/share/eigen3" "$dir/share/cmake" "$dir/src"

cp -R "$eigen/Eigen" "$eigen/signature_of_eigen3_matrix_library" "$dir/include/eigen3/"
# The config files find the headers relative to themselves (DIR/share/eigen3/cmake -> DIR).
cp -R /usr/share/eigen3/cmake "$dir/share/eigen3/"
cp -R "$nlohmann" "$dir/include/nlohmann"
cp -R /usr/share/cmake/nlohmann_json "$dir/share/cmake/"

cp -R "$gtest" "$dir/src/googletest"
rm -rf "$dir/src/googletest/googletest/"{test,docs,samples} "$dir/src/googletest/googlemock/"{test,docs}
if [[ -f /usr/share/doc/googletest/copyright ]]; then
  cp /usr/share/doc/googletest/copyright "$dir/src/googletest/COPYRIGHT.debian"
fi

if [[ -n $nccl_h ]]; then
  mkdir -p "$dir/nccl/include"
  cp "$nccl_h" "$dir/nccl/include/nccl.h"
else
  echo "tests/gpu/stage_deps.sh: no nccl.h here; staged without it (the GPU image's own is used)" >&2
fi

version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }
{
  echo "staged by tests/gpu/stage_deps.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(hostname)"
  echo "eigen3: $eigen (libeigen3-dev $(version libeigen3-dev))"
  echo "nlohmann-json: $nlohmann (nlohmann-json3-dev $(version nlohmann-json3-dev))"
  echo "googletest: $gtest (googletest $(version googletest))"
  if [[ -n $nccl_h ]]; then
    echo "nccl.h: $nccl_h ($(grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$nccl_h" | awk '{print $3}' |
      paste -sd. -))"
  fi
} >"$dir/MANIFEST.txt"
echo "staged into $dir ($(du -sh "$dir" | cut -f1)):"
sed 's/^/  /' "$dir/MANIFEST.txt"

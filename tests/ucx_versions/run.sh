#!/usr/bin/env bash
# Runs braid's UCX tests against a second UCX library, newer than the one braid was built with
# (docs/ucx.md, "UCX versions"): UCP keeps its ABI within 1.x, so a binary built on Debian's UCX
# 1.13 may load a cluster's newer UCX, and this checks that it works there.
#   run.sh BRAID COMM_TEST CONFORMANCE_WORKER MULTINODE_DIR
# The second library: BRAID_UCX_SECOND_LIB (a folder holding libucp.so.0), else the lib/ folder
# of PyPI's libucx wheel (`pip install libucx-cu12`, as scripts/install_deps.sh does) for the
# python3 on PATH. Without either it exits 77 (ctest: skipped) and says how to get one.
# Steps, each with LD_LIBRARY_PATH set to that folder:
#   1. `braid env` must name a libucp.so.0 from that folder (the library really is the one run);
#   2. COMM_TEST runs every test of the ucx transport and backend (gtest filter below), with
#      UCX_TLS=$UCX_VERSIONS_TLS where that is set (the sanitizer build sets ^cma: CMakeLists.txt);
#   3. the conformance suite on the ucx backend across two network namespaces, 2 ranks per node
#      (MULTINODE_DIR/run_netns.sh); where namespaces cannot be made (not root) this step is
#      reported as skipped and the others still count.
set -u
braid=${1:?usage: run.sh BRAID COMM_TEST CONFORMANCE_WORKER MULTINODE_DIR}
comm_test=${2:?} worker=${3:?} multinode=${4:?}

lib=${BRAID_UCX_SECOND_LIB:-}
if [[ -z $lib ]]; then
  lib=$(python3 -c 'import libucx, os; print(os.path.join(os.path.dirname(libucx.__file__), "lib"))' \
    2>/dev/null)
fi
if [[ -z $lib || ! -e $lib/libucp.so.0 ]]; then
  echo "ucx_versions: skipped: no second UCX library (set BRAID_UCX_SECOND_LIB to a folder with" \
    "libucp.so.0, or 'pip install libucx-cu12', which scripts/install_deps.sh does)"
  exit 77
fi
lib=$(cd "$lib" && pwd)
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# 1. Which UCX braid loads.
report=$("$braid" env) || {
  echo "ucx_versions: FAIL: 'braid env' failed with $lib first in LD_LIBRARY_PATH"
  exit 1
}
line=$(grep '^ucx: ' <<<"$report")
echo "ucx_versions: $line"
if [[ $line != *"; $lib/libucp.so"* ]]; then
  echo "ucx_versions: FAIL: braid did not load the UCX in $lib (its report: '$line')"
  exit 1
fi

# 2. The ucx transport's and backends' tests (those whose names say ucx, as ctest -R '[Uu]cx').
tls=()
[[ -n ${UCX_VERSIONS_TLS:-} ]] && tls=(env "UCX_TLS=$UCX_VERSIONS_TLS")
if ! "${tls[@]}" "$comm_test" --gtest_filter='*ucx*:*Ucx*' --gtest_brief=1; then
  echo "ucx_versions: FAIL: the ucx tests of $(basename "$comm_test") failed on ${line#ucx: }"
  exit 1
fi

# 3. Across two namespaces.
NETNS_MIN_VETH_BYTES=280004 bash "$multinode/run_netns.sh" "$braid" 2 ok "$worker" --backend ucx \
  --counts 0,1,7,4099,70001 conformance
status=$?
case $status in
0) echo "ucx_versions: ok: UCX ${line#ucx: }: ucx tests and the two-node conformance suite pass" ;;
77) echo "ucx_versions: ok: UCX ${line#ucx: }: ucx tests pass; the two-node part was skipped" ;;
*)
  echo "ucx_versions: FAIL: the two-node conformance suite on ${line#ucx: } failed ($status)"
  exit 1
  ;;
esac

#!/usr/bin/env bash
# ThreadSanitizer build and run of the comm/ and shard/ tests (docs/layout.md, "Sanitizers").
# Not part of scripts/test.sh: it takes longer than CI's budget for it (see the docs).
#   scripts/tsan.sh            configure build-tsan/, build the test binaries, run them
#   BRAID_JOBS                 parallel build / test jobs (default: the number of cores)
# Prints each step's time; exits non-zero on any test failure or TSan report.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$BRAID_ROOT"

targets=(braid_comm_test)
for area in units fsdp flat checkpoint mesh memory ddp tp pp; do
  targets+=("braid_shard_${area}_test")
done

step "configure build-tsan/ (thread)" braid_configure build-tsan \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DCMAKE_C_FLAGS_DEBUG="-O1 -g" \
  -DBRAID_SANITIZE=thread -DBRAID_BUILD_TESTS=ON -DBRAID_BUILD_BENCH=OFF \
  -DBRAID_BUILD_EXAMPLES=OFF -DBRAID_WITH_CUDA=OFF -DBRAID_WITH_HIP=OFF -DBRAID_WITH_NCCL=OFF
step "build build-tsan/ (comm and shard tests)" \
  cmake --build build-tsan -j "$BRAID_JOBS" --target "${targets[@]}"

# UCX_MEM_EVENTS=no: libucm (linked through comm/'s UCX backend) patches madvise and takes a
# pthread rwlock inside it; glibc madvises a thread's stack as the thread exits, after TSan
# has torn down that thread's state, and TSan's rwlock interceptor then crashes (SIGSEGV in
# __tsan::MutexPreReadLock under ucm_madvise). braid does not need UCX's memory events.
export UCX_MEM_EVENTS=no
# Suppressions for third-party libraries only (one reason per line in the file).
export TSAN_OPTIONS="${TSAN_OPTIONS:-second_deadlock_stack=1} suppressions=$BRAID_ROOT/scripts/tsan.supp"
# The gtest binaries only: -LE launch leaves out the tests that start braid launch, and
# ucx_second_library needs braid env and a second UCX build (their programs are not built
# here). The conformance suite runs for one rank count per backend variant that uses threads
# in one process (where TSan sees both sides of every handoff), plus ucx and the process
# variant with 2 ranks: under TSan each full variant takes minutes (shm_processes_4ranks:
# 7 minutes on a loaded 2-core machine), the whole suite hours.
ctest_tsan=(ctest --test-dir build-tsan --output-on-failure -j "$BRAID_JOBS" --timeout 1800)
step "ctest build-tsan/ (comm and shard, without the conformance suite)" "${ctest_tsan[@]}" \
  -L "^(comm|shard)$" -LE launch -E "^ucx_second_library$|^Backends/Conformance\."
# (Run from the binary: ctest's discovery under TSan does not list the parameterized suite.)
filter=
for v in shm_threads_3ranks shm_tiny_slots_2ranks shm_processes_2ranks p2p_threads_auto_3ranks \
  p2p_threads_ring_4ranks p2p_threads_rd_3ranks p2p_threads_segments_3ranks \
  hier_one_node_3ranks ucx_processes_2ranks; do
  filter+="${filter:+:}Backends/Conformance.*/$v"
done
step "conformance under TSan (selected variants)" build-tsan/comm/braid_comm_test \
  --gtest_filter="$filter"

step_summary
echo "tsan.sh: all steps passed"

#!/usr/bin/env bash
# The long fuzzing run of docs/fuzzing.md: every target in turn, niced, for a number of
# executions (default 10 million) or until a time limit per target, whichever comes first, then a
# Markdown table of what each did (the table docs/fuzzing.md shows).
#   long_run.sh <build-fuzz-folder> [runs] [max-seconds-per-target]
#   e.g. nohup bash tests/fuzz/long_run.sh build-fuzz 10000000 3600 > long_run.out 2>&1 &
#   BRAID_FUZZ_TARGETS="store_wire"    only these targets
# Corpora grow in <build>/fuzz-corpus/<name>/ (run.sh's folders: a later run.sh starts from them);
# a crash stops that target, is listed in the table and saved in <build>/fuzz-artifacts/, and the
# script goes on with the next target and exits non-zero at the end.
set -uo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 <build-fuzz-folder> [runs] [max-seconds-per-target]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
runs=${2:-10000000}
seconds=${3:-0}  # 0: no time limit
here=$(cd "$(dirname "$0")" && pwd)
targets=${BRAID_FUZZ_TARGETS:-$(cd "$here/corpus" && ls)}
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"

# The mutation runs go without ASan's stack-use-after-return check: with it, every throw has
# ASan collect its fake stack (__asan::FakeStack::GC was 64% of store_wire's profile, whose
# every input throws up to six times), which cost those targets two thirds of their speed
# (store_wire 2,364 -> 7,200 exec/s on a Zen 4). Every input the run kept in its corpus is
# then run once more with the check on ("UAR replay"). An ASAN_OPTIONS of the caller's wins.
mutation_asan=${ASAN_OPTIONS:-detect_stack_use_after_return=0}
replay_asan=${ASAN_OPTIONS:-detect_stack_use_after_return=1}

stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }
done_field() { grep -E '^#[0-9]+' "$1" | tail -1 | sed -n "s/.* $2: \\([^ ]*\\).*/\\1/p"; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
echo "command: $0 $build $runs $seconds"
echo
echo "| target | executions | exec/s | time (s) | corpus (files/bytes) | coverage (edges) | crashes | UAR replay |"
echo "|---|---:|---:|---:|---:|---:|---:|---|"
failed=0
for t in $targets; do
  work=$build/fuzz-corpus/$t
  mkdir -p "$work"
  args=(-runs="$runs" -artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1)
  ((seconds > 0)) && args+=(-max_total_time="$seconds")
  [[ -f $here/dict/$t.dict ]] && args+=(-dict="$here/dict/$t.dict")
  log=$build/fuzz-logs/$t.long.log
  t0=$(date +%s)
  crashes=0
  ASAN_OPTIONS=$mutation_asan nice -n 19 "$build/tests/fuzz/${t}_fuzz" "${args[@]}" "$work" \
    "$here/corpus/$t" >"$log" 2>&1 || crashes=1
  dt=$(($(date +%s) - t0))
  # -runs=0: run every input of the corpora once, then stop.
  replay=ok
  ASAN_OPTIONS=$replay_asan nice -n 19 "$build/tests/fuzz/${t}_fuzz" -runs=0 \
    -artifact_prefix="$build/fuzz-artifacts/$t-uar-" "$work" "$here/corpus/$t" \
    >"$build/fuzz-logs/$t.uar.log" 2>&1 || replay=crash
  [[ $replay == crash ]] && crashes=1
  ((crashes)) && failed=1
  echo "| $t | $(stat "$log" number_of_executed_units) | $(stat "$log" average_exec_per_sec) |" \
    "$dt | $(done_field "$log" corp) | $(done_field "$log" cov) | $crashes | $replay |"
done
exit $failed

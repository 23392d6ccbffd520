#!/usr/bin/env bash
# Runs braid's libFuzzer targets (docs/fuzzing.md) one after another, each over its committed
# seeds (tests/fuzz/corpus/<name>/) plus what it finds, and stops at the first crash.
#   run.sh <build-fuzz-folder> [libFuzzer flags...]    e.g. run.sh build-fuzz -max_total_time=15
#   BRAID_FUZZ_TARGETS="store_wire object_format"      only these targets (default: all)
# New inputs go to <build>/fuzz-corpus/<name>/ (the committed seeds are only read); a crashing
# input is saved as <build>/fuzz-artifacts/<name>-crash-<sha1>, and the run exits non-zero.
# Each target's libFuzzer output is in <build>/fuzz-logs/<name>.log; one summary line per target
# is printed: executions, executions per second, corpus size, peak memory.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 <build-fuzz-folder> [libFuzzer flags...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
targets=${BRAID_FUZZ_TARGETS:-$(cd "$here/corpus" && ls)}
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"

# stat <log> <name>: a value from libFuzzer's -print_final_stats block.
stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }
# done_field <log> <field>: "cov" / "corp" from libFuzzer's last status line ("corp: 57/3120b").
done_field() { grep -E '^#[0-9]+' "$1" | tail -1 | sed -n "s/.* $2: \([^ ]*\).*/\1/p"; }

printf '%-20s %12s %9s %7s %12s %7s\n' target executions exec/s cov corpus rss_mb
for t in $targets; do
  bin=$build/tests/fuzz/${t}_fuzz
  [[ -x $bin ]] || { echo "fuzz: $bin is not built (cmake --build $build --target braid_fuzz)" >&2; exit 1; }
  work=$build/fuzz-corpus/$t
  mkdir -p "$work"
  args=(-artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1)
  [[ -f $here/dict/$t.dict ]] && args+=(-dict="$here/dict/$t.dict")
  log=$build/fuzz-logs/$t.log
  if ! "$bin" "${args[@]}" "$@" "$work" "$here/corpus/$t" >"$log" 2>&1; then
    echo "fuzz: $t FAILED; the end of $log:" >&2
    tail -n 60 "$log" >&2
    ls "$build/fuzz-artifacts/$t-"* 2>/dev/null | sed 's/^/fuzz: crashing input: /' >&2 || true
    exit 1
  fi
  printf '%-20s %12s %9s %7s %12s %7s\n' "$t" "$(stat "$log" number_of_executed_units)" \
    "$(stat "$log" average_exec_per_sec)" "$(done_field "$log" cov)" \
    "$(done_field "$log" corp)" "$(stat "$log" peak_rss_mb)"
done

#!/usr/bin/env bash
# Runs one fault scenario through `braid launch` and checks what every rank and the launcher
# report (docs/faults.md). Usage:
#   run_fault.sh BRAID WORKER NPROC SCENARIO K TIMEOUT_S
# Fails (exit 1, printing the launcher's whole output and what was expected) when any
# expectation is not met.
set -u

braid=$1 worker=$2 n=$3 scenario=$4 k=$5 timeout=$6
out=$(mktemp /tmp/braid-faults-XXXXXX)
failures=0

fail() {
  echo "FAIL ($scenario K=$k N=$n): $*" >&2
  failures=$((failures + 1))
}

# expect_line PATTERN WHAT: some line of the output matches the extended regex.
expect_line() {
  grep -Eq -- "$1" "$out" || fail "$2 (no line matches: $1)"
}

# Ranks other than K.
survivors() {
  for ((r = 0; r < n; r++)); do [[ $r -ne $k ]] && echo "$r"; done
}

# The missing-rank list of a shm error names K ("waiting for group ranks [.., K, ..]").
missing_k="waiting for group ranks \[([0-9]+, )*$k(, [0-9]+)*\]"

"$braid" launch --nproc-per-node "$n" --timeout "$timeout" --grace-period 1 \
  "$worker" "$scenario" "$k" >"$out" 2>&1
status=$?

# ---- what every scenario shares: the job prefix, /dev/shm, the stopped or killed rank ----
prefix=$(sed -nE 's/^\[rank 0\] job ([A-Za-z0-9_-]+) pid [0-9]+$/\1/p' "$out" | head -n1)
if [[ -z $prefix ]]; then
  fail "rank 0 did not print its job prefix"
elif compgen -G "/dev/shm/braid-$prefix-*" >/dev/null; then
  fail "left in /dev/shm: $(ls /dev/shm/braid-"$prefix"-*)"
fi
for ((r = 0; r < n; r++)); do
  pid=$(sed -nE "s/^\[rank $r\] job [A-Za-z0-9_-]+ pid ([0-9]+)$/\1/p" "$out" | head -n1)
  [[ -z $pid ]] && { fail "rank $r did not print its pid"; continue; }
  if grep -q collective_worker "/proc/$pid/cmdline" 2>/dev/null &&
    ! grep -Eq '^State:\s+Z' "/proc/$pid/status" 2>/dev/null; then
    fail "rank $r (pid $pid) still runs after the launcher exited; killing it"
    kill -KILL "$pid"
  fi
done

# ---- per scenario ----
case $scenario in
ok)
  [[ $status -eq 0 ]] || fail "launcher exit status $status, expected 0"
  for ((r = 0; r < n; r++)); do expect_line "^\[rank $r\] done$" "rank $r finished"; done
  ;;
die-before | die-during)
  [[ $status -eq 137 ]] || fail "launcher exit status $status, expected 137 (rank $k SIGKILLed)"
  expect_line "^braid launch: rank $k was killed by signal 9" "the launcher names rank $k"
  if [[ $scenario == die-before ]]; then seq='3' ; else seq='(20|21)'; fi
  for r in $(survivors); do
    expect_line "^\[rank $r\] error: braid: peer lost: shm: all_reduce \(seq $seq, group call #$seq\) .*$missing_k" \
      "rank $r reports peer lost in all_reduce #$seq naming rank $k"
  done
  ;;
die-after)
  [[ $status -eq 3 ]] || fail "launcher exit status $status, expected 3 (a survivor's error)"
  expect_line "^braid launch: rank [0-9]+ exited with code 3" "the launcher names a failed rank"
  grep -Eq "^braid launch: rank $k (exited|was killed)" "$out" &&
    fail "the launcher reports rank $k, which exited 0"
  for ((r = 0; r < n; r++)); do
    expect_line "^\[rank $r\] completed broadcast #3$" "rank $r completed the last collective"
  done
  for r in $(survivors); do
    expect_line "^\[rank $r\] error: braid: peer lost: shm: barrier \(seq 4, group call #4\) .*$missing_k" \
      "rank $r reports peer lost in barrier #4 naming rank $k"
  done
  ;;
stop)
  [[ $status -eq 3 ]] || fail "launcher exit status $status, expected 3 (a survivor's error)"
  expect_line "^braid launch: rank [0-9]+ exited with code 3" "the launcher names a failed rank"
  expect_line "error: braid: timeout: shm: all_reduce \(seq 3, group call #3\) .*timed out after" \
    "the first survivor times out"
  for r in $(survivors); do
    expect_line "^\[rank $r\] error: braid: (timeout|peer lost): shm: all_reduce \(seq 3, group call #3\) .*$missing_k" \
      "rank $r reports timeout or peer lost in all_reduce #3 naming rank $k"
  done
  ;;
mismatch)
  [[ $status -eq 3 ]] || fail "launcher exit status $status, expected 3"
  expect_line "^braid launch: rank [0-9]+ exited with code 3" "the launcher names a failed rank"
  for ((r = 0; r < n; r++)); do
    expect_line "^\[rank $r\] error: braid: invalid argument: shm: collective mismatch at group call #2: .*(broadcast .*all_reduce|all_reduce .*broadcast).*seq 2" \
      "rank $r reports the mismatch at call #2"
    if [[ $r -ne $k ]]; then
      expect_line "^\[rank $r\] error: .*group rank $k \(world rank $k\) called broadcast" \
        "rank $r names rank $k's broadcast"
    fi
  done
  ;;
*)
  fail "unknown scenario"
  ;;
esac

if ((failures > 0)); then
  echo "---- launcher output (exit status $status) ----" >&2
  cat "$out" >&2
  rm -f "$out"
  exit 1
fi
echo "PASS ($scenario K=$k N=$n): launcher exit status $status"
grep -E "^braid launch:|error:" "$out"
rm -f "$out"

#!/usr/bin/env bash
# `braid bench` end to end with real rank processes (ctest label "bench-cli"). No timing is
# asserted: only exit status, the table's shape, #wrong == 0 and the JSON file.
#   bench_cli_test.sh BRAID sweep|badflags|limit|mpi [PYTHON] [MPIRUN]
set -u
braid=$1
mode=$2
python=${3:-python3}
mpirun=${4:-mpirun}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$tmp/out" 2>/dev/null; exit 1; }

# Rows of the table for one op: lines after "# Collective test: OP (LIB)" up to the footer.
rows_of() {
  awk -v op="$1" -v lib="$2" '
    /^# Collective test: / { on = ($4 == op && index($0, "(" lib ")") > 0); next }
    /^# Out of bounds/ { on = 0 }
    on && !/^#/ { print }' "$tmp/out"
}

case $mode in
sweep)
  # --iters-small reaches every rank (--nproc passes it on): ranks that loop differently would
  # fail their calls.
  (cd "$tmp" && "$braid" bench --nproc 2 -b 8 -e 64K -f 4 -c 1 --op all --iters-small 50 \
    -J out.json) >"$tmp/out" 2>&1 || fail "exit status $?"
  grep -q '^# time: median of 5 timed loops of 20 iterations (50 up to 8192 bytes), averaged over ranks$' \
    "$tmp/out" || fail "no --iters-small in the preamble"
  grep -q '^#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong$' \
    "$tmp/out" || fail "no nccl-tests header"
  for op in all_reduce all_gather reduce_scatter broadcast reduce all_to_all scatter; do
    n=$(rows_of $op "braid shm" | wc -l)
    # 8, 32, 128, 512, 2K, 8K, 32K
    [ "$n" -eq 7 ] || fail "$op: expected 7 rows, got $n"
    # 13 columns; #wrong (columns 9 and 13) must be 0 for every row
    bad=$(rows_of $op "braid shm" | awk 'NF != 13 || $9 != 0 || $13 != 0' | wc -l)
    [ "$bad" -eq 0 ] || fail "$op: rows with #wrong != 0 or a bad layout"
  done
  [ "$(grep -c '^# Out of bounds values : 0 OK$' "$tmp/out")" -eq 7 ] || fail "footer count"
  grep -q '^# Avg bus bandwidth    : ' "$tmp/out" || fail "no average footer"
  # The machine probe ran between the two ranks at both ends (no figure is asserted).
  grep -Eq '^# machine probe, 1 MiB copy between ranks 0 and 1: at the start [0-9.]+ GB/s .*; at the end [0-9.]+ GB/s' \
    "$tmp/out" || fail "no machine probe footer"
  "$python" - "$tmp/out.json" "$tmp/out" <<'EOF' || fail "JSON does not match the table"
import json, sys
d = json.load(open(sys.argv[1]))
table = [l.split() for l in open(sys.argv[2]) if l[:1] == ' ' or l[:1].isdigit()]
rows = [(r["op"], row) for r in d["results"] for row in r["rows"]]
assert d["nranks"] == 2, d["nranks"]
assert (d["iters"], d["iters_small"], d["small_bytes"]) == (20, 50, 8192), d
assert [r["op"] for r in d["results"]] == ["all_reduce", "all_gather", "reduce_scatter",
                                           "broadcast", "reduce", "all_to_all", "scatter"]
assert len(rows) == len(table) == 49, (len(rows), len(table))
for (op, row), cols in zip(rows, table):
    assert int(cols[0]) == row["size"] and int(cols[1]) == row["count"], (op, cols, row)
    assert row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] == 0
    assert abs(float(cols[7]) - row["out_of_place"]["busbw_gbps"]) < 0.006, (cols, row)
EOF
  ;;
badflags)
  "$braid" bench -d nosuch >"$tmp/out" 2>&1 && fail "-d nosuch exited 0"
  grep -q "nosuch" "$tmp/out" || fail "-d nosuch: message does not name the value"
  "$braid" bench -b 1M -e 1K >"$tmp/out" 2>&1 && fail "-b > -e exited 0"
  grep -q -- "-b 1048576 is larger than -e 1024" "$tmp/out" || fail "-b > -e: unclear message"
  "$braid" bench -b 12Q >"$tmp/out" 2>&1 && fail "-b 12Q exited 0"
  grep -q -- "-b '12Q'" "$tmp/out" || fail "-b 12Q: message does not name the flag"
  "$braid" bench --op gossip >"$tmp/out" 2>&1 && fail "--op gossip exited 0"
  grep -q "gossip" "$tmp/out" || fail "--op gossip: message"
  "$braid" bench --nproc 2 -b 8 -e 8 -r 5 --op broadcast >"$tmp/out" 2>&1 && fail "-r 5 exited 0"
  grep -q -- "-r 5" "$tmp/out" || fail "-r 5: message does not name the root"
  "$braid" bench --iters-small -3 >"$tmp/out" 2>&1 && fail "--iters-small -3 exited 0"
  grep -q -- "--iters-small -3" "$tmp/out" || fail "--iters-small -3: message does not name it"
  ;;
limit)
  # --peer limit (the bare shared-memory data path): every op it implements checked on 2 and 4
  # ranks, the ratio tables, the ops it lacks skipped by name, nothing left in /dev/shm.
  before=$(ls /dev/shm | grep -c '^braid-limit-')
  for n in 2 4; do
    "$braid" bench --nproc $n --peer limit -b 8 -e 1M -f 32 -n 3 --repeats 2 -c 1 --op all \
      >"$tmp/out" 2>&1 || fail "W $n: exit status $?"
    for op in all_reduce all_gather reduce_scatter broadcast; do
      rows=$(rows_of $op "limit")
      [ "$(echo "$rows" | grep -c .)" -eq 4 ] || fail "W $n $op: expected 4 limit rows"
      [ "$(echo "$rows" | awk '$9 != 0 || $13 != 0' | wc -l)" -eq 0 ] || fail "W $n $op: #wrong"
      grep -q "^# $op: bus bandwidth ratio braid shm / limit" "$tmp/out" ||
        fail "W $n $op: no ratio table"
    done
    grep -q "the limit program implements all_reduce, all_gather, reduce_scatter and broadcast" \
      "$tmp/out" || fail "W $n: reduce / all_to_all / scatter not reported as skipped"
  done
  [ "$(ls /dev/shm | grep -c '^braid-limit-')" -eq "$before" ] || fail "a segment was left"
  "$braid" bench --nproc 2 -b 8 -e 8 -d bfloat16 --peer limit >"$tmp/out" 2>&1 ||
    fail "bf16: exit status $?"
  grep -q "the limit program reduces f32 sums only" "$tmp/out" || fail "bf16 not skipped by name"
  "$braid" bench --nproc 2 -b 8 -e 8 --peer mpi >"$tmp/out" 2>&1 && fail "--nproc --peer mpi ran"
  grep -q "MPI needs its own launcher" "$tmp/out" || fail "--nproc --peer mpi: message"
  ;;
mpi)
  (cd "$tmp" && timeout 300 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$braid" bench -b 8 -e 1K -c 1 --peer mpi) >"$tmp/out" 2>&1 || fail "exit status $?"
  [ "$(rows_of all_reduce "braid shm" | wc -l)" -eq 8 ] || fail "braid rows"
  [ "$(rows_of all_reduce "mpi" | wc -l)" -eq 8 ] || fail "mpi rows"
  [ "$(rows_of all_reduce "mpi" | awk '$9 != 0 || $13 != 0' | wc -l)" -eq 0 ] || fail "mpi #wrong"
  grep -q '^# all_reduce: bus bandwidth ratio braid shm / mpi' "$tmp/out" || fail "no ratio table"
  n=$(awk '/bus bandwidth ratio/ { on = 1; next } on && /^ / { n++ } END { print n + 0 }' "$tmp/out")
  [ "$n" -eq 8 ] || fail "ratio table: expected 8 rows, got $n"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
echo PASS

#!/usr/bin/env bash
# braidGetUniqueId / braidCommInitRank under `braid launch` (2 ranks, the id passed through a
# file in a temporary folder), then braidCommInitExplicit between two processes started here,
# without a launcher, on 127.0.0.1 and a port free a moment ago.
# Usage: run_unique_id_test.sh BRAID UNIQUE_ID_TEST WORK_DIR
set -u
braid=$1 prog=$2 work=$3
rm -rf "$work"
mkdir -p "$work/uid"

echo "== unique id under braid launch"
if ! timeout 150 "$braid" launch --nproc-per-node 2 --timeout 60 --grace-period 2 \
  "$prog" uid "$work/uid"; then
  echo "FAIL: the unique-id run failed" >&2
  exit 1
fi

echo "== braidCommInitExplicit, two processes"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 90 "$prog" explicit 127.0.0.1 "$port" 0 2 &
p0=$!
timeout 90 "$prog" explicit 127.0.0.1 "$port" 1 2 &
p1=$!
status=0
wait "$p0" || { echo "FAIL: rank 0 of the explicit run exited with $?" >&2; status=1; }
wait "$p1" || { echo "FAIL: rank 1 of the explicit run exited with $?" >&2; status=1; }
[[ $status -eq 0 ]] && echo "run_unique_id_test: both rendezvous passed"
exit "$status"

#!/usr/bin/env bash
# Runs mpi_backend_check under mpirun (docs/mpi.md, "Tests"):
#   run_mpi_backend.sh MPIRUN PROGRAM NPROC SCENARIO
# with the store variables braid needs (rank 0 serves the store in-process on a free loopback
# port; every rank gets the same token). conformance / mismatch must exit 0. timeout must end
# through rank 0's MPI_Abort(7) after every rank but the skipping one printed
# "timeout as expected" (with one rank there is nothing to skip: exit 0).
set -u
mpirun=$1 program=$2 n=$3 scenario=$4
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
export BRAID_STORE_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=60
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
  -x MASTER_ADDR -x MASTER_PORT -x BRAID_STORE_TOKEN -x BRAID_TIMEOUT \
  "$program" "$scenario" >"$out" 2>&1
status=$?
cat "$out"
if [ "$scenario" != timeout ] || [ "$n" -lt 2 ]; then
  [ "$status" -eq 0 ] || { echo "FAIL: mpirun exited with $status, expected 0"; exit 1; }
  exit 0
fi
# mpirun forwards output in fragments: two ranks' lines can share one line; count occurrences.
lines=$(grep -o "timeout as expected" "$out" | wc -l)
if [ "$status" -ne 7 ] || [ "$lines" -ne $((n - 1)) ]; then
  echo "FAIL: mpirun exited with $status (expected 7, rank 0's MPI_Abort) and $lines rank(s)" \
       "reported the timeout (expected $((n - 1)))"
  exit 1
fi
echo "timeout scenario: $lines rank(s) timed out as expected; job ended by MPI_Abort"

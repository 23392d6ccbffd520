#!/usr/bin/env bash
# Runs braid_mpi_compare under mpirun with the store variables braid needs (docs/faults.md):
#   run_mpi.sh MPIRUN PROGRAM NPROC
# Rank 0 serves the store in-process on a free loopback port; every rank gets the same token.
set -eu
mpirun=$1 program=$2 n=$3
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
export BRAID_STORE_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export BRAID_TIMEOUT=60
exec "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
  -x MASTER_ADDR -x MASTER_PORT -x BRAID_STORE_TOKEN -x BRAID_TIMEOUT "$program"

#!/usr/bin/env bash
# The transports as plugins of libbraid.so (docs/layout.md, "Components"), with plugin_test.c:
#   run_plugin_test.sh mpirun MPIRUN NPROC COMMAND...
#       COMMAND (plugin_test run mpi, or the Python module's test_plugins.py mpi) under mpirun,
#       with the store variables braid needs: the mpi backend's plugin is loaded (RTLD_GLOBAL,
#       Note [MPI's plugin is global]) and every rank prints "all_reduce over the mpi backend:
#       ok".
#   run_plugin_test.sh missing PROGRAM LIBBRAID BROKEN_PLUGIN WORK BACKEND COMPONENT
#       a copy of libbraid.so alone in WORK/lib (found first through LD_LIBRARY_PATH): shm works,
#       BACKEND fails naming WORK/lib/libbraid_COMPONENT.so and dlerror()'s "cannot open shared
#       object file"; then with BROKEN_PLUGIN (a plugin whose own library is not there) in
#       its place: the error names that library.
set -u
mode=$1
shift
if [[ $mode == mpirun ]]; then
  mpirun=$1 n=$2
  shift 2
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port BRAID_TIMEOUT=60
  export BRAID_STORE_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  out=$(timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
    -x MASTER_ADDR -x MASTER_PORT -x BRAID_STORE_TOKEN -x BRAID_TIMEOUT ${PYTHONPATH:+-x PYTHONPATH} \
    "$@" 2>&1)
  status=$?
  echo "$out"
  if [[ $status -eq 77 ]] && grep -q "^SKIP" <<<"$out"; then exit 77; fi  # ctest: skipped
  # mpirun forwards each rank's output in fragments, so two ranks' lines can share one line
  # ("...: okrank 1 of 2: ..."): count the occurrences, not the lines.
  lines=$(grep -o "all_reduce over the mpi backend: ok" <<<"$out" | wc -l)
  if [[ $status -ne 0 || $lines -ne $n ]]; then
    echo "FAIL: mpirun exited with $status and $lines of $n ranks reported ok" >&2
    exit 1
  fi
  echo "under mpirun: $n ranks ok"
  exit 0
fi

[[ $mode == missing ]] || { echo "usage: run_plugin_test.sh mpirun|missing ..." >&2; exit 2; }
program=$1 libbraid=$2 broken=$3 work=$4 backend=$5 component=$6
rm -rf "$work"
mkdir -p "$work/lib"
soname=$(readelf -d "$libbraid" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
cp "$(readlink -f "$libbraid")" "$work/lib/$soname"
plugin=$work/lib/libbraid_$component.so
# The program's RUNPATH names the build's lib/; LD_LIBRARY_PATH is searched before a RUNPATH.
readelf -d "$program" | grep -q "(RPATH)" &&
  { echo "FAIL: $program has a DT_RPATH, which LD_LIBRARY_PATH cannot override" >&2; exit 1; }

echo "== no plugin beside $work/lib/$soname"
LD_LIBRARY_PATH=$work/lib timeout 60 "$program" missing "$backend" "$plugin" \
  "is built but its plugin" "could not be loaded" "cannot open shared object file" || exit 1

echo "== a plugin whose own library is missing"
cp "$broken" "$plugin"
LD_LIBRARY_PATH=$work/lib timeout 60 "$program" missing "$backend" "$plugin" \
  "libbraid_test_absent_dep.so: cannot open shared object file" || exit 1
echo "run_plugin_test missing: both cases gave the error"

#!/usr/bin/env bash
# ctest multinode_bench_netns: issue 4's benchmark, bench/netns/run.sh, end to end on a small
# sweep with checking on, so that the measurement docs/performance.md quotes keeps running:
# ucx_perftest between the two namespaces (tag_bw, stream_bw, ucp_am_bw, tag_bw -e in two
# settings, tag_lat), then `braid bench --backend B --peer mpi` for B in ucx, mpi and hier with
# 1 and 2 ranks per node under one mpirun, then the summary. Passes when run.sh succeeds, every
# braid and OpenMPI result it recorded is correct (`-c 1`: no wrong element, out of place and in
# place), every perftest run left a figure, and the summary's point-to-point table has its
# ratios. It checks that the benchmark runs and computes right, never how fast: figures on a
# shared 2-vCPU machine are no test (docs/bench.md).
#   bash tests/multinode/bench_netns.sh BRAID_BINARY
# Exits 77 (skipped) without root, iproute2, mpirun or ucx_perftest.
set -u
here=$(cd "$(dirname "$0")" && pwd)
braid=${1:?usage: bench_netns.sh BRAID_BINARY}
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: needs root (ip netns) for bench/netns/run.sh" >&2
  exit 77
fi
for tool in ip mpirun ucx_perftest python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: bench/netns/run.sh needs $tool" >&2
    exit 77
  fi
done
work=$(mktemp -d /tmp/braid-bench-netns-XXXXXX)
trap 'rm -rf "$work"' EXIT

size=262144
NETNS_BACKENDS="ucx mpi hier" NETNS_PPN="1 2" NETNS_PT_SIZES=$size \
  NETNS_SWEEP="-b 8 -e $size -f 32 -n 2 -w 1 --repeats 1 -c 1" \
  timeout -k 10 300 bash "$here/../../bench/netns/run.sh" "$work/out" "$braid" >"$work/log" 2>&1
rc=$?
if [[ $rc -eq 77 ]]; then
  cat "$work/log" >&2
  exit 77
fi
if [[ $rc -ne 0 ]]; then
  echo "FAIL: bench/netns/run.sh exited $rc" >&2
  cat "$work/log" >&2
  exit 1
fi

python3 - "$work/out" "$size" <<'PY'
import csv, json, os, sys
out, size = sys.argv[1], int(sys.argv[2])
problems = []
ops = {"all_reduce", "all_gather", "reduce_scatter", "broadcast"}
for backend in ("ucx", "mpi", "hier"):
    for ppn in (1, 2):
        path = os.path.join(out, f"{backend}_ppn{ppn}.json")
        if not os.path.exists(path):
            problems.append(f"no {os.path.basename(path)}")
            continue
        data = json.load(open(path))
        seen = set()
        for r in data["results"]:
            seen.add(("mpi" if r["library"] == "mpi" else "braid", r["op"]))
            sizes = {row["size"] for row in r["rows"]}
            if size not in sizes:
                problems.append(f"{path}: {r['library']} {r['op']} has no {size} B row")
            for row in r["rows"]:
                for mode in ("out_of_place", "in_place"):
                    if row[mode]["wrong"] != 0:
                        problems.append(f"{path}: {r['library']} {r['op']} {row['size']} B "
                                        f"{mode}: wrong = {row[mode]['wrong']}")
        for lib in ("braid", "mpi"):
            missing = ops - {op for l, op in seen if l == lib}
            if missing:
                problems.append(f"{path}: no {lib} result for {sorted(missing)}")
tests = {r["test"]: r for r in csv.DictReader(open(os.path.join(out, "perftest.csv")))}
for test in ("tag_lat", "tag_bw", "stream_bw", "ucp_am_bw", "tag_bw-e", "tag_bw-e-copy"):
    if test not in tests:
        problems.append(f"perftest.csv: no {test} line")
    elif float(tests[test]["bw_overall_mibps"] if test != "tag_lat"
               else tests[test]["lat_typical_us"]) <= 0:
        problems.append(f"perftest.csv: {test} has no figure")
summary = open(os.path.join(out, "summary.md")).read()
label = f"{size // 1024}K"  # summarize.py's name for the size (a whole number of KiB here)
row = [l for l in summary.splitlines() if l.startswith(f"| {label} |")]
if len(row) != 1:
    problems.append(f"summary.md: no point-to-point row for {label}")
elif "| - |" in row[0]:
    problems.append(f"summary.md: a ratio is missing in {row[0]}")
if problems:
    print("FAIL: " + "\n      ".join(problems), file=sys.stderr)
    sys.exit(1)
print("bench_netns: run.sh ran 3 backends x 2 layouts and 6 perftest tests; all checked")
PY
status=$?
[[ $status -ne 0 ]] && cat "$work/log" >&2
exit $status

#!/usr/bin/env python3
"""Summary of bench/netns/run.sh's OUT_DIR as Markdown tables (docs/performance.md, "Across two
network namespaces"): the link's reference (ucx_perftest), then per braid backend and ranks per
node the bus bandwidth of braid and OpenMPI at the large sizes and the time of the smallest
message, then braid-ucx's point-to-point bandwidth (broadcast, 1 rank per node) against
ucx_perftest and OpenMPI, with how near UCX's own test in braid's settings comes to OpenMPI.
  python3 bench/netns/summarize.py OUT_DIR
"""
import csv
import glob
import json
import os
import re
import sys


def gb(mib_per_s):
    """ucx_perftest's MB/s are 2^20 bytes per second; braid bench's GB/s are 10^9."""
    return mib_per_s * 1048576 / 1e9


def human(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}"


def read_perftest(out):
    """Per kind of test ("" without -e, "-e", "-e-copy": run.sh's suffixes) and size the best
    (test, GB/s), and the latency test's (test, size, us)."""
    best, lat = {"": {}, "-e": {}, "-e-copy": {}}, None
    path = os.path.join(out, "perftest.csv")
    if not os.path.exists(path):
        return best, lat
    with open(path) as f:
        for r in csv.DictReader(f):
            size = int(r["size"])
            if r["test"].endswith("_lat"):
                lat = (r["test"], size, float(r["lat_typical_us"]))
                continue
            bw = gb(float(r["bw_overall_mibps"]))
            kind = re.search(r"(-e(-copy)?)?$", r["test"]).group(0)
            table = best[kind]
            if size not in table or bw > table[size][1]:
                table[size] = (r["test"], bw)
    return best, lat


def rows_by_size(result):
    return {row["size"]: row for row in result["rows"]}


def busbw(row, mode="out_of_place"):
    return row[mode]["busbw_gbps"] if row else None


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def config_table(runs, sizes):
    head = ["backend", "nodes x ranks", "op"]
    for s in sizes:
        head += [f"braid {human(s)}", f"MPI {human(s)}", f"ratio {human(s)}"]
    head += ["small size", "braid us", "MPI us"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, data in runs:
        libs = {}
        for r in data["results"]:
            libs.setdefault(r["op"], {})["mpi" if r["library"] == "mpi" else "braid"] = r
        for op, pair in libs.items():
            b, m = rows_by_size(pair.get("braid", {"rows": []})), rows_by_size(
                pair.get("mpi", {"rows": []}))
            ppn = int(re.search(r"ppn(\d+)$", name).group(1))
            cells = [data["backend"], f"{data['nranks'] // ppn}x{ppn}", op]
            for s in sizes:
                bb, mb = busbw(b.get(s)), busbw(m.get(s))
                cells += [fmt(bb), fmt(mb), fmt(ratio(bb, mb), ".2f")]
            small = min((s for s, row in b.items() if row["count"] > 0), default=None)
            bt = b[small]["out_of_place"]["time_us"] if small in b else None
            mt = m[small]["out_of_place"]["time_us"] if small in m else None
            cells += [human(small) if small else "-", fmt(bt, ".1f"), fmt(mt, ".1f")]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def p2p_table(runs, kinds):
    """braid ucx's broadcast with 1 rank per node (one message from node 0 to node 1) beside
    OpenMPI's MPI_Bcast from the same mpirun and ucx_perftest. In place is the like for like
    (no copy on the root). "perftest copy" is tag_bw -e in braid's default settings on tcp;
    perftest copy / OpenMPI is how near UCX itself came to OpenMPI with them."""
    head = ["size", "braid out of place", "braid in place", "OpenMPI in place",
            "best perftest", "perftest -e", "perftest copy", "braid in place / best perftest",
            "braid in place / perftest copy", "braid in place / OpenMPI",
            "perftest copy / OpenMPI"]
    lines = []
    for _, data in runs:
        if data["backend"] != "ucx" or data["nranks"] != 2:
            continue
        pair = {("mpi" if r["library"] == "mpi" else "braid"): rows_by_size(r)
                for r in data["results"] if r["op"] == "broadcast"}
        b, m = pair.get("braid", {}), pair.get("mpi", {})
        best = kinds[""]
        for s in sorted(best):
            bo, bi = busbw(b.get(s)), busbw(b.get(s), "in_place")
            mi = busbw(m.get(s), "in_place")
            pb = best[s][1]
            pe, pc = (kinds[k][s][1] if s in kinds[k] else None for k in ("-e", "-e-copy"))
            cells = [human(s), fmt(bo), fmt(bi), fmt(mi), f"{pb:.3f} ({best[s][0]})",
                     fmt(pe), fmt(pc), fmt(ratio(bi, pb), ".2f"), fmt(ratio(bi, pc), ".2f"),
                     fmt(ratio(bi, mi), ".2f"), fmt(ratio(pc, mi), ".2f")]
            lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + lines


def main(out):
    kinds, lat = read_perftest(out)
    best = kinds[""]
    print(f"# braid across two network namespaces: {out}\n")
    machine = os.path.join(out, "machine.txt")
    if os.path.exists(machine):
        print("```\n" + open(machine).read().rstrip() + "\n```\n")
    print("## Link reference: ucx_perftest (best of tag_bw, stream_bw, ucp_am_bw; GB/s = 1e9 B/s)\n")
    for size, (test, bw) in sorted(best.items()):
        print(f"- {human(size)}: {bw:.3f} GB/s ({test})")
    for kind, what in (("-e", "with peer error handling (-e, braid's tcp segments)"),
                       ("-e-copy", "the same in copy mode (UCX_ZCOPY_THRESH=inf), braid's default "
                                   "on tcp")):
        for size, (test, bw) in sorted(kinds[kind].items()):
            print(f"- {human(size)} {what}: {bw:.3f} GB/s ({test})")
    if lat:
        print(f"- {lat[0]} {lat[1]} B: {lat[2]:.2f} us (one way, typical)")
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "*_ppn*.json"))):
        name = os.path.basename(path)[:-5]
        with open(path) as f:
            runs.append((name, json.load(f)))
    if not runs:
        print("\nNo braid bench results.")
        return
    all_sizes = sorted({row["size"] for _, d in runs for r in d["results"] for row in r["rows"]})
    sizes = [s for s in sorted(best) if s in all_sizes] or all_sizes[-2:]
    print("\n## Bus bandwidth (GB/s, out of place) and small-message time; ratio = braid / MPI\n")
    print("\n".join(config_table(runs, sizes)))
    table = p2p_table(runs, kinds)
    if table:
        print("\n## braid ucx point to point (broadcast, 2 nodes x 1 rank) against ucx_perftest "
              "and OpenMPI (busbw GB/s)\n")
        print("\n".join(table))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py OUT_DIR")
    main(sys.argv[1])

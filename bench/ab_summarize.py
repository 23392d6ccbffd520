#!/usr/bin/env python3
"""Medians over the rounds of bench/ab_mpirun.sh: us per call for braid before / after, OpenMPI
and the limit program (both from the 'after' jobs), out of place (in place after the slash).
Usage: ab_summarize.py FOLDER"""
import collections, glob, os, re, statistics, sys

if len(sys.argv) != 2:
    sys.exit("usage: ab_summarize.py FOLDER (the OUT of bench/ab_mpirun.sh)")
here = sys.argv[1]
t = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(here, "np*_r*.txt"))):
    np_, which = re.match(r"np(\d+)_(\w+)_r\d+\.txt", os.path.basename(f)).groups()
    op = lib = None
    for line in open(f):
        m = re.match(r"# Collective test: (\w+) \((.+)\)", line)
        if m:
            op, lib = m.groups()
            continue
        p = line.split()
        if line.startswith("#") or len(p) < 13 or op is None:
            continue
        key = "braid " + which if lib == "braid shm" else lib + " " + which
        for place, col in (("oop", 5), ("ip", 9)):
            t[(int(np_), op, int(p[0]), key, place)].append(float(p[col]))

med = lambda k: statistics.median(t[k]) if t.get(k) else float("nan")
print("ranks op bytes | braid before | braid after | before/after | limit | limit/after | "
      "OpenMPI | OpenMPI/after   (us per call, median of rounds; out of place / in place)")
for np_, op, size in sorted({k[:3] for k in t}):
    cells = []
    for lib in ("braid before", "braid after"):
        cells.append("/".join(f"{med((np_, op, size, lib, pl)):.2f}" for pl in ("oop", "ip")))
    ratio = lambda a, b: "/".join(
        f"{med((np_, op, size, a, pl)) / med((np_, op, size, b, pl)):.2f}" for pl in ("oop", "ip"))
    cells.append(ratio("braid before", "braid after"))
    for peer in ("limit after", "mpi after"):
        cells.append("/".join(f"{med((np_, op, size, peer, pl)):.2f}" for pl in ("oop", "ip")))
        cells.append(ratio(peer, "braid after"))
    print(np_, op, size, "|", " | ".join(cells))

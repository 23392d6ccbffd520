#!/usr/bin/env python3
"""braid / OpenMPI and braid / limit speed (bus bandwidth ratios, > 1: braid faster) from the
ratio tables that braid bench prints, for w2.txt, w4.txt and w8.txt."""
import os, re, sys
here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for name in ("w2.txt", "w4.txt", "w8.txt"):
    path = os.path.join(here, name)
    if not os.path.exists(path):
        continue
    rows = {}
    op = peer = None
    for line in open(path):
        m = re.match(r"# (\w+): bus bandwidth ratio braid shm / (\w+)", line)
        if m:
            op, peer = m.groups()
            continue
        p = line.split()
        if op and len(p) == 8 and not line.startswith("#"):
            rows.setdefault((op, int(p[0])), {})[peer] = (p[4], p[7])
    print(f"== {name}: size | vs OpenMPI oop ip | vs limit oop ip")
    below = []
    for (op, size), r in sorted(rows.items()):
        mpi, lim = r.get("mpi", ("-", "-")), r.get("limit", ("-", "-"))
        print(f"{op:15s} {size:>9d} | {mpi[0]:>6s} {mpi[1]:>6s} | {lim[0]:>6s} {lim[1]:>6s}")
        for v in mpi:
            try:
                if float(v) < 1.0:
                    below.append(f"{op} {size} {v}")
            except ValueError:
                pass
    print("below OpenMPI:", ", ".join(below) if below else "none")

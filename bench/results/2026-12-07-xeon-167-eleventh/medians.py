#!/usr/bin/env python3
"""Per cell (ranks, op, size, out of place / in place): the median over several sets of the
same tables of braid / OpenMPI and braid / limit (bus bandwidth ratios from one mpirun each, > 1:
braid faster), with the lowest; then the cells whose median is below OpenMPI's.
Usage: medians.py SET_DIR... (each with the w2.txt, w4.txt, w8.txt that braid bench printed)"""
import collections, os, re, statistics, sys

cells = collections.defaultdict(list)  # (name, op, size, peer, placement) -> ratios
for d in sys.argv[1:]:
    for name in ("w2.txt", "w4.txt", "w8.txt"):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            continue
        op = peer = None
        for line in open(path):
            m = re.match(r"# (\w+): bus bandwidth ratio braid shm / (\w+)", line)
            if m:
                op, peer = m.groups()
                continue
            p = line.split()
            if op and len(p) == 8 and not line.startswith("#"):
                for placement, v in (("oop", p[4]), ("ip", p[7])):
                    try:
                        cells[(name, op, int(p[0]), peer, placement)].append(float(v))
                    except ValueError:
                        pass
below = []
for name in ("w2.txt", "w4.txt", "w8.txt"):
    keys = sorted({k[1:3] for k in cells if k[0] == name})
    if not keys:
        continue
    print(f"== {name}: op size | vs OpenMPI median (lowest) oop, ip | vs limit median (lowest) oop, ip")
    for op, size in keys:
        out = []
        for peer in ("mpi", "limit"):
            for placement in ("oop", "ip"):
                v = cells.get((name, op, size, peer, placement), [])
                if not v:
                    out.append("     -       ")
                    continue
                med = statistics.median(v)
                out.append(f"{med:6.2f} ({min(v):5.2f})")
                if peer == "mpi" and med < 1.0:
                    below.append(f"{name[:2]} {op} {size} {placement} {med:.2f}")
        print(f"{op:15s} {size:>9d} | {out[0]} {out[1]} | {out[2]} {out[3]}")
print("median below OpenMPI: " + (", ".join(below) if below else "none"))

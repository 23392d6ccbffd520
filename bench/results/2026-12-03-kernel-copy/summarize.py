# Summarizes the np*_kc*_round*.txt tables: braid staged (kc 0) and kernel copy (kc 64K) busbw
# beside OpenMPI's from the same interleaved run, and the ratios. python3 summarize.py NP
import collections, glob, re, sys
np_ = sys.argv[1] if len(sys.argv) > 1 else "2"
rows = collections.defaultdict(list)
for f in sorted(glob.glob(f"np{np_}_kc*_round*.txt")):
    kc = re.search(r"kc(\w+)_round", f).group(1)
    op = lib = None
    for line in open(f):
        m = re.match(r"# Collective test: (\w+) \((.+)\)", line)
        if m:
            op, lib = m.group(1), m.group(2)
            continue
        p = line.split()
        if op and len(p) >= 13 and p[0].isdigit():
            rows[(op, int(p[0]), kc, "mpi" if lib == "mpi" else "braid")].append((float(p[7]), float(p[11])))
fmt = lambda l: ", ".join(f"{a:.1f}/{b:.1f}" for a, b in l)
rat = lambda a, b, i: ", ".join(f"{x[i] / y[i]:.2f}" for x, y in zip(a, b))
print(f"| op | size | staged | kc | OpenMPI (kc runs) | x MPI staged | x MPI kc (in place) |")
print("|---|---|---|---|---|---|---|")
for op in ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]:
    for size in sorted({k[1] for k in rows if k[0] == op}):
        s, k = rows[(op, size, "0", "braid")], rows[(op, size, "64K", "braid")]
        m0, m1 = rows[(op, size, "0", "mpi")], rows[(op, size, "64K", "mpi")]
        name = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {op} | {name} | {fmt(s)} | {fmt(k)} | {fmt(m1)} | {rat(s, m0, 0)} | {rat(k, m1, 0)} ({rat(k, m1, 1)}) |")

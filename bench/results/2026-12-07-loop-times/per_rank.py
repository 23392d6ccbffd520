"""Median and range of each rank's loop time (us per loop, not per call) from --loop-times
files: per library, size and placement, one line per rank."""
import collections
import statistics
import sys

loops = collections.defaultdict(list)
for path in sys.argv[1:]:
    rank = path.rsplit(".rank", 1)[1]
    for line in open(path):
        lib, op, size, place, _, calls, us = line.rstrip("\n").split("\t")
        loops[(lib, op, int(size), place, int(rank))].append(float(us) * int(calls))
for key in sorted(loops):
    v = loops[key]
    print("%-10s %-10s %5d %-12s rank %d: median %6.1f us a loop, min %6.1f, max %6.1f" %
          (key + (statistics.median(v), min(v), max(v))))

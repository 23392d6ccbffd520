"""A transport through its plugin from Python (docs/layout.md, "Plugins of libbraid.so").

    test_plugins.py BACKEND     (under braid launch for ucx, under mpirun for mpi)

The module links libbraid.so, which Python loaded RTLD_LOCAL; libbraid.so loads the backend's
plugin from its own folder. Checks the group runs on BACKEND, an all_reduce against its closed
form, and that the plugin and its library are mapped after, not before. Exits 77 (ctest:
skipped) when numpy cannot be imported.
"""
import os
import sys

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import numpy ({e}); apt-get install python3-numpy")
    sys.exit(77)

import braid  # noqa: E402

OUTSIDE = {"mpi": "libmpi.so", "ucx": "libucp.so", "hier": "libucp.so"}


def mapped():
    with open("/proc/self/maps") as f:
        return {os.path.basename(line.split()[-1]) for line in f if "/" in line}


backend = sys.argv[1]
plugin = "libbraid_comm_ucx.so" if backend in ("ucx", "hier") else f"libbraid_comm_{backend}.so"
assert plugin not in mapped(), f"{plugin} is loaded before any group asked for {backend}"
group = braid.init(backend)
assert group.backend == backend, f"the group runs on {group.backend}, expected {backend}"
n = group.size
x = np.arange(4099, dtype=np.int64) + (group.rank + 1) * (1 << 33)
group.all_reduce(x)
want = np.arange(4099, dtype=np.int64) * n + n * (n + 1) // 2 * (1 << 33)
assert (x == want).all(), f"all_reduce: {x[:4]} != {want[:4]}"
now = mapped()
assert plugin in now, f"the {backend} group runs but {plugin} is not mapped"
outside = OUTSIDE.get(backend)
assert outside is None or any(m.startswith(outside) for m in now), f"{outside} is not mapped"
print(f"rank {group.rank} of {n}: all_reduce over the {backend} backend: ok", flush=True)

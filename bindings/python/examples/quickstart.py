# braid from Python in one page: every rank adds its number, all_reduce sums them.
# Run: braid launch --nproc-per-node 2 /usr/bin/python3 quickstart.py
import braid
import numpy as np
import torch

pg = braid.init()  # from the launcher's environment
x = torch.full((1 << 20,), float(pg.rank))
pg.all_reduce(x)  # in place on torch's memory, the GIL released
out = np.empty((pg.size, 4), np.float32)
pg.all_gather_into(out, np.full(4, pg.rank, np.float32))
w = pg.broadcast(x, root=0, async_op=True)  # a braid.Work
w.wait()
print(f"rank {pg.rank} of {pg.size}: sum of ranks {x[0].item():g}, gathered {out[:, 0]}")
assert x[0].item() == sum(range(pg.size)) and (out[:, 0] == np.arange(pg.size)).all()

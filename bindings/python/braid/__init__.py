# SPDX-License-Identifier: Apache-2.0
"""braid from Python: collectives, ZeRO sharding and safetensors I/O on DLPack arrays.

    import braid, numpy as np
    pg = braid.init()                      # from `braid launch` / torchrun / mpirun variables
    x = np.ones(4, dtype=np.float32)
    pg.all_reduce(x)                       # in place, no copy: x == pg.size everywhere

Arrays go in through DLPack (numpy arrays, torch CPU tensors, torch.utils.dlpack capsules,
braid.Tensor) and braid's own tensors come out as braid.Tensor, which numpy.from_dlpack and
torch.utils.dlpack.from_dlpack view without a copy. Errors are braid.BraidError subclasses
that also derive from the matching builtin (InvalidArgumentError is a ValueError,
TimeoutError a TimeoutError, ...). docs/python.md has the whole API.
"""

from ._braid import (
    AdamW,
    BraidError,
    CorruptDataError,
    FlatParameters,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotSupportedError,
    OutOfMemoryError,
    OutOfRangeError,
    PeerLostError,
    ProcessGroup,
    Tensor,
    TimeoutError,
    Work,
    __version__,
    from_dlpack,
    init,
    load_safetensors,
    save_safetensors,
    zeros,
)



def init_torch_distributed(pg, backend="gloo", timeout_s=60.0):
    """torch.distributed beside braid in the same processes (a peer to compare with, or
    torch code next to braid's): rank 0 of `pg` serves a torch TCPStore on a free port of
    127.0.0.1 and braid broadcasts the port, since `braid launch`'s MASTER_PORT is braid's own
    store. One node only (the store is on loopback). Calls
    torch.distributed.init_process_group(backend, rank=pg.rank, world_size=pg.size)."""
    from datetime import timedelta

    import numpy as np
    import torch.distributed as dist

    port = np.zeros(1, np.int64)
    store = None
    wait = timedelta(seconds=timeout_s)
    if pg.rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, pg.size, True, wait, wait_for_workers=False)
        port[0] = store.port
    pg.broadcast(port, root=0)
    if pg.rank != 0:
        store = dist.TCPStore("127.0.0.1", int(port[0]), pg.size, False, wait)
    dist.init_process_group(backend, store=store, rank=pg.rank, world_size=pg.size)


# braid.TimeoutError derives from the builtin TimeoutError; it is left out of `import *` so
# that it does not shadow the builtin in the importer's namespace.
__all__ = [
    "AdamW",
    "BraidError",
    "CorruptDataError",
    "FlatParameters",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "NotSupportedError",
    "OutOfMemoryError",
    "OutOfRangeError",
    "PeerLostError",
    "ProcessGroup",
    "Tensor",
    "Work",
    "from_dlpack",
    "init",
    "init_torch_distributed",
    "load_safetensors",
    "save_safetensors",
    "zeros",
]

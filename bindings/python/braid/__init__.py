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
    "load_safetensors",
    "save_safetensors",
    "zeros",
]

"""Every collective of braid.ProcessGroup on numpy arrays and on torch tensors, exact values,
blocking and async, and a timeout, under a launcher:

    braid launch --nproc-per-node 4 /usr/bin/python3 test_collectives.py

Each rank checks its own results; a failed check ends the rank with an error, and the
launcher then stops the job with a non-zero status. Exits 77 (ctest: skipped) when numpy or
torch cannot be imported.
"""
import math
import sys
import time

try:
    import numpy as np
    import torch
    import torch.utils.dlpack as tdl
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import numpy and torch ({e}); "
          "apt-get install python3-numpy python3-torch")
    sys.exit(77)

import braid


class Numpy:
    name = "numpy"

    @staticmethod
    def full(shape, value, dtype="f32"):
        return np.full(shape, value, dtype={"f32": np.float32, "i64": np.int64}[dtype])

    @staticmethod
    def arange(n, dtype="f32"):
        return np.arange(n).astype({"f32": np.float32, "i64": np.int64}[dtype])

    @staticmethod
    def values(x):
        return np.asarray(x).reshape(-1).tolist()


class Torch:
    name = "torch"

    @staticmethod
    def full(shape, value, dtype="f32"):
        return torch.full(shape, value, dtype={"f32": torch.float32, "i64": torch.int64}[dtype])

    @staticmethod
    def arange(n, dtype="f32"):
        return torch.arange(n).to({"f32": torch.float32, "i64": torch.int64}[dtype])

    @staticmethod
    def values(x):
        return x.reshape(-1).tolist()


def check(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got[:8]}... expected {want[:8]}...")


def test_all_reduce(pg, fw):
    n, me = pg.size, pg.rank
    expected = {"sum": n * (n + 1) / 2, "prod": float(math.factorial(n)), "min": 1.0,
                "max": float(n), "avg": (n + 1) / 2}
    for op, want in expected.items():
        x = fw.full((3, 7), me + 1.0)
        pg.all_reduce(x, op=op)
        check(fw.values(x), [want] * 21, f"all_reduce {op}")
    x = fw.arange(1001, "i64") * (me + 1)
    pg.all_reduce(x)
    check(fw.values(x), [k * n * (n + 1) // 2 for k in range(1001)], "all_reduce i64 sum")


def test_broadcast_reduce(pg, fw):
    n, me = pg.size, pg.rank
    x = fw.arange(257) + 1000 * me
    pg.broadcast(x, root=n - 1)
    check(fw.values(x), [float(k + 1000 * (n - 1)) for k in range(257)], "broadcast")
    x = fw.arange(33) * (me + 1)
    pg.reduce(x, root=0, op="max")
    if me == 0:
        check(fw.values(x), [float(k * n) for k in range(33)], "reduce max")


def test_all_gather_reduce_scatter(pg, fw):
    n, me = pg.size, pg.rank
    k = 5
    out = fw.full((n, k), -1.0)
    pg.all_gather_into(out, fw.arange(k) + 10 * me)
    check(fw.values(out), [float(10 * r + j) for r in range(n) for j in range(k)],
          "all_gather_into [n, k]")
    flat = fw.full((n * k,), -1.0)  # the [n * k] spelling of the same output
    pg.all_gather_into(flat, fw.arange(k) + 10 * me)
    check(fw.values(flat), [float(10 * r + j) for r in range(n) for j in range(k)],
          "all_gather_into [n * k]")
    x = fw.arange(n * k) + 1000 * me  # block r: r * k .. r * k + k - 1
    out = fw.full((k,), -1.0)
    pg.reduce_scatter_from(out, x)
    base = 1000 * n * (n - 1) / 2
    check(fw.values(out), [base + n * (me * k + j) for j in range(k)], "reduce_scatter_from sum")
    pg.reduce_scatter_from(out, x, op="min")
    check(fw.values(out), [float(me * k + j) for j in range(k)], "reduce_scatter_from min")


def test_all_to_all(pg, fw):
    n, me = pg.size, pg.rank
    k = 3
    x = fw.arange(n * k) + 100 * me  # block r goes to rank r
    out = fw.full((n * k,), -1.0)
    pg.all_to_all(out, x)
    check(fw.values(out), [float(100 * r + me * k + j) for r in range(n) for j in range(k)],
          "all_to_all")
    # Rows split as torch's all_to_all_single: rank me sends r + 1 rows to rank r.
    rows_in = [r + 1 for r in range(n)]
    x = fw.full((sum(rows_in), 2), float(me))
    out = fw.full((n * (me + 1), 2), -1.0)
    pg.all_to_all(out, x, output_splits=[me + 1] * n, input_splits=rows_in)
    check(fw.values(out), [float(r) for r in range(n) for _ in range(2 * (me + 1))],
          "all_to_all splits")


def test_send_recv(pg, fw):
    n, me = pg.size, pg.rank
    right, left = (me + 1) % n, (me - 1) % n
    x = fw.arange(17) + 100 * me
    got = fw.full((17,), -1.0)
    if me % 2 == 0:  # blocking calls in an order that cannot wait on each other
        pg.send(x, right, tag=7)
        pg.recv(got, left, tag=7)
    else:
        pg.recv(got, left, tag=7)
        pg.send(x, right, tag=7)
    check(fw.values(got), [float(k + 100 * left) for k in range(17)], "send / recv")
    got = fw.full((17,), -1.0)
    works = [pg.send(x, right, tag=8, async_op=True), pg.recv(got, left, tag=8, async_op=True)]
    for w in works:
        assert w.wait() is True
        assert w.is_completed()
    check(fw.values(got), [float(k + 100 * left) for k in range(17)], "async send / recv")


def test_async(pg, fw):
    n, me = pg.size, pg.rank
    xs = [fw.full((4096,), float(me + i)) for i in range(3)]
    works = [pg.all_reduce(x, async_op=True) for x in xs]
    out = fw.full((n, 2), -1.0)
    works.append(pg.all_gather_into(out, fw.full((2,), float(me)), async_op=True))
    works.append(pg.barrier(async_op=True))
    for w in works:
        assert isinstance(w, braid.Work)
        assert w.wait() is True
    for i, x in enumerate(xs):
        check(fw.values(x), [float(n * (n - 1) / 2 + n * i)] * 4096, f"async all_reduce {i}")
    check(fw.values(out), [float(r) for r in range(n) for _ in range(2)], "async all_gather_into")
    # A temporary whose only reference is braid's: the Work keeps it alive until it finished.
    w = pg.all_reduce(fw.full((1 << 16,), 1.0), async_op=True)
    assert w.wait() is True


def test_capsule(pg):
    x = torch.full((9,), float(pg.rank))
    pg.all_reduce(tdl.to_dlpack(x))  # torch 1.13's explicit capsule
    n = pg.size
    check(x.tolist(), [n * (n - 1) / 2] * 9, "all_reduce on a capsule")


def test_shared_memory_tensor(pg):
    t = pg.empty_shared((64,), "f32")
    v = tdl.from_dlpack(t)
    v.fill_(pg.rank + 1.0)
    pg.all_reduce(t)
    check(v.tolist(), [pg.size * (pg.size + 1) / 2] * 64, "all_reduce on empty_shared")


def test_argument_errors(pg):
    # Checked before anything is sent, on every rank alike: the group stays usable.
    try:
        pg.all_gather_into(np.zeros(3, np.float32), np.zeros(2, np.float32))
    except braid.InvalidArgumentError as e:
        assert "all_gather_into" in str(e), str(e)
    else:
        raise AssertionError("all_gather_into with a wrong output shape did not raise")
    pg.barrier()


def test_subgroup(pg):
    n, me = pg.size, pg.rank
    evens = pg.new_group(list(range(0, n, 2)))
    if me % 2 == 0:
        assert evens.rank == me // 2 and evens.size == (n + 1) // 2
        x = np.full(4, float(me), np.float32)
        evens.all_reduce(x)
        check(x.tolist(), [float(sum(range(0, n, 2)))] * 4, "subgroup all_reduce")
    else:
        assert evens.rank == -1
        try:
            evens.barrier()
        except braid.InvalidArgumentError:
            pass
        else:
            raise AssertionError("a collective on a group this rank is not in did not raise")


def test_init_again(pg):
    # Note [One world group]: the same arguments give the same group; others are refused.
    assert braid.init() is pg
    try:
        braid.init(timeout=7)
    except braid.InvalidArgumentError as e:
        assert "world group exists" in str(e), str(e)
    else:
        raise AssertionError("braid.init with another timeout did not raise")


def test_timeout(pg):
    # On a group of its own (a timed-out group is not usable again): rank 0 waits for a
    # message rank 1 never sends.
    g = pg.new_group(list(range(pg.size)))
    if pg.rank == 0:
        t0 = time.monotonic()
        try:
            g.recv(np.zeros(4, np.float32), 1, tag=99, timeout=0.5)
        except braid.TimeoutError as e:
            elapsed = time.monotonic() - t0
            assert isinstance(e, TimeoutError)
            assert "recv" in str(e), str(e)
            assert elapsed < 10, f"the timeout of 0.5 s took {elapsed:.1f} s"
        else:
            raise AssertionError("recv with nobody sending did not time out")
    pg.barrier()


def main():
    pg = braid.init()
    for fw in (Numpy, Torch):
        for test in (test_all_reduce, test_broadcast_reduce, test_all_gather_reduce_scatter,
                     test_all_to_all, test_send_recv, test_async):
            test(pg, fw)
            if pg.rank == 0:
                print(f"ok {test.__name__} ({fw.name}, {pg.size} ranks)")
    for test in (test_capsule, test_shared_memory_tensor, test_argument_errors, test_subgroup,
                 test_init_again, test_timeout):
        test(pg)
        if pg.rank == 0:
            print(f"ok {test.__name__} ({pg.size} ranks)")
    print(f"rank {pg.rank}: all collectives passed")


if __name__ == "__main__":
    main()

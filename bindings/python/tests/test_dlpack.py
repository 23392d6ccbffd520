"""braid's Python module in one process: tensors through DLPack both ways without a copy,
dtypes, strides, lifetimes, errors, safetensors and one-rank collectives.

    PYTHONPATH=<build>/bindings/python /usr/bin/python3 test_dlpack.py

Non-contiguous arrays: braid.from_dlpack keeps their strides (a strided braid.Tensor);
collectives refuse them with InvalidArgumentError ("must be contiguous"); save_safetensors
writes them in C order; negative strides are refused. Exits 77 (ctest: skipped) when numpy
or torch cannot be imported.
"""
import gc
import os
import sys
import tempfile
import unittest
import weakref

try:
    import numpy as np
    import torch
    import torch.utils.dlpack as tdl
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import numpy and torch ({e}); "
          "apt-get install python3-numpy python3-torch")
    sys.exit(77)

import braid

NUMPY_DTYPES = {np.float32: "f32", np.float64: "f64", np.float16: "f16", np.int64: "i64",
                np.int32: "i32", np.uint8: "u8"}
TORCH_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
                torch.uint8: "u8"}


def np_ptr(a):
    return a.__array_interface__["data"][0]


class NumpyRoundTrip(unittest.TestCase):
    def test_dtypes_zero_copy_both_ways(self):
        for dt, name in NUMPY_DTYPES.items():
            with self.subTest(dtype=name):
                a = np.arange(12).reshape(3, 4).astype(dt)
                t = braid.from_dlpack(a)
                self.assertEqual(t.shape, (3, 4))
                self.assertEqual(t.dtype, name)
                self.assertEqual(t.strides, (4, 1))
                self.assertTrue(t.is_contiguous())
                v = np.asarray(t)  # writable view (array interface)
                r = np.from_dlpack(t)  # numpy 1.x makes DLPack arrays read-only
                self.assertEqual(np_ptr(v), np_ptr(a))
                self.assertEqual(np_ptr(r), np_ptr(a))
                self.assertEqual(v.dtype, a.dtype)
                v[2, 3] = 7  # braid's view -> the producer
                self.assertEqual(a[2, 3], 7)
                a[0, 1] = 5  # the producer -> braid's views
                self.assertEqual(v[0, 1], 5)
                self.assertEqual(r[0, 1], 5)

    def test_braid_memory_to_numpy_and_torch(self):
        z = braid.zeros((2, 3), "f64")
        n = np.asarray(z)
        t = tdl.from_dlpack(z)
        n[1, 2] = 4.5
        self.assertEqual(t[1, 2].item(), 4.5)
        t[0, 0] = -1
        self.assertEqual(n[0, 0], -1)
        del z
        gc.collect()
        self.assertEqual(n[1, 2], 4.5)  # the views keep braid's storage alive
        self.assertEqual(t.sum().item(), 3.5)

    def test_producer_lives_while_braid_holds_it(self):
        a = np.ones(1000, np.float32)
        alive = weakref.ref(a)
        t = braid.from_dlpack(a)
        del a
        gc.collect()
        self.assertIsNotNone(alive(), "braid's tensor must keep the numpy array alive")
        self.assertEqual(float(np.asarray(t).sum()), 1000.0)
        del t
        gc.collect()
        self.assertIsNone(alive(), "the array must be released with braid's last reference")

    def test_strided_view_kept(self):
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        t = braid.from_dlpack(a[:, ::2])
        self.assertEqual(t.shape, (3, 2))
        self.assertEqual(t.strides, (4, 2))
        self.assertFalse(t.is_contiguous())
        np.testing.assert_array_equal(np.asarray(t), a[:, ::2])

    def test_negative_strides_refused(self):
        with self.assertRaises(braid.InvalidArgumentError) as cm:
            braid.from_dlpack(np.arange(4.0)[::-1])
        self.assertIn("is negative", str(cm.exception))


class TorchRoundTrip(unittest.TestCase):
    def test_dtypes_zero_copy_both_ways(self):
        for dt, name in TORCH_DTYPES.items():
            for via in ("__dlpack__", "capsule"):
                with self.subTest(dtype=name, via=via):
                    x = torch.arange(12).reshape(3, 4).to(dt)
                    t = braid.from_dlpack(x if via == "__dlpack__" else tdl.to_dlpack(x))
                    self.assertEqual(t.shape, (3, 4))
                    self.assertEqual(t.dtype, name)
                    y = tdl.from_dlpack(t)
                    self.assertEqual(y.dtype, dt)
                    self.assertEqual(y.data_ptr(), x.data_ptr())
                    y[1, 1] = 9
                    self.assertEqual(x[1, 1].item(), 9)
                    x[2, 0] = 3
                    self.assertEqual(y[2, 0].item(), 3)

    def test_capsule_consumed_once(self):
        cap = tdl.to_dlpack(torch.zeros(4))
        braid.from_dlpack(cap)
        with self.assertRaises(braid.InvalidArgumentError) as cm:
            braid.from_dlpack(cap)
        self.assertIn("used_dltensor", str(cm.exception))

    def test_bf16_braid_to_torch(self):
        x = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
        t = braid.from_dlpack(x)
        self.assertEqual(t.dtype, "bf16")
        y = tdl.from_dlpack(t)
        self.assertTrue(torch.equal(x, y))
        with self.assertRaises(braid.NotSupportedError):  # numpy has no bf16
            np.asarray(t)


class Errors(unittest.TestCase):
    def test_hierarchy(self):
        pairs = [(braid.InvalidArgumentError, ValueError), (braid.OutOfRangeError, IndexError),
                 (braid.NotSupportedError, NotImplementedError), (braid.IoError, OSError),
                 (braid.CorruptDataError, ValueError), (braid.TimeoutError, TimeoutError),
                 (braid.PeerLostError, ConnectionError), (braid.OutOfMemoryError, MemoryError),
                 (braid.InternalError, RuntimeError)]
        for cls, builtin in pairs:
            self.assertTrue(issubclass(cls, braid.BraidError))
            self.assertTrue(issubclass(cls, builtin))

    def test_not_an_array(self):
        with self.assertRaises(ValueError) as cm:
            braid.from_dlpack([1, 2, 3])
        self.assertIsInstance(cm.exception, braid.InvalidArgumentError)
        self.assertEqual(cm.exception.kind, "invalid argument")
        self.assertIn("'list'", str(cm.exception))
        self.assertIn("__dlpack__", str(cm.exception))

    def test_unsupported_dtype(self):
        with self.assertRaises(NotImplementedError) as cm:
            braid.from_dlpack(np.ones(3, np.complex64))
        self.assertIsInstance(cm.exception, braid.NotSupportedError)
        self.assertIn("DLPack data type {code 5 (complex), bits 64, lanes 1}", str(cm.exception))

    def test_fp8_has_no_dlpack_code(self):
        t = braid.zeros(4, "f8e4m3")
        with self.assertRaises(braid.NotSupportedError) as cm:
            tdl.from_dlpack(t)
        self.assertIn("fp8", str(cm.exception))

    def test_bad_dtype_name(self):
        with self.assertRaises(braid.InvalidArgumentError):
            braid.zeros(2, "float128")

    def test_missing_file(self):
        with self.assertRaises(OSError) as cm:
            braid.load_safetensors("/nonexistent/x.safetensors")
        self.assertIsInstance(cm.exception, braid.IoError)
        self.assertIn("/nonexistent/x.safetensors", str(cm.exception))

    def test_corrupt_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.safetensors")
            with open(path, "wb") as f:
                f.write((1 << 40).to_bytes(8, "little") + b"{}")
            with self.assertRaises(braid.CorruptDataError) as cm:
                braid.load_safetensors(path)
            self.assertIn(path, str(cm.exception))


class Safetensors(unittest.TestCase):
    def test_round_trip_and_interop(self):
        from safetensors import safe_open
        from safetensors.torch import load_file
        w = torch.randn(3, 5, dtype=torch.float32, requires_grad=True)  # read: detached
        h = torch.randn(4, dtype=torch.bfloat16)
        ids = np.arange(6, dtype=np.int64).reshape(2, 3)
        strided = np.arange(20, dtype=np.float32).reshape(4, 5)[:, 1::2]  # written in C order
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.safetensors")
            braid.save_safetensors(path, {"w": w, "h": h, "ids": ids, "s": strided},
                                   metadata={"format": "pt"})
            loaded = braid.load_safetensors(path)
            self.assertEqual(list(loaded), ["w", "h", "ids", "s"])
            self.assertTrue(torch.equal(tdl.from_dlpack(loaded["w"]), w.detach()))
            self.assertTrue(torch.equal(tdl.from_dlpack(loaded["h"]), h))
            np.testing.assert_array_equal(np.asarray(loaded["ids"]), ids)
            np.testing.assert_array_equal(np.asarray(loaded["s"]), strided)
            theirs = load_file(path)  # the safetensors package reads braid's file
            self.assertTrue(torch.equal(theirs["h"], h))
            self.assertTrue(torch.equal(theirs["s"], torch.from_numpy(strided.copy())))
            with safe_open(path, framework="pt") as f:
                self.assertEqual(f.metadata(), {"format": "pt"})


class OneRankGroup(unittest.TestCase):
    """Outside a launcher braid.init() gives a one-rank group: the argument checks run."""

    @classmethod
    def setUpClass(cls):
        cls.pg = braid.init()

    def test_group(self):
        self.assertEqual((self.pg.rank, self.pg.size, self.pg.backend), (0, 1, "shm"))

    def test_all_reduce_in_place(self):
        x = torch.arange(5, dtype=torch.float32)
        self.assertIsNone(self.pg.all_reduce(x, op="max"))
        self.assertTrue(torch.equal(x, torch.arange(5, dtype=torch.float32)))
        a = np.full(3, 4.0, np.float32)
        w = self.pg.all_reduce(a, op="avg", async_op=True)
        self.assertTrue(w.wait())
        self.assertTrue(w.is_completed())
        np.testing.assert_array_equal(a, np.full(3, 4.0, np.float32))

    def test_non_contiguous_refused(self):
        a = np.zeros((4, 4), np.float32)
        with self.assertRaises(braid.InvalidArgumentError) as cm:
            self.pg.all_reduce(a[:, :2])
        self.assertIn("must be contiguous", str(cm.exception))

    def test_bad_op(self):
        with self.assertRaises(ValueError) as cm:
            self.pg.all_reduce(np.zeros(2, np.float32), op="mean")
        self.assertIn("op 'mean' is not a reduction", str(cm.exception))

    def test_root_out_of_range(self):
        with self.assertRaises(IndexError) as cm:
            self.pg.broadcast(np.zeros(2, np.float32), root=3)
        self.assertIsInstance(cm.exception, braid.OutOfRangeError)

    def test_bad_timeout(self):
        with self.assertRaises(braid.InvalidArgumentError):
            self.pg.barrier(timeout=-1)


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""Proves check_layering.py catches what it should: runs it on small temporary trees with
allowed and forbidden includes and checks the exit status and the message."""

import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECKER = pathlib.Path(__file__).resolve().parent / "check_layering.py"


def run_on(files: dict[str, str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return subprocess.run([sys.executable, str(CHECKER), str(root)],
                              capture_output=True, text=True, check=False)


class CheckLayeringTest(unittest.TestCase):
    def test_downward_and_same_layer_includes_pass(self):
        r = run_on({
            "core/src/a.cc": '#include "braid/core/error.h"\n',
            "kernels/src/cpu/b.cc": '#include "braid/core/dtype.h"\n#include "braid/kernels/cpu.h"\n',
            "tensor/include/braid/tensor/t.h": "#include <braid/kernels/cpu.h>\n",
            "accel/src/c.cc": '#include "braid/shard/zero.h"\n#include "braid/comm/pg.h"\n',
            "apps/src/main.cc": '#include "braid/accel/accelerator.h"\n#include <vector>\n',
        })
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)

    def test_upward_include_fails_and_names_file_line_and_layers(self):
        r = run_on({
            "core/src/ok.cc": '#include "braid/core/error.h"\n',
            "core/src/bad.cc": '// role\n#include "braid/core/error.h"\n#include "braid/tensor/tensor.h"\n',
        })
        self.assertEqual(r.returncode, 1)
        self.assertIn("core/src/bad.cc:3", r.stderr)
        self.assertIn("layer 'core' includes braid/tensor/", r.stderr)
        self.assertNotIn("ok.cc", r.stderr)

    def test_angle_brackets_and_headers_are_checked(self):
        r = run_on({"kernels/include/braid/kernels/x.h": "#  include <braid/comm/process_group.h>\n"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("kernels/include/braid/kernels/x.h:1", r.stderr)

    def test_top_level_folders_may_not_include_each_other(self):
        r = run_on({"apps/src/main.cc": '#include "braid/examples/demo.h"\n'})
        self.assertEqual(r.returncode, 1)
        self.assertIn("layer 'apps' includes braid/examples/", r.stderr)

    def test_lower_layer_may_not_include_top_level(self):
        r = run_on({"nn/src/linear.cc": '#include "braid/bindings/c_api.h"\n'})
        self.assertEqual(r.returncode, 1)

    def test_every_violation_is_counted(self):
        r = run_on({
            "comm/src/a.cc": '#include "braid/nn/module.h"\n',
            "amp/src/b.cc": '#include "braid/accel/acc.h"\n',
        })
        self.assertEqual(r.returncode, 1)
        self.assertIn("2 layering violation(s)", r.stderr)

    def test_device_kernel_headers_only_in_kernels_and_tensor(self):
        r = run_on({
            "tensor/src/ops.cc": '#include "braid/kernels/cpu.h"\n',
            "nn/src/linear.cc": '#include "braid/kernels/table.h"\n',
            "comm/src/fold.cc": '#include "braid/kernels/cpu.h"\n',
            "shard/tests/x_test.cc": '#include <braid/kernels/cuda.h>\n',
        })
        self.assertEqual(r.returncode, 1)
        self.assertIn("comm/src/fold.cc:1: layer 'comm' includes braid/kernels/cpu.h", r.stderr)
        self.assertIn("shard/tests/x_test.cc:1", r.stderr)
        self.assertIn("2 layering violation(s)", r.stderr)
        self.assertNotIn("tensor/src/ops.cc", r.stderr)
        self.assertNotIn("nn/src/linear.cc", r.stderr)

    def test_model_headers_stay_out_of_shard_and_accel_libraries(self):
        r = run_on({
            "shard/src/pipeline.cc": '#include "braid/nn/gpt.h"\n',
            "accel/include/braid/accel/a.h": '#include <braid/nn/llama.h>\n',
            "shard/tests/pp/x_test.cc": '#include "braid/nn/gpt.h"\n',
            "accel/src/b.cc": '#include "braid/nn/causal_lm.h"\n',
            "apps/src/c.cc": '#include "braid/nn/gpt.h"\n',
        })
        self.assertEqual(r.returncode, 1)
        self.assertIn("shard/src/pipeline.cc:1: layer 'shard' includes the model header "
                      "braid/nn/gpt.h", r.stderr)
        self.assertIn("accel/include/braid/accel/a.h:1", r.stderr)
        self.assertIn("2 layering violation(s)", r.stderr)
        self.assertNotIn("x_test.cc", r.stderr)
        self.assertNotIn("b.cc", r.stderr)
        self.assertNotIn("c.cc", r.stderr)

    def test_missing_root_is_a_usage_error(self):
        r = subprocess.run([sys.executable, str(CHECKER), "/nonexistent/braid-root"],
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/braid-root", r.stderr)


if __name__ == "__main__":
    unittest.main()

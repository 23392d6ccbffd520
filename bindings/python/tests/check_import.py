"""The package imports from the build tree (PYTHONPATH) at braid's version, with its parts,
and, where the module links libbraid.so, without loading any MPI, UCX, NCCL or CUDA library:
those come with the plugins beside libbraid.so, loaded when a backend or device asks for them
(docs/layout.md, "Plugins of libbraid.so").

    check_import.py VERSION PACKAGE_DIR
"""
import os
import sys

version, package_dir = sys.argv[1], sys.argv[2]
import braid  # noqa: E402

where = os.path.realpath(os.path.dirname(braid.__file__))
assert where == os.path.realpath(package_dir), f"imported braid from {where}, not {package_dir}"
assert braid.__version__ == version, f"braid.__version__ {braid.__version__} != {version}"
assert braid._braid.__file__.startswith(os.path.dirname(braid.__file__)), braid._braid.__file__
for name in braid.__all__ + ["TimeoutError"]:
    assert hasattr(braid, name), f"braid.{name} is missing"
with open("/proc/self/maps") as f:
    mapped = {line.split()[-1] for line in f if "/" in line}
names = {os.path.basename(m) for m in mapped}
if any(n.startswith("libbraid.so") for n in names):
    outside = sorted(n for n in names if n.startswith(
        ("libmpi", "libucp", "libucs", "libuct", "libcudart", "libcublas", "libnccl")))
    assert not outside, f"import braid loaded {', '.join(outside)}: libbraid.so must not need them"
    plugins = sorted(n for n in names if n.startswith("libbraid_"))
    assert not plugins, f"import braid loaded the plugin(s) {', '.join(plugins)}"
print(f"braid {braid.__version__} imports from {where}")

"""The package imports from the build tree (PYTHONPATH) at braid's version, with its parts.

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
print(f"braid {braid.__version__} imports from {where}")

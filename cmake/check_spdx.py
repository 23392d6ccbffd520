#!/usr/bin/env python3
"""Fails when a file braid installs lacks its SPDX licence line (docs/layout.md, "Licence").

Policy: the repository is Apache-2.0 (LICENSE at the root covers every file). Files that
leave the repository with a user's build or install carry their own identifier in their
first two lines, "SPDX-License-Identifier: Apache-2.0": the public C++ headers
(<layer>/include/braid/**), the C ABI header (bindings/c/include/), the generated config
header's template (core/config.h.in) and the Python package (bindings/python/braid/).

Usage: check_spdx.py [ROOT]   (ROOT defaults to the repository this file lives in)
Exit status: 0 clean, 1 a file lacks the line or LICENSE is not the Apache-2.0 text.
"""

import pathlib
import sys

TAG = "SPDX-License-Identifier: Apache-2.0"
PATTERNS = ["*/include/braid/**/*.h", "*/include/braid/**/*.cuh", "bindings/c/include/*.h",
            "core/config.h.in", "bindings/python/braid/**/*.py"]


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    errors = []
    license_file = root / "LICENSE"
    if not license_file.is_file() or "Apache License" not in license_file.read_text()[:200]:
        errors.append(f"{license_file}: missing, or not the Apache License 2.0 text")
    files = sorted({p for pattern in PATTERNS for p in root.glob(pattern) if p.is_file()})
    files = [p for p in files if "build" not in p.relative_to(root).parts[0]]
    for path in files:
        head = path.read_text(encoding="utf-8", errors="replace").splitlines()[:2]
        if not any(TAG in line for line in head):
            errors.append(f"{path.relative_to(root)}:1: installed file lacks '{TAG}' in its "
                          f"first two lines (docs/layout.md, \"Licence\")")
    for e in errors:
        print(e)
    print(f"check_spdx: {'FAILED' if errors else 'OK'} ({len(files)} installed files)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

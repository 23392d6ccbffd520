#!/usr/bin/env bash
# Formats every C++ file of braid's folders with the repository's .clang-format.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  change nothing; list unformatted files and exit 1 if any
#                              (scripts/test.sh runs this first, so CI fails on them)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

FOLDERS=(core kernels tensor comm amp nn shard accel apps examples bindings bench tests docs)
mode=fix
case "${1:-}" in
  --check) mode=check ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

command -v clang-format >/dev/null || { echo "clang-format not found (scripts/install_deps.sh)" >&2; exit 1; }

mapfile -d '' files < <(find "${FOLDERS[@]}" -type f \
  \( -name '*.h' -o -name '*.hh' -o -name '*.hpp' -o -name '*.cc' -o -name '*.cpp' \
  -o -name '*.cxx' -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null | sort -z)
if ((${#files[@]} == 0)); then
  echo "format: no C++ files"
  exit 0
fi

if [[ $mode == fix ]]; then
  clang-format -i --style=file "${files[@]}"
  echo "format: formatted ${#files[@]} files"
  exit 0
fi

bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror --style=file "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "format: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "format: run 'bash scripts/format.sh' (or clang-format -i FILE) and commit the result" >&2
  exit 1
fi
echo "format: all ${#files[@]} files are clang-formatted"

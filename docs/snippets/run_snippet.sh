#!/usr/bin/env bash
# Runs one doc snippet's program in a fresh folder (docs/snippets/CMakeLists.txt):
#   run_snippet.sh DIR COMMAND [ARGS...]
# DIR is emptied and made the working directory, so files a snippet writes (checkpoints,
# logs) never come from an earlier run.
set -eu
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
exec "$@"

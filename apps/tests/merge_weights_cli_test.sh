#!/usr/bin/env bash
# `braid merge-weights` end to end (ctest label "cli"): a checkpoint saved by 3 ranks under
# `braid launch` is merged into one model.safetensors, into shards + index, and with --name
# filters; checkpoint_worker check-merged compares what braid loads with the saved model,
# and, when PYTHON has safetensors and numpy, safetensors.numpy reads the files too. Bad
# input exits 1 with a message naming it.
#   merge_weights_cli_test.sh BRAID CHECKPOINT_WORKER [PYTHON]
set -u
braid=$1
worker=$2
python=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$tmp/out" 2>/dev/null; exit 1; }

"$braid" launch --nproc-per-node 3 --timeout 60 "$worker" save "$tmp/ckpt" 7 >"$tmp/out" 2>&1 ||
  fail "saving the checkpoint: exit status $?"

# One file.
"$braid" merge-weights "$tmp/ckpt" "$tmp/one" >"$tmp/out" 2>"$tmp/err" || fail "merge: exit status $?"
[ "$(cat "$tmp/out")" = "$tmp/one/model.safetensors" ] || fail "merge did not print the file"
# Progress on stderr, ending with the full bar (accel/progress.h).
grep -qE '^merge-weights \[#{20}\] ([0-9]+)/\1 ' "$tmp/err" || { cat "$tmp/err"; fail "no final progress line"; }
"$braid" merge-weights "$tmp/ckpt" "$tmp/quiet" --quiet >"$tmp/out" 2>"$tmp/err" || fail "quiet merge"
[ ! -s "$tmp/err" ] || fail "--quiet still printed progress"
"$worker" check-merged "$tmp/one" 7 >"$tmp/out" 2>&1 || fail "model.safetensors differs"

# Shards and an index.
"$braid" merge-weights "$tmp/ckpt" "$tmp/many" --max-shard-size 400 >"$tmp/out" 2>&1 ||
  fail "sharded merge: exit status $?"
grep -q 'model.safetensors.index.json$' "$tmp/out" || fail "no index printed"
ls "$tmp/many" | grep -q '^model-00001-of-0000[2-9]\.safetensors$' || fail "no shard files"
"$worker" check-merged "$tmp/many" 7 >"$tmp/out" 2>&1 || fail "sharded merge differs"

# Filters.
"$braid" merge-weights "$tmp/ckpt" "$tmp/some" --name layers.0. --name embed.weight \
  >"$tmp/out" 2>&1 || fail "filtered merge: exit status $?"

# Bad input.
"$braid" merge-weights "$tmp/nothing" "$tmp/x" >"$tmp/out" 2>&1 && fail "a missing checkpoint exited 0"
grep -q "nothing.*does not exist" "$tmp/out" || fail "missing checkpoint: unclear message"
"$braid" merge-weights "$tmp/ckpt" "$tmp/x" --max-shard-size 5XB >"$tmp/out" 2>&1 &&
  fail "--max-shard-size 5XB exited 0"
grep -q "5XB" "$tmp/out" || fail "--max-shard-size 5XB: message does not name the value"
"$braid" merge-weights "$tmp/ckpt" "$tmp/x" --name nosuch. >"$tmp/out" 2>&1 && fail "--name nosuch. exited 0"
grep -q "'nosuch.' matches no tensor" "$tmp/out" || fail "--name nosuch.: unclear message"
"$braid" merge-weights >"$tmp/out" 2>&1 && fail "no arguments exited 0"

# The reference reader, when present (docs/files.md, "Interop", for installing it).
if [ -n "$python" ] && "$python" -c 'import safetensors, numpy' 2>/dev/null; then
  "$python" - "$tmp" >"$tmp/out" 2>&1 <<'PY' || fail "safetensors.numpy does not read the merge"
import json, os, sys
import numpy as np
from safetensors import safe_open
tmp = sys.argv[1]
# The model of checkpoint_test_util.h (seed 7): names, shapes, and f32 values recomputed.
specs = [("embed.weight", (13, 7), "float32"), ("layers.0.attn.w", (5, 9), None),
         ("layers.0.attn.b", (9,), "float32"), ("layers.0.ids", (2, 3), "int64"),
         ("layers.1.mask", (11,), "bool"), ("layers.1.scale", (), "float64"),
         ("layers.1.empty", (0, 4), "float16"), ("lm_head.weight", (7, 13), "float32")]
def values(t, n, seed=7):
    return np.array([((seed * 7 + t * 13 + j) % 251 - 125) / 4.0 for j in range(n)])
def load(path):  # every tensor numpy can hold (it has no bf16)
    with safe_open(path, "np") as f:
        return {k: f.get_tensor(k) for k in f.keys() if k != "layers.0.attn.w"}
with safe_open(os.path.join(tmp, "one", "model.safetensors"), "np") as f:
    assert f.metadata() == {"format": "pt"}, f.metadata()
    assert sorted(f.keys()) == sorted(s[0] for s in specs), list(f.keys())
one = load(os.path.join(tmp, "one", "model.safetensors"))
index = json.load(open(os.path.join(tmp, "many", "model.safetensors.index.json")))
assert sorted(index["weight_map"]) == sorted(s[0] for s in specs), index
many = {}
for name in sorted(set(index["weight_map"].values())):
    many.update(load(os.path.join(tmp, "many", name)))
for t, (name, shape, dtype) in enumerate(specs):
    if dtype is None:
        continue
    a = one[name]
    assert a.shape == shape and a.dtype == np.dtype(dtype), (name, a.shape, a.dtype)
    assert np.array_equal(a, many[name]), name
    if dtype in ("float32", "float64"):
        assert np.array_equal(a.reshape(-1), values(t, a.size).astype(dtype)), name
print("python ok")
PY
else
  echo "note: no safetensors + numpy for '$python': the reference reader check was not run"
fi
echo PASS

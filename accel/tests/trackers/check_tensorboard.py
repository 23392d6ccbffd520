#!/usr/bin/env python3
"""Reads braid's tracker files back with the reference readers (docs/trackers.md).

    check_tensorboard.py <braid_tracker_interop_tool> <work dir>

The tool writes one run with every tracker (tensorboard, jsonl, csv) and prints what it
logged as JSON. This script checks:
  - metrics.jsonl with Python's json module, hparams.json: every value exactly;
  - metrics.csv with Python's csv module (header of every key, empty cells), hparams.csv;
  - the event file with tensorboard: the TFRecord framing and masked CRC32C (tensorboard's
    own masked_crc32c), every record parses as tensorboard.Event and serializes back to the
    same bytes, the first event's file_version, scalars through EventAccumulator (tags,
    steps, float32 values, NaN and infinities), the text through the plugin accumulator, and
    the hparams plugin's session_start_info.
Exits 77 (ctest SKIP_RETURN_CODE) after the json/csv checks when the interpreter lacks the
tensorboard package; any mismatch exits 1.
"""

import csv
import json
import math
import os
import shutil
import struct
import subprocess
import sys

SKIP = 77


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def as_float(v):
    """A manifest or JSONL value: a number, or "NaN" / "Infinity" / "-Infinity"."""
    if isinstance(v, str):
        check(v in ("NaN", "Infinity", "-Infinity"), "unexpected string value %r" % v)
        return float(v)
    return float(v)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def run_tool(tool, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = subprocess.run([tool, work], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check_jsonl(run, manifest):
    lines = open(os.path.join(run, "metrics.jsonl"), encoding="utf-8").read().splitlines()
    scalar_lines = [json.loads(l) for l in lines if "notes" not in json.loads(l)]
    text_lines = [json.loads(l) for l in lines if "notes" in json.loads(l)]
    check(len(scalar_lines) == len(manifest["scalars"]),
          "metrics.jsonl has %d scalar lines, expected %d" % (len(scalar_lines),
                                                               len(manifest["scalars"])))
    for got, want in zip(scalar_lines, manifest["scalars"]):
        check(list(got)[0] == "step" and list(got)[-1] == "time", "field order in %r" % got)
        check(got["step"] == want["step"], "jsonl step %r != %r" % (got["step"], want["step"]))
        check(got["time"] > 1.6e9, "jsonl time %r is not a wall-clock time" % got["time"])
        values = {k: v for k, v in got.items() if k not in ("step", "time")}
        check(list(values) == sorted(want["values"]), "jsonl keys %r" % list(values))
        for k, v in want["values"].items():
            check(same(as_float(values[k]), as_float(v)), "jsonl %s: %r != %r" % (k, values[k], v))
    check(len(text_lines) == len(manifest["texts"]), "jsonl text lines")
    for got, want in zip(text_lines, manifest["texts"]):
        check(got["notes"] == want["text"] and got["step"] == want["step"], "jsonl text %r" % got)
    cfg = json.load(open(os.path.join(run, "hparams.json"), encoding="utf-8"))
    check(cfg == manifest["config"], "hparams.json %r != %r" % (cfg, manifest["config"]))
    print("jsonl: %d lines, hparams.json: ok" % len(lines))


def check_csv(run, manifest):
    columns = []
    for row in manifest["scalars"]:
        columns += sorted(k for k in row["values"] if k not in columns)
    with open(os.path.join(run, "metrics.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    check(rows[0] == ["step", "time"] + columns, "csv header %r, expected %r" % (rows[0], columns))
    check(len(rows) - 1 == len(manifest["scalars"]), "csv rows %d" % (len(rows) - 1))
    for got, want in zip(rows[1:], manifest["scalars"]):
        check(len(got) == len(rows[0]), "csv row %r is not rectangular" % got)
        check(int(got[0]) == want["step"], "csv step %r" % got[0])
        check(float(got[1]) > 1.6e9, "csv time %r" % got[1])
        for name, cell in zip(columns, got[2:]):
            if name in want["values"]:
                check(same(float(cell), as_float(want["values"][name])),
                      "csv %s at step %d: %r != %r" % (name, want["step"], cell,
                                                        want["values"][name]))
            else:
                check(cell == "", "csv %s at step %d should be empty: %r" % (name, want["step"],
                                                                              cell))
    with open(os.path.join(run, "hparams.csv"), newline="", encoding="utf-8") as f:
        cfg = list(csv.reader(f))
    want = [["key", "value"]] + [
        [k, ("true" if v else "false") if isinstance(v, bool) else str(v)]
        for k, v in sorted(manifest["config"].items())
    ]
    check(cfg == want, "hparams.csv %r != %r" % (cfg, want))
    print("csv: %d columns, %d rows, hparams.csv: ok" % (len(columns), len(rows) - 1))


def read_records(path, masked_crc32c):
    data = open(path, "rb").read()
    records, at = [], 0
    while at < len(data):
        check(len(data) - at >= 12, "truncated header at %d" % at)
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        check(hcrc == masked_crc32c(header), "length crc at %d" % at)
        body = data[at + 12:at + 12 + length]
        check(len(body) == length and len(data) >= at + 16 + length, "truncated record at %d" % at)
        (dcrc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        check(dcrc == masked_crc32c(body), "data crc at %d" % at)
        records.append(body)
        at += 16 + length
    return records


def check_tensorboard(run, manifest):
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from tensorboard.plugins.hparams import plugin_data_pb2
    from tensorboard.util import tensor_util

    files = [f for f in os.listdir(run) if f.startswith("events.out.tfevents.")]
    check(len(files) == 1, "expected one event file in %s, found %r" % (run, files))
    path = os.path.join(run, files[0])

    # Framing, and protobuf's own serializer giving back the same bytes.
    records = read_records(path, masked_crc32c)
    for i, rec in enumerate(records):
        ev = event_pb2.Event.FromString(rec)
        check(ev.SerializeToString(deterministic=True) == rec,
              "record %d does not serialize back to the same bytes" % i)
    loaded = list(event_file_loader.EventFileLoader(path).Load())
    check(len(loaded) == len(records), "EventFileLoader read %d events, the file holds %d" %
          (len(loaded), len(records)))
    check(loaded[0].file_version == "brain.Event:2" and loaded[0].wall_time > 1.6e9,
          "first event %r" % loaded[0])
    # file_version, hparams, the scalar calls, the text.
    check(len(records) == 2 + len(manifest["scalars"]) + len(manifest["texts"]),
          "%d records" % len(records))

    # Scalars, through the accumulator TensorBoard's scalar dashboard is fed by.
    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    want = {}
    for row in manifest["scalars"]:
        for k, v in row["values"].items():
            want.setdefault(k, []).append((row["step"], as_float(v)))
    check(sorted(acc.Tags()["scalars"]) == sorted(want),
          "scalar tags %r != %r" % (sorted(acc.Tags()["scalars"]), sorted(want)))
    n = 0
    with np.errstate(over="ignore"):
        for tag, points in want.items():
            got = [(e.step, e.value) for e in acc.Scalars(tag)]
            check([s for s, _ in got] == [s for s, _ in points], "%s steps %r" % (tag, got))
            for (_, g), (step, w) in zip(got, points):
                w32 = float(np.float32(w))
                check(same(g, w32), "%s at step %d: %r != float32(%r) = %r" % (tag, step, g, w, w32))
                n += 1

    # Text and hparams, through the plugin accumulator (what the text and hparams plugins use).
    pacc = plugin_event_accumulator.EventAccumulator(
        path, size_guidance={plugin_event_accumulator.TENSORS: 0})
    pacc.Reload()
    for t in manifest["texts"]:
        events = pacc.Tensors(t["tag"])
        check(pacc.SummaryMetadata(t["tag"]).plugin_data.plugin_name == "text", "text plugin")
        check(len(events) == 1 and events[0].step == t["step"], "text events %r" % events)
        arr = tensor_util.make_ndarray(events[0].tensor_proto)
        check(arr.shape == (1,) and arr[0].decode("utf-8") == t["text"], "text %r" % arr)
    content = pacc.PluginTagToContent("hparams")
    check(list(content) == ["_hparams_/session_start_info"], "hparams tags %r" % list(content))
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    check(data.WhichOneof("data") == "session_start_info", "hparams data %r" % data)
    info = data.session_start_info
    check(info.start_time_secs > 1.6e9, "start_time_secs %r" % info.start_time_secs)
    got = {}
    for k, v in info.hparams.items():
        kind = v.WhichOneof("kind")
        got[k] = getattr(v, kind)
    want_cfg = {k: (v if isinstance(v, (bool, str)) else float(v))
                for k, v in manifest["config"].items()}
    check(got == want_cfg, "hparams %r != %r" % (got, want_cfg))
    check(all(isinstance(got[k], type(want_cfg[k])) for k in got), "hparams types %r" % got)
    print("tensorboard: %d records, %d scalars in %d tags, text and hparams: ok" %
          (len(records), n, len(want)))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    manifest = run_tool(sys.argv[1], sys.argv[2])
    run = manifest["run"]
    names = sorted(os.listdir(run))
    check(names[:4] == ["events.out.tfevents." + names[0][len("events.out.tfevents."):],
                        "hparams.csv", "hparams.json", "metrics.csv"] and
          names[4:] == ["metrics.jsonl"], "files in the run folder: %r" % names)
    check_jsonl(run, manifest)
    check_csv(run, manifest)
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print("SKIP: %s has no tensorboard package; install it with `%s -m pip install "
              "--break-system-packages tensorboard==2.21.0` (scripts/install_deps.sh does)" %
              (sys.executable, sys.executable))
        return SKIP
    check_tensorboard(run, manifest)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

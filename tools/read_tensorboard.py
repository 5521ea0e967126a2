#!/usr/bin/env python3
"""Print the scalars of every TensorBoard event file in a directory, as JSON.

    read_tensorboard.py LOG_DIR   ->   {"tag": [[step, value], ...], ...}

Reads with the `tensorboard` package's own loader (EventFileLoader, what
`tensorboard --logdir` uses), so the C++ tests of ft::report::TensorBoardWriter
(include/ft/report/tensorboard.hpp) check the writer against TensorBoard itself.
Each tag's points are sorted by step. The loader quietly stops at a record whose
CRC does not match, so this script also walks the record framing and fails
when the loader yielded fewer records than the file holds.

Exit status: 0 on success, 1 when LOG_DIR holds no event file or one cannot be
read whole.
"""
import json
import os
import struct
import sys

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util


def framed_record_count(path):
    """Number of records in a TFRecord file, from the length fields alone."""
    count = 0
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {offset}")
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 12 + length + 4
        if offset > len(data):
            raise ValueError(f"{path}: record {count} runs past the end of the file")
        count += 1
    return count


def scalar_of(value):
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor"):
        array = tensor_util.make_ndarray(value.tensor)
        if array.size == 1:
            return float(array.reshape(()).item())
    return None


def main(argv):
    if len(argv) != 2:
        print("usage: read_tensorboard.py LOG_DIR", file=sys.stderr)
        return 1
    log_dir = argv[1]
    names = sorted(n for n in os.listdir(log_dir) if "tfevents" in n) if os.path.isdir(log_dir) else []
    if not names:
        print(f"{log_dir}: no TensorBoard event file (events.out.tfevents.*) in this directory", file=sys.stderr)
        return 1
    scalars = {}
    for name in names:
        path = os.path.join(log_dir, name)
        expected = framed_record_count(path)
        loaded = sum(1 for _ in event_file_loader.RawEventFileLoader(path).Load())
        if loaded != expected:
            print(f"{path}: TensorBoard read {loaded} of {expected} records (bad CRC or truncated)", file=sys.stderr)
            return 1
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                v = scalar_of(value)
                if v is not None:
                    scalars.setdefault(value.tag, []).append([event.step, v])
    for points in scalars.values():
        points.sort(key=lambda p: p[0])
    print(json.dumps(scalars, sort_keys=True))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError) as e:
        print(e, file=sys.stderr)
        sys.exit(1)

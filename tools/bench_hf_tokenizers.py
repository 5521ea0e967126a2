#!/usr/bin/env python3
"""Measures HF `tokenizers` on the texts and files bench/tokenizer.cpp measures ft on.

For each fixture kind (tests/fixtures/tokenizers/<kind>/tokenizer.json) and each
text (the Jargon File from Debian's jargon-text, and the multilingual test corpus
repeated to the same size): MB/s of `encode` on the whole text (one thread, per
second of CPU time, as Google Benchmark counts ft's), of `encode_batch` on its
lines with one Rayon thread (CPU time) and with RAYON_NUM_THREADS or all cores
(wall time). Prints one line per measurement; the best of --repeat runs is kept.

    tools/.venv/bin/python tools/bench_hf_tokenizers.py [--repeat 3] [--kinds gpt2,llama2]
"""
import argparse
import gzip
import os
import pathlib
import subprocess
import sys
import time

from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests/fixtures/tokenizers"
JARGON = pathlib.Path("/usr/share/doc/jargon-text/jargon.txt.gz")
KINDS = ["gpt2", "gpt_neox", "llama3", "qwen2", "smollm2", "llama2", "mistral", "sp_metaspace", "misc"]


def texts():
    prose = gzip.decompress(JARGON.read_bytes()).decode("latin-1") if JARGON.exists() else ""
    one = (FIXTURES / "corpus.txt").read_bytes().decode("utf-8")
    target = max(len(prose.encode()), 1 << 20)
    many, size = [], 0
    while size < target:  # the same repetition as bench/tokenizer.cpp
        many.append(one)
        size += len(one.encode())
    out = {"multilingual": "".join(many)}
    if prose:
        out = {"jargon": prose, **out}
    return out


def best_seconds(fn, repeat, clock):
    fn()  # warm the word cache, as Google Benchmark's first iterations do
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return best


def batch_in_subprocess(kind, name, repeat):
    """encode_batch seconds (CPU) with one Rayon thread: the pool size is fixed when it starts."""
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--repeat", str(repeat), "--kinds", kind, "--only", name, "--inner"],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--only", help=argparse.SUPPRESS)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = os.environ.get("RAYON_NUM_THREADS", str(os.cpu_count()))
    for name, text in texts().items():
        if args.only and name != args.only:
            continue
        size = len(text.encode())
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        for kind in args.kinds.split(","):
            tok = Tokenizer.from_file(str(FIXTURES / kind / "tokenizer.json"))
            if args.inner:
                print(best_seconds(lambda: tok.encode_batch(lines), args.repeat, time.process_time))
                return
            whole = best_seconds(lambda: tok.encode(text), args.repeat, time.process_time)
            batch1 = batch_in_subprocess(kind, name, args.repeat)
            batch = best_seconds(lambda: tok.encode_batch(lines), args.repeat, time.perf_counter)
            print(f"{kind:13s} {name:13s} encode {size / whole / 1e6:7.2f} MB/s   "
                  f"encode_batch 1 thread {size / batch1 / 1e6:7.2f} MB/s   "
                  f"{threads} threads {size / batch / 1e6:7.2f} MB/s (wall)")


if __name__ == "__main__":
    main()

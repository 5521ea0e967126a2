#!/usr/bin/env python3
"""llama.cpp's inference speed (llama-cpp-python from PyPI) on a GGUF file,
beside bench/generate.cpp: the same prompt ids, prefill then greedy decode at
batch 1, on the same threads. llama.cpp computes on the GGUF's quantised
weights (SmolLM2's file is Q4_1), ft on the converted float32 ones.

    tools/.venv/bin/pip install llama-cpp-python
    tools/.venv/bin/python tools/bench_llamacpp_generate.py FILE.gguf [--prompt 128] [--decode 64] [--threads 2]
"""
import argparse
import time

from llama_cpp import Llama


def main():
    p = argparse.ArgumentParser()
    p.add_argument("gguf")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    llm = Llama(a.gguf, n_ctx=a.prompt + a.decode + 8, n_threads=a.threads, n_batch=512, verbose=False)
    vocab = llm.n_vocab()
    ids = [(i * 31) % vocab for i in range(a.prompt)]
    llm.eval(ids[:8])  # warm-up
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(a.decode):
        logits = llm.scores[llm.n_tokens - 1]
        llm.eval([int(logits.argmax())])
    decode = time.perf_counter() - t1
    print(f"{a.gguf}: prompt {a.prompt} tokens, {a.decode} decode steps (llama.cpp, {a.threads} threads)")
    print("| batch | prefill tok/s | first token ms | decode tok/s | decode ms/step |\n|---|---|---|---|---|")
    print(f"| 1 | {a.prompt / prefill:.0f} | {1e3 * prefill:.1f} | {a.decode / decode:.1f} | {1e3 * decode / a.decode:.2f} |")


if __name__ == "__main__":
    main()

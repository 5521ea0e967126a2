#!/usr/bin/env python3
"""HF transformers' inference speed, the peer of bench/generate.hpp
(bench_generate on the CPU, bench_cuda_generate on a GPU): the same prompts
(token ids (b * 7919 + i * 31) % vocab), prefill then greedy decode with the
KV cache, by batch size, on the same threads or the same GPU.

    tools/.venv/bin/python tools/bench_hf_generate.py MODEL_DIR [--prompt 128] [--decode 64] [--threads 2]
        [--batches 1,16] [--device cpu|cuda] [--dtype float32|bfloat16]
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(model, batch, prompt, decode, device):
    vocab = model.config.vocab_size
    ids = torch.tensor([[(b * 7919 + i * 31) % vocab for i in range(prompt)] for b in range(batch)], device=device)
    cache = DynamicCache()
    with torch.no_grad():
        sync(device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        sync(device)
        prefill = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(decode):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        sync(device)
        return prefill, time.perf_counter() - t1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,16")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if a.dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype).to(a.device).eval()
    run(model, 1, 8, 2, a.device)
    print(f"{a.model}: prompt {a.prompt} tokens, {a.decode} decode steps (torch {torch.__version__}, {a.device}, {a.dtype})")
    print("| batch | prefill tok/s | first token ms | decode tok/s | decode ms/step |\n|---|---|---|---|---|")
    for batch in (int(b) for b in a.batches.split(",")):
        prefill, decode = run(model, batch, a.prompt, a.decode, a.device)
        print(f"| {batch} | {batch * a.prompt / prefill:.0f} | {1e3 * prefill:.1f} | {batch * a.decode / decode:.1f} "
              f"| {1e3 * decode / a.decode:.2f} |")


if __name__ == "__main__":
    main()

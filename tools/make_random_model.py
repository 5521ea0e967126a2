#!/usr/bin/env python3
"""An HF Llama model directory with random weights at a real model's shape,
saved by transformers, for the GPU benchmarks (bench_cuda_generate against
tools/bench_hf_generate.py; ftrun train for tokens/s and MFU). The shapes are
tools/bench_torch_cuda.py's, so ft and PyTorch are timed on the same models.

    python3 tools/make_random_model.py OUT_DIR --shape smollm2-135m|llama-1b [--dtype bfloat16|float32]
"""
import argparse
import os
import shutil
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch_cuda import SHAPES  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = p.parse_args()
    (C, L, H, G, Fi, V, tied), _, _ = SHAPES[a.shape]
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=C, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=G,
                         intermediate_size=Fi, vocab_size=V, tie_word_embeddings=tied, max_position_embeddings=8192)
    # Drawn on the GPU where there is one: a 1B model's draws take minutes on a CPU.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(getattr(torch, a.dtype))
    # Written beside the destination and renamed, so a cut-off run leaves no half model behind.
    staging = a.out.rstrip("/") + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(staging, a.out)
    print(f"{a.shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters in {a.out}")


if __name__ == "__main__":
    main()

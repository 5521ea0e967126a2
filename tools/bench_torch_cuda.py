#!/usr/bin/env python3
"""The PyTorch peer of ft's GPU benchmarks (bench/cuda/): on the same GPU,

  gemm       the measured bf16 GEMM peak (8192^3, random data), which MFU is taken against
  attention  causal SDPA forward and forward+backward TFLOP/s (bf16, head_dim 128,
             16 heads; T = 2048 and 8192 with 16384 tokens per call)
  train      tokens/s and MFU of one training step (forward, backward, AdamW) of a
             model built from a config with random weights: the SmolLM2-135M shape
             and a 1B Llama shape (Llama-3.2-1B's), bf16 weights, full fine-tune and
             LoRA (r 16, alpha 32, all linear layers), SDPA attention, eager mode

    python3 tools/bench_torch_cuda.py [gemm] [attention] [train] [--steps 10]

FLOPs are counted as ft counts them (include/ft/train/flops.hpp): 6 per matmul
weight per token for full fine-tuning, 4 under LoRA (frozen weights need no weight
gradient), attention 6 * layers * T * heads * head_dim per token. Times are
medians over CUDA events after warm-up steps.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

SHAPES = {
    # name: (hidden, layers, heads, kv heads, intermediate, vocab, tied), batch, seq
    "smollm2-135m": ((576, 30, 9, 3, 1536, 49152, True), 8, 2048),
    "llama-1b": ((2048, 16, 32, 8, 8192, 128256, True), 4, 2048),
}


def timed(fn, warmup=3, repeats=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def gemm_peak():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    s = timed(lambda: a @ b)
    return 2 * n**3 / s


def attention(peak):
    print("| attention (SDPA, bf16, causal) | B x T | heads x dim | forward TFLOP/s | fwd+bwd TFLOP/s |")
    print("|---|---|---|---|---|")
    H, D = 16, 128
    for T in (2048, 8192):
        B = 16384 // T
        q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        flops = 4 * B * H * T * T * D / 2  # QK^T and PV over the causal half
        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        grad = torch.randn_like(out)

        def both():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(grad)

        total = timed(both)
        print(f"| torch {torch.__version__} | {B} x {T} | {H} x {D} | {flops / fwd / 1e12:.0f} | "
              f"{3.5 * flops / total / 1e12:.0f} |")


def matmul_parameters(c):
    C, L, H, G, Fi, V, _ = c
    D = C // H
    return L * C * ((H + 2 * G) * D + H * D + 2 * Fi + Fi) + V * C


def train(peak, steps):
    from transformers import LlamaConfig, LlamaForCausalLM

    print("| model | adapter | B x T | step ms | tokens/s | TFLOP/s | MFU | peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (c, B, T) in SHAPES.items():
        C, L, H, G, Fi, V, tied = c
        for adapter in ("full", "lora"):
            torch.manual_seed(0)
            config = LlamaConfig(hidden_size=C, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=G,
                                 intermediate_size=Fi, vocab_size=V, tie_word_embeddings=tied,
                                 max_position_embeddings=8192)
            model = LlamaForCausalLM(config).to(device="cuda", dtype=torch.bfloat16)
            model.config._attn_implementation = "sdpa"
            extra = 0
            if adapter == "lora":
                from peft import LoraConfig, get_peft_model
                model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                         task_type="CAUSAL_LM"))
                extra = sum(p.numel() for p in model.parameters() if p.requires_grad)
            model.train()
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
            ids = torch.randint(0, V, (B, T), device="cuda")

            def step():
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            torch.cuda.reset_peak_memory_stats()
            s = timed(step, warmup=3, repeats=steps)
            per_token = matmul_parameters(c) * (6 if adapter == "full" else 4) + 6 * extra + 6 * L * T * C
            achieved = per_token * B * T / s
            print(f"| {name} | {adapter} | {B} x {T} | {s * 1e3:.1f} | {B * T / s:.0f} | {achieved / 1e12:.0f} | "
                  f"{100 * achieved / peak:.1f}% | {torch.cuda.max_memory_allocated() / 2**30:.1f} |")
            del model, optimizer
            torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", nargs="*", default=["gemm", "attention", "train"])
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    peak = gemm_peak()
    print(f"measured bf16 GEMM peak (8192^3): {peak / 1e12:.0f} TFLOP/s")
    if "attention" in a.what:
        attention(peak)
    if "train" in a.what:
        train(peak, a.steps)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that PEFT loads a LoRA adapter ft saved and computes ft's logits with it.

    tools/.venv/bin/python tools/check_peft_adapter.py BASE_DIR ADAPTER_DIR FT_LOGITS

BASE_DIR     the HF model directory the adapter was trained on
ADAPTER_DIR  what ft wrote (adapters::save_peft_adapter, or a LoRA run's output):
             adapter_config.json and adapter_model.safetensors
FT_LOGITS    a safetensors file with the batch ft ran and what it got:
             input_ids (I64 [B, T]) and logits (F32 [B, T, V]), from the same
             adapted model in float32 with dropout off

PEFT attaches the adapter to the base model (transformers, float32, eager
attention) and runs input_ids; the check holds when
max |PEFT - ft| / max |PEFT| <= --tolerance (default 1e-4). This catches
everything that makes an adapter load but compute another model: B's rows
in the wrong order (GPT-NeoX's interleaved query_key_value), a wrong scale
(lora_alpha, r, use_rslora) or modules PEFT does not attach. It also checks
that PEFT found a lora_A and lora_B for every module the adapter file names,
and that the adapter does change the base model's logits. Exit status 0 when
every check holds.
"""
import argparse
import json
import pathlib
import sys

import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging


def relative(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=pathlib.Path)
    parser.add_argument("adapter", type=pathlib.Path)
    parser.add_argument("ft_logits", type=pathlib.Path)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)

    with safe_open(str(args.ft_logits), "pt") as f:
        input_ids, ft_logits = f.get_tensor("input_ids").long(), f.get_tensor("logits").float()
    with safe_open(str(args.adapter / "adapter_model.safetensors"), "pt") as f:
        in_file = {k.replace(".lora_A.weight", "").replace(".lora_B.weight", "") for k in f.keys()}
    config = json.loads((args.adapter / "adapter_config.json").read_text())

    base = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        plain = base(input_ids).logits.float()
    model = PeftModel.from_pretrained(base, args.adapter).eval()
    attached = {name for name, module in model.named_modules() if hasattr(module, "lora_A") and module.lora_A}
    with torch.no_grad():
        peft_logits = model(input_ids).logits.float()

    ok = True
    missing = sorted(in_file - attached)
    if missing:
        print(f"FAIL: PEFT attached no LoRA to {len(missing)} module(s) of the file, e.g. {missing[0]}")
        ok = False
    if peft_logits.shape != ft_logits.shape:
        print(f"FAIL: logits shape {tuple(peft_logits.shape)} from PEFT, {tuple(ft_logits.shape)} from ft")
        return 1
    diff = relative(ft_logits, peft_logits)
    moved = relative(plain, peft_logits)
    print(f"{args.adapter}: r {config['r']}, alpha {config['lora_alpha']}, {len(attached)} modules "
          f"({', '.join(sorted(config['target_modules']))}); batch {tuple(input_ids.shape)}")
    print(f"  max |ft - PEFT| / max |PEFT| = {diff:.2e} (tolerance {args.tolerance:.0e}); "
          f"the adapter moves the base logits by {moved:.2e}")
    if diff > args.tolerance:
        print("FAIL: ft's logits differ from PEFT's")
        ok = False
    if moved <= 10 * args.tolerance:
        print("FAIL: the adapter barely changes the base model, so this check proves nothing (B all zero?)")
        ok = False
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

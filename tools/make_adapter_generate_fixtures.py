#!/usr/bin/env python3
"""PEFT adapters and PEFT's greedy generations through them, for ft's
inference with adapters applied per sequence, unmerged (include/ft/infer/).

For each case this builds a PEFT adapter over a parity model
(tests/fixtures/parity/, made by make_parity_fixtures.py), randomises every
adapter weight (PEFT starts LoRA's B at zero, which would change nothing),
saves it, and runs PEFT's `generate` greedily (KV cache on, EOS off) from
three prompts of random token ids. Outputs, in
tests/fixtures/peft/generate/<case>/:
  adapter_config.json, adapter_model.safetensors   the PEFT adapter
  generate_expected.safetensors   prompt_<i> (int32), tokens_<i> (int32),
                                  logits_<i> (float32 [steps, vocab])

Cases: LoRA on Llama with grouped-query attention (q, v, gate, down), LoRA
on GPT-NeoX (its interleaved query_key_value and dense_4h_to_h), prompt
tuning (8 virtual tokens) on Llama, and LoRA on every linear layer of Qwen3
(`all-linear`: its q and k pass through the per-head norms).

Deterministic and idempotent. Run from the repository root:

    tools/.venv/bin/python tools/make_adapter_generate_fixtures.py
"""
import pathlib
import shutil

import torch
from peft import LoraConfig, PromptTuningConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from make_generate_fixtures import greedy_generations

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests" / "fixtures" / "parity"
OUT = ROOT / "tests" / "fixtures" / "peft" / "generate"
PROMPT_LENGTHS = (1, 7, 19)
NEW_TOKENS = 20

CASES = {
    "llama_gqa_lora": ("llama_gqa", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                               target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"])),
    "neox_parallel_lora": ("neox_parallel", LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                       target_modules=["query_key_value", "dense_4h_to_h"])),
    "llama_gqa_prompt": ("llama_gqa", PromptTuningConfig(num_virtual_tokens=8, task_type="CAUSAL_LM")),
    "qwen3_qk_norm_lora": ("qwen3_qk_norm", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                       target_modules="all-linear")),
}


def main():
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    for name, (base, config) in CASES.items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(PARITY / base, dtype=torch.float32)
        model = get_peft_model(model, config)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_" in pname:
                    p.normal_(0.0, 0.2)
        model.eval()
        target = OUT / name
        shutil.rmtree(target, ignore_errors=True)
        model.save_pretrained(target)
        config_file = target / "adapter_config.json"  # a path that means something on every machine
        config_file.write_text(config_file.read_text().replace(str(PARITY / base), f"tests/fixtures/parity/{base}"))
        (target / "README.md").unlink(missing_ok=True)

        # PEFT's generate returns the prompt's ids and the new ones (virtual tokens are not ids).
        tensors = greedy_generations(model, 4321, PROMPT_LENGTHS, NEW_TOKENS)
        save_file(tensors, str(target / "generate_expected.safetensors"))
        print(f"{name}: {len(PROMPT_LENGTHS)} prompts x {NEW_TOKENS} tokens")


if __name__ == "__main__":
    main()

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
tuning (8 virtual tokens) on Llama, LoRA on every linear layer of Qwen3
(`all-linear`: its q and k pass through the per-head norms), and prompt
tuning on Granite (its embedding_multiplier scales the virtual tokens too),
and LoRA on Phi-3's fused qkv_proj and gate_up_proj.

Deterministic and idempotent. Run from the repository root:

    tools/.venv/bin/python tools/make_adapter_generate_fixtures.py [CASE ...]
"""
import pathlib
import shutil
import sys

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
    "granite_multipliers_prompt": ("granite_multipliers",
                                   PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM")),
    "phi3_fused_lora": ("phi3_fused", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["qkv_proj", "gate_up_proj"])),
    # "c_proj" is both the attention's output and the MLP's down projection.
    "gpt_bigcode_mha_lora": ("gpt_bigcode_mha", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                           task_type="CAUSAL_LM",
                                                           target_modules=["c_attn", "c_proj"])),
    # Virtual tokens take the first rows of the learned position table, as inputs_embeds do.
    "gpt_bigcode_mqa_prompt": ("gpt_bigcode_mqa", PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM")),
    # Bloom's embedding norm normalises the virtual tokens too.
    "bloom_alibi_prompt": ("bloom_alibi", PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM")),
    "bloom_six_heads_lora": ("bloom_six_heads", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                           target_modules=["query_key_value", "dense_4h_to_h"])),
    # Gemma scales the token rows inside its embedding module: the virtual tokens are not scaled.
    "gemma_geglu_prompt": ("gemma_geglu", PromptTuningConfig(num_virtual_tokens=4, task_type="CAUSAL_LM")),
    "gemma_geglu_lora": ("gemma_geglu", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                   target_modules="all-linear")),
    # PEFT's default targets for Gemma 2 (q_proj, v_proj), through soft-capped scores and logits.
    "gemma2_softcap_lora": ("gemma2_softcap", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                         task_type="CAUSAL_LM")),
    "gemma3_local_global_lora": ("gemma3_local_global", LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                                   task_type="CAUSAL_LM", target_modules="all-linear")),
}


def prompt_greedy(peft_model, seed, prompt_lengths, new_tokens):
    """Greedy generation through prompt tuning by its definition: the virtual
    tokens' embeddings stand before the sequence's, the whole sequence is
    recomputed for each new token. PEFT 0.21's generate (with transformers 5)
    agrees with this only for the first token; the fixture made by PEFT 0.17
    (llama_gqa_prompt) agrees with it for every token. The same prompts as
    greedy_generations."""
    base = peft_model.get_base_model()
    virtual = peft_model.get_prompt_embedding_to_save(adapter_name="default")
    embed = base.get_input_embeddings()
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for i, length in enumerate(prompt_lengths):
        prompt = torch.randint(3, base.config.vocab_size, (1, length), generator=gen)
        ids, logits = prompt, []
        with torch.no_grad():
            for step in range(new_tokens):
                last = base(inputs_embeds=torch.cat([virtual[None], embed(ids)], 1)).logits[0, -1]
                if step == 0:  # PEFT's own forward of the first step
                    own = peft_model(input_ids=prompt).logits[0, -1]
                    assert torch.allclose(own, last, atol=1e-5), (own - last).abs().max()
                logits.append(last)
                ids = torch.cat([ids, last.argmax().reshape(1, 1)], 1)
        tensors[f"prompt_{i}"] = prompt[0].to(torch.int32)
        tensors[f"tokens_{i}"] = ids[0, length:].to(torch.int32).contiguous()
        tensors[f"logits_{i}"] = torch.stack(logits).to(torch.float32).contiguous()
    return tensors


def main():
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    wanted = sys.argv[1:] or list(CASES)
    unknown = sorted(set(wanted) - set(CASES))
    assert not unknown, f"unknown cases {unknown}; known: {list(CASES)}"
    for name, (base, config) in ((n, CASES[n]) for n in wanted):
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

        if isinstance(config, PromptTuningConfig):
            tensors = prompt_greedy(model, 4321, PROMPT_LENGTHS, NEW_TOKENS)
        else:
            # PEFT's generate returns the prompt's ids and the new ones (virtual tokens are not ids).
            tensors = greedy_generations(model, 4321, PROMPT_LENGTHS, NEW_TOKENS)
        save_file(tensors, str(target / "generate_expected.safetensors"))
        print(f"{name}: {len(PROMPT_LENGTHS)} prompts x {NEW_TOKENS} tokens")


if __name__ == "__main__":
    main()

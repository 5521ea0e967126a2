#!/usr/bin/env python3
"""Writes HF Transformers' greedy generations for the parity models, for
ft's KV-cache inference (include/ft/infer/) to match token for token.

For every case under tests/fixtures/parity/ (written by
make_parity_fixtures.py) this loads the float32 checkpoint, runs
`model.generate` greedily (do_sample=False, KV cache on) from three prompts
of random token ids of different lengths, and writes
tests/fixtures/parity/<case>/generate_expected.safetensors with, for prompt
i: prompt_<i> (int32 ids), tokens_<i> (the generated ids) and logits_<i>
(float32 [steps, vocab]: the logits each step chose from). EOS does not stop
generation here (eos_token_id=None), so every prompt runs the full length,
past the sliding window of mistral_sliding.

Deterministic and idempotent. Run from the repository root:

    tools/.venv/bin/python tools/make_generate_fixtures.py [CASE ...]

Naming cases writes only those, so a new case leaves the others' files as
they are, whichever transformers version wrote them.
"""
import json
import pathlib
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests" / "fixtures" / "parity"
PROMPT_LENGTHS = (1, 7, 19)
NEW_TOKENS = 24


def greedy_generations(model, seed, prompt_lengths, new_tokens):
    """prompt_<i>, tokens_<i>, logits_<i> of greedy generate from random prompts
    (ids from 3 up) of the given lengths; EOS does not stop it."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for i, length in enumerate(prompt_lengths):
        prompt = torch.randint(3, model.config.get_text_config().vocab_size, (1, length), generator=gen)
        with torch.no_grad():
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                                 pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        tensors[f"prompt_{i}"] = prompt[0].to(torch.int32)
        tensors[f"tokens_{i}"] = out.sequences[0, length:].to(torch.int32).contiguous()
        tensors[f"logits_{i}"] = torch.stack([s[0] for s in out.logits]).to(torch.float32).contiguous()
        assert tensors[f"tokens_{i}"].numel() == new_tokens
    return tensors


def main():
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    cases = sorted(p for p in PARITY.iterdir() if (p / "config.json").exists())
    wanted = sys.argv[1:] or [case.name for case in cases]
    unknown = sorted(set(wanted) - {case.name for case in cases})
    assert not unknown, f"unknown cases {unknown}"
    for case in (c for c in cases if c.name in wanted):
        config = json.loads((case / "config.json").read_text())
        # A mixture of experts runs its experts one after another, as the parity fixtures do.
        moe = {"experts_implementation": "eager"} if "num_experts_per_tok" in config else {}
        model = AutoModelForCausalLM.from_pretrained(case, torch_dtype=torch.float32, **moe)
        model.eval()
        tensors = greedy_generations(model, 1234, PROMPT_LENGTHS, NEW_TOKENS)
        save_file(tensors, str(case / "generate_expected.safetensors"))
        print(f"{case.name}: {len(PROMPT_LENGTHS)} prompts x {NEW_TOKENS} tokens")


if __name__ == "__main__":
    main()

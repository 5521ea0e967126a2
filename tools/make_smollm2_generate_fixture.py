#!/usr/bin/env python3
"""HF Transformers' greedy answers of SmolLM2-135M-Instruct, for ft's
generation on a real model (tests/cli/test_ftrun.cpp).

The model is the project's GGUF (tools/fetch_smollm2.sh) converted to HF
layout by `ftrun convert` (float32 weights, the GGUF's tokenizer and chat
template). Each prompt goes through transformers' apply_chat_template as a
user message, and `generate` answers greedily (KV cache on) until EOS
(generation_config.json) or 40 tokens. Writes
tests/fixtures/smollm2/generate_expected.json: the prompts and, for each,
the answer's token ids without EOS and whether EOS ended it.

    bash tools/fetch_smollm2.sh
    build/release/bin/ftrun convert models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol
    tools/.venv/bin/python tools/make_smollm2_generate_fixture.py /tmp/smol
"""
import json
import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "smollm2" / "generate_expected.json"
PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain what a compiler does in one sentence."]
NEW_TOKENS = 40


def main():
    model_dir = sys.argv[1]
    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    answers = []
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=NEW_TOKENS)
        tokens = out[0, ids.shape[1]:].tolist()
        ended = bool(tokens) and tokens[-1] in eos
        if ended:
            tokens = tokens[:-1]
        answers.append({"prompt": prompt, "prompt_tokens": ids.shape[1], "token_ids": tokens, "eos": ended,
                        "text": tokenizer.decode(tokens, skip_special_tokens=True)})
        print(f"{prompt!r} -> {answers[-1]['text']!r}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"max_tokens": NEW_TOKENS, "answers": answers}, indent=1) + "\n")


if __name__ == "__main__":
    main()

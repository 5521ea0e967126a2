#!/usr/bin/env python3
"""Fixtures for `ftrun eval --tasks`: a multiple-choice task in ft's item
format, and what lm-evaluation-harness's `hf` model reports on it for ft's
tiny Llama and tiny GPT-NeoX (every choice's log-likelihood and is_greedy,
acc and acc_norm with their standard errors).

The items exercise what lm-eval's request encoding does: a context with a
trailing space (it moves to the continuation), a few-shot context over
several lines, choices of different lengths (acc_norm divides by
characters, not bytes: one choice is not ASCII), more than four choices,
and for each model a choice that is its own greedy text (is_greedy true).

Needs lm-eval, torch and transformers (pip install lm-eval torch
transformers accelerate) and the tiny models' weights, which the build
writes (models/ft-tiny-*/model.safetensors). Run from the repository root:

    python tools/make_eval_task_fixtures.py
"""
import json
import os
import tempfile

import lm_eval_task

OUT = "tests/fixtures/eval_tasks"
MODELS = ["ft-tiny-llama", "ft-tiny-neox"]
ITEMS = [
    ("A hack is", ["a quick job that produces what is needed", "a kind of fish", "a color of the sky"], 0),
    ("A kludge is ", ["a clumsy but working solution", "a famous painting", "a type of bread"], 0),
    ("Question: what is a guru?\nAnswer: an expert others consult\n\nQuestion: what is a daemon?\nAnswer:",
     ["a program that runs in the background", "a mountain lake", "a sour fruit", "a winter coat"], 0),
    ("A wizard is", ["a blue stone", "a person who knows a system deeply", "a tall tree", "a dry river", "a tune"], 1),
    ("The drink is", ["tea", "café au lait", "water"], 1),
    ("A bug is", ["an unwanted behaviour of a program", "a music festival"], 0),
]


def greedy_items():
    """One item per model whose right choice is that model's greedy text
    after its context, so is_greedy is true for it under that model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    items = []
    for model in MODELS:
        path = os.path.join("models", model)
        tokenizer = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        found = None
        # The first greedy text that encodes back to the same tokens after " ".
        for context in ["The answer is", "A hack is", "It was", "Then"]:
            ids = tokenizer(context, add_special_tokens=False).input_ids
            with torch.no_grad():
                out = lm.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)[0, len(ids):].tolist()
            for n in range(len(out), 0, -1):
                text = tokenizer.decode(out[:n])
                choice = text[1:] if text.startswith(" ") else None
                if choice and tokenizer(context + " " + choice, add_special_tokens=False).input_ids[len(ids):] == out[:n]:
                    found = (context, ["nothing at all", choice], 1)
                    break
            if found:
                break
        assert found, f"no greedy text of {model} encodes back to its tokens"
        items.append(found)
    return items


def write_items(path):
    with open(path, "w") as f:
        for context, choices, gold in ITEMS + greedy_items():
            f.write(json.dumps({"context": context, "choices": choices, "gold": gold}, ensure_ascii=False) + "\n")


def expected(folder, model_dir):
    out = os.path.join(folder, "out-" + os.path.basename(model_dir))
    results, samples = lm_eval_task.run(folder, out, "hf", f"pretrained={os.path.abspath(model_dir)},dtype=float32")
    return {
        "acc": results["acc,none"], "acc_stderr": results["acc_stderr,none"],
        "acc_norm": results["acc_norm,none"], "acc_norm_stderr": results["acc_norm_stderr,none"],
        "samples": [{"loglikelihoods": [ll for ll, _ in row["responses"]],
                     "is_greedy": [greedy for _, greedy in row["responses"]],
                     "acc": row["acc"], "acc_norm": row["acc_norm"]} for row in samples],
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    items = os.path.abspath(os.path.join(OUT, "choice.jsonl"))
    write_items(items)
    with tempfile.TemporaryDirectory() as folder:
        lm_eval_task.write_task(folder, items)
        for model in MODELS:
            result = expected(folder, os.path.join("models", model))
            with open(os.path.join(OUT, model + ".json"), "w") as f:
                json.dump(result, f, indent=1)
            print(model, "acc", result["acc"], "acc_norm", result["acc_norm"])


if __name__ == "__main__":
    main()

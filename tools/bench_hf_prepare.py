#!/usr/bin/env python3
"""The HF peer of `ftrun prepare`: the same alpaca rows through the model's chat
template and HF tokenizers' batch encoding, with the prompt masked, timed.

    tools/.venv/bin/python tools/bench_hf_prepare.py [--model models/smollm2-135m-instruct/hf]
        [--data data/jargon/train.jsonl] [--max-seq-length 256]

Prints rows/s and tokens/s for rendering + batch encoding (the part HF does in
Rust), and the packing efficiency (non-pad tokens / slots) of ft's two layouts
on these lengths: padding rows of a batch of 4 to the longest (multiple of 8)
versus best-fit-decreasing packing into max_seq_length.
"""
import argparse
import json
import pathlib
import random
import time

from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct/hf"))
    p.add_argument("--data", default=str(ROOT / "data/jargon/train.jsonl"))
    p.add_argument("--max-seq-length", type=int, default=256)
    a = p.parse_args()
    tok = AutoTokenizer.from_pretrained(a.model)
    rows = [json.loads(line) for line in open(a.data, encoding="utf-8") if line.strip()]

    start = time.perf_counter()
    conversations, prompts = [], []
    for r in rows:
        user = r["instruction"] + ("\n\n" + r["input"] if r.get("input") else "")
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": r["output"]}]
        conversations.append(tok.apply_chat_template(messages, tokenize=False))
        prompts.append(tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True))
    full = tok(conversations, add_special_tokens=False)["input_ids"]
    prompt = tok(prompts, add_special_tokens=False)["input_ids"]
    lengths = [min(len(f), a.max_seq_length) for f in full]
    labels = [[-100] * len(q) + f[len(q):] for f, q in zip(full, prompt)]
    seconds = time.perf_counter() - start
    tokens = sum(len(f) for f in full)
    assert len(labels) == len(rows)
    print(f"HF tokenizers: {len(rows)} rows, {tokens} tokens in {seconds:.2f} s: "
          f"{len(rows) / seconds:.0f} rows/s, {tokens / seconds:.0f} tokens/s")

    random.seed(0)
    order = list(range(len(lengths)))
    random.shuffle(order)
    used = slots = 0
    for i in range(0, len(order) - 3, 4):
        batch = [lengths[j] for j in order[i:i + 4]]
        width = min(a.max_seq_length, (max(batch) + 7) // 8 * 8)
        used += sum(batch)
        slots += 4 * width
    padded = used / slots
    room = []
    for n in sorted(lengths, reverse=True):
        fits = [k for k, r in enumerate(room) if r >= n]
        if fits:
            k = min(fits, key=lambda k: room[k])
            room[k] -= n
        else:
            room.append(a.max_seq_length - n)
    packed = sum(lengths) / (len(room) * a.max_seq_length)
    print(f"efficiency at max_seq_length {a.max_seq_length}: padding {padded:.3f}, packing {packed:.3f} "
          f"({len(room)} packed rows for {len(lengths)} examples)")


if __name__ == "__main__":
    main()

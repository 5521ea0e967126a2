#!/usr/bin/env python3
"""The PyTorch peer of bench/train_table.cpp: seconds per training step of HF
Transformers (+ PEFT) on the same model and batch shape, on this CPU.

    tools/.venv/bin/python tools/bench_hf_train.py [--adapter full|lora|prompt] [--steps 3]
        [--model models/smollm2-135m-instruct/hf] [--batch 4] [--seq 256] [--threads 2]
        [--attn sdpa|eager]   (eager for models without an SDPA path, such as Bloom)
        [--load-in-4bit nf4|fp4 [--double-quant]]   (QLoRA: the base through bitsandbytes)

One step is forward, backward and an AdamW step on a batch of real token ids
(Jargon File rows through the chat template, concatenated and cut into rows
of --seq tokens, so every position is a real token, as packing makes them).
LoRA: r 16, alpha 32, all linear layers; prompt tuning: 20 virtual tokens.
The first step is not measured. Prints one line: seconds/step, tokens/s and
the process's peak resident memory (max RSS).
"""
import argparse
import json
import pathlib
import resource
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent


def batch_ids(tokenizer, data, batch, seq):
    ids = []
    with open(data, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            user = row["instruction"] + ("\n\n" + row["input"] if row.get("input") else "")
            messages = [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]
            ids += tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
            if len(ids) >= batch * seq:
                break
    return torch.tensor(ids[:batch * seq]).reshape(batch, seq)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--adapter", default="lora", choices=["full", "lora", "prompt"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct/hf"))
    p.add_argument("--data", default=str(ROOT / "data/jargon/train.jsonl"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    p.add_argument("--targets", default="all-linear", help="LoRA's target_modules: all-linear or a comma-separated list")
    p.add_argument("--load-in-4bit", default="", choices=["", "nf4", "fp4"], help="the base in 4 bits (bitsandbytes)")
    p.add_argument("--double-quant", action="store_true", help="with --load-in-4bit: bnb_4bit_use_double_quant")
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    tokenizer = AutoTokenizer.from_pretrained(a.model)
    extra = {}
    if a.load_in_4bit:
        from transformers import BitsAndBytesConfig
        extra = {"device_map": "cpu",
                 "quantization_config": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=a.load_in_4bit,
                                                           bnb_4bit_use_double_quant=a.double_quant,
                                                           bnb_4bit_compute_dtype=torch.float32)}
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation=a.attn, **extra)
    if a.adapter == "lora":
        from peft import LoraConfig, get_peft_model
        targets = a.targets if a.targets == "all-linear" else a.targets.split(",")
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets,
                                                 task_type="CAUSAL_LM"))
    elif a.adapter == "prompt":
        from peft import PromptTuningConfig, get_peft_model
        model = get_peft_model(model, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=20))
    model.train()
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
    ids = batch_ids(tokenizer, a.data, a.batch, a.seq)

    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    seconds = sum(times[1:]) / len(times[1:])
    base = f"{a.load_in_4bit} base" + (" (double quant)" if a.double_quant else "") if a.load_in_4bit else "fp32"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"torch {torch.__version__} ({a.threads} threads), {a.adapter}, {base}, {a.batch} x {a.seq}: "
          f"{seconds:.2f} s/step, {a.batch * a.seq / seconds:.0f} tokens/s, max RSS {rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

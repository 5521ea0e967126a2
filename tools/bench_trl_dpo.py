#!/usr/bin/env python3
"""The TRL peer of `ftrun train` with a preference objective: TRL's DPOTrainer,
ORPOTrainer or CPOTrainer with loss_type "simpo" (+ PEFT for LoRA) on the same
model, pairs and batch, on this CPU.

    tools/.venv/bin/python tools/bench_trl_dpo.py [--objective dpo|orpo|simpo] [--adapter full|lora]
        [--steps 16] [--model models/smollm2-135m-instruct/hf] [--pairs runs/bench-dpo/pairs32.jsonl]
        [--batch 2] [--max-length 256] [--threads 2]

float32, no gradient checkpointing; DPO with TRL's default reference
(computed beside training: the base with the adapter off for LoRA, a frozen
copy for full fine-tuning). LoRA: r 16, alpha 32, all linear layers. Prints
one line: seconds per step (the first left out), tokens per second (the
pairs' tokens, padding excluded, over the steps) and the process's peak
resident memory (max RSS).

`--write-pairs FILE` writes the pairs instead (the Jargon File's questions,
each entry's definition chosen and the next entry's rejected), for ft and TRL
to read the same rows.
"""
import argparse
import json
import pathlib
import resource
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def write_pairs(data, out, count):
    rows = [json.loads(line) for line in open(data, encoding="utf-8")][:count + 1]
    with open(out, "w", encoding="utf-8") as f:
        for row, other in zip(rows, rows[1:]):
            f.write(json.dumps({"prompt": row["instruction"] + "\n", "chosen": row["output"],
                                "rejected": other["output"]}, ensure_ascii=False) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--objective", default="dpo", choices=["dpo", "orpo", "simpo"])
    p.add_argument("--adapter", default="lora", choices=["full", "lora"])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--model", default=str(ROOT / "models/smollm2-135m-instruct/hf"))
    p.add_argument("--pairs", default=str(ROOT / "runs/bench-dpo/pairs32.jsonl"))
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write-pairs", default="")
    p.add_argument("--count", type=int, default=32)
    a = p.parse_args()
    if a.write_pairs:
        write_pairs(ROOT / "data/jargon/train.jsonl", a.write_pairs, a.count)
        return

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    torch.set_num_threads(a.threads)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    pairs = [json.loads(line) for line in open(a.pairs, encoding="utf-8")]
    peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM") if a.adapter == "lora" else None

    times, tokens = [], []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.start)

    config, trainer_type, extra = {"dpo": (DPOConfig, DPOTrainer, {}), "orpo": (ORPOConfig, ORPOTrainer, {}),
                                   "simpo": (CPOConfig, CPOTrainer, {"loss_type": "simpo", "cpo_alpha": 0.0})}[
        a.objective]
    with tempfile.TemporaryDirectory() as tmp:
        args = config(output_dir=tmp, per_device_train_batch_size=a.batch, max_steps=a.steps, learning_rate=5e-6,
                      max_length=a.max_length, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                      bf16=False, gradient_checkpointing=False, optim="adamw_torch", **extra)
        trainer = trainer_type(model=model, args=args, train_dataset=Dataset.from_list(pairs),
                               processing_class=tokenizer, peft_config=peft, callbacks=[Clock()])
        trainer.train()
        counts = [e["num_tokens"] for e in trainer.state.log_history if "num_tokens" in e]
        data = trainer.train_dataset
    seconds = sum(times[1:]) / max(1, len(times) - 1)
    if counts:  # DPOTrainer logs the tokens its batches held
        per_step = [b - a_ for a_, b in zip([0] + counts, counts)]
        step_tokens = sum(per_step[1:]) / max(1, len(per_step) - 1)
    else:  # CPOTrainer and ORPOTrainer cut the sequences when they tokenise: count them there
        pair_tokens = sum(len(row[k]) for row in data for k in ["chosen_input_ids", "rejected_input_ids"])
        step_tokens = pair_tokens / len(data) * a.batch
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"trl {a.objective} {a.adapter}: {seconds:.3f} s/step, {step_tokens / seconds:.1f} tokens/s, max RSS {rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

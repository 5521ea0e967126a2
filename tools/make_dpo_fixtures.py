#!/usr/bin/env python3
"""TRL's DPOTrainer on the tiny training models, for ft's preference-tuning tests.

The data are preference pairs made from tests/fixtures/train/jargon_small.jsonl:
the prompt asks what a jargon entry means, the chosen completion is that
entry's definition and the rejected one another entry's. TRL tokenises them
(each completion ends with the EOS token) and trains the tiny Llama and
GPT-NeoX models for a few steps in float64 on the CPU (the exact trajectory
that ft's float32 follows), every step on all pairs at once, so the order of
the pairs does not matter.

Outputs, in tests/fixtures/dpo/:
  pairs.jsonl            the pairs: {"prompt", "chosen", "rejected"} strings
  chat_pairs.jsonl       the same pairs as lists of messages
  implicit_pairs.jsonl   the same, the prompt implicit: the turn both conversations share
  tokens.json            TRL's prompt_ids / chosen_ids / rejected_ids of every
                         row of the three files, and the max_length of each
  <case>/trl.json        the settings, and TRL's log of every step: loss,
                         rewards/*, logps/*, logits/*
  <case>/initial_adapter/ the LoRA cases' fresh PEFT adapter, which TRL trains
  <case>/trained.safetensors
                         the trained weights: every parameter (full) or every
                         lora_A / lora_B (LoRA), as HF / PEFT name them

Run from the repository root:

    tools/.venv/bin/python tools/make_dpo_fixtures.py
"""
import json
import pathlib
import shutil
import tempfile

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRAIN = ROOT / "tests/fixtures/train"
OUT = ROOT / "tests/fixtures/dpo"

PAIRS = 6
MAX_LENGTH = 64
# case: (model, LoRA or full, loss_type, label_smoothing)
CASES = {
    "llama_full_sigmoid": ("tiny_llama", False, "sigmoid", 0.0),
    "llama_lora_sigmoid": ("tiny_llama", True, "sigmoid", 0.0),
    "llama_lora_ipo": ("tiny_llama", True, "ipo", 0.0),
    "llama_lora_hinge": ("tiny_llama", True, "hinge", 0.0),
    "llama_lora_robust": ("tiny_llama", True, "robust", 0.1),
    "llama_lora_sigmoid_norm": ("tiny_llama", True, "sigmoid_norm", 0.0),
    "neox_full_sigmoid": ("tiny_neox", False, "sigmoid", 0.0),
    "neox_lora_sigmoid": ("tiny_neox", True, "sigmoid", 0.0),
}
# AdamW's first steps move every weight by about the learning rate whatever
# its gradient, so a full fine-tune of these random models at LoRA's rate
# magnifies float32's rounding (TRL in float32 against TRL in float64: rewards
# 7e-5 apart, weights 3% apart at 5e-3; 5e-6 and 2e-5 at 1e-5), and LoRA's
# A and B likewise at 5e-3. Full fine-tuning takes 1e-5, LoRA 2e-3, and TRL
# runs in float64: the fixtures are the exact trajectory, which ft's float32
# follows within its own rounding.
LEARNING_RATE = {True: 2e-3, False: 1e-5}  # by LoRA or full
SETTINGS = {"steps": 12, "lr_scheduler_type": "linear", "beta": 0.1, "max_grad_norm": 1.0,
            "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8, "lora_r": 4,
            "lora_alpha": 8}
TARGET_MODULES = {"tiny_llama": ["q_proj", "v_proj"], "tiny_neox": ["query_key_value"]}
METRICS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected", "logits/chosen", "logits/rejected"]


def make_pairs():
    rows = [json.loads(line) for line in (TRAIN / "jargon_small.jsonl").read_text().splitlines()]
    # Short definitions, so that most sequences fit in MAX_LENGTH and some are cut.
    rows = sorted(rows, key=lambda r: len(r["output"]))[:PAIRS]
    pairs = []
    for i, row in enumerate(rows):
        other = rows[(i + 1) % len(rows)]
        pairs.append({"prompt": row["instruction"] + "\nAnswer: ", "chosen": row["output"],
                      "rejected": other["output"]})
    chat, implicit = [], []
    for p in pairs:
        user = {"role": "user", "content": p["prompt"].strip()}
        chosen = {"role": "assistant", "content": p["chosen"]}
        rejected = {"role": "assistant", "content": p["rejected"]}
        chat.append({"prompt": [user], "chosen": [chosen], "rejected": [rejected]})
        implicit.append({"chosen": [user, chosen], "rejected": [user, rejected]})
    return pairs, chat, implicit


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def tokenised(model_dir, rows, max_length):
    """TRL's tokenisation of the rows (DPOTrainer._prepare_dataset), through a trainer that trains nothing."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, max_length=max_length, report_to=[], use_cpu=True, bf16=False)
        trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tokenizer)
        data = trainer.train_dataset
        return [{"prompt_ids": r["prompt_ids"], "chosen_ids": r["chosen_ids"], "rejected_ids": r["rejected_ids"]}
                for r in data]


def start_case(case, model_name, lora, settings):
    """The model in float64 for `case`, its tokenizer and the case's fresh directory. With LoRA,
    PEFT's fresh adapter (B = 0, so the base with the adapter off is the model as training
    starts), saved so that ft starts from the same A."""
    model_dir = TRAIN / model_name
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    model.config._attn_implementation = "eager"
    directory = OUT / case
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    if lora:
        torch.manual_seed(0)
        config = LoraConfig(r=settings["lora_r"], lora_alpha=settings["lora_alpha"], lora_dropout=0.0,
                            target_modules=TARGET_MODULES[model_name], task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
        model.save_pretrained(directory / "initial_adapter")
        config_file = directory / "initial_adapter" / "adapter_config.json"
        config = json.loads(config_file.read_text().replace(str(model_dir), f"tests/fixtures/train/{model_name}"))
        config["target_modules"] = sorted(config["target_modules"])
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        (directory / "initial_adapter" / "README.md").unlink(missing_ok=True)
    return model, tokenizer, directory


def run_case(case, model_name, lora, loss_type, label_smoothing, pairs):
    s = {**SETTINGS, "learning_rate": LEARNING_RATE[lora]}
    model, tokenizer, directory = start_case(case, model_name, lora, s)
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, per_device_train_batch_size=PAIRS, max_steps=s["steps"],
                         learning_rate=s["learning_rate"], lr_scheduler_type=s["lr_scheduler_type"], beta=s["beta"],
                         loss_type=[loss_type], label_smoothing=label_smoothing, max_grad_norm=s["max_grad_norm"],
                         weight_decay=s["weight_decay"], adam_beta1=s["adam_beta1"], adam_beta2=s["adam_beta2"],
                         adam_epsilon=s["adam_epsilon"], optim="adamw_torch", max_length=MAX_LENGTH, logging_steps=1,
                         report_to=[], use_cpu=True, save_strategy="no", seed=0, dataloader_drop_last=False,
                         bf16=False, gradient_checkpointing=False)  # TRL's defaults are bf16 autocast and checkpointing
        trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(pairs),
                             processing_class=tokenizer)
        trainer.train()
        log = [{k: e[k] for k in METRICS} for e in trainer.state.log_history if "loss" in e]
        trained = trainer.model
    assert len(log) == s["steps"], log
    settings = {**s, "case": case, "model": model_name, "lora": lora, "loss_type": loss_type,
                "label_smoothing": label_smoothing, "pairs": PAIRS, "max_length": MAX_LENGTH}
    (directory / "trl.json").write_text(json.dumps({**settings, "log": log}, indent=2) + "\n")
    tensors = {}
    for name, p in trained.named_parameters():
        # TRL keeps the starting adapter as "ref", the reference; the trained one is "default".
        if lora and ("lora_" not in name or ".ref." in name):
            continue
        tensors[name.replace(".default", "")] = p.detach().float().contiguous()
    save_file(tensors, str(directory / "trained.safetensors"),
              metadata={"generator": "tools/make_dpo_fixtures.py (TRL DPOTrainer, float64, CPU)"})
    print(f"{case}: loss {log[0]['loss']:.6f} -> {log[-1]['loss']:.6f}, margin {log[-1]['rewards/margins']:.4f}")


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    pairs, chat, implicit = make_pairs()
    write_jsonl(OUT / "pairs.jsonl", pairs)
    write_jsonl(OUT / "chat_pairs.jsonl", chat)
    write_jsonl(OUT / "implicit_pairs.jsonl", implicit)
    # Lengths at which some sequences of each file are cut, and no prompt is.
    lengths = {"pairs": 48, "chat_pairs": 96, "implicit_pairs": 96}
    files = {"pairs": pairs, "chat_pairs": chat, "implicit_pairs": implicit}
    tokens = {name: {"max_length": lengths[name], "rows": tokenised(TRAIN / "tiny_llama", rows, lengths[name])}
              for name, rows in files.items()}
    (OUT / "tokens.json").write_text(json.dumps(tokens) + "\n")
    for case, (model_name, lora, loss_type, label_smoothing) in CASES.items():
        run_case(case, model_name, lora, loss_type, label_smoothing, pairs)


if __name__ == "__main__":
    main()

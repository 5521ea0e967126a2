#!/usr/bin/env python3
"""TRL's CPOTrainer (loss_type "simpo") and ORPOTrainer on the tiny training
models, for ft's SimPO and ORPO tests: the reference-free preference
objectives. Same pairs, models and settings as tools/make_dpo_fixtures.py
(float64 on the CPU, every step on all pairs at once); these trainers live
in trl.experimental and tokenise pairs their own way (BOS and EOS added by
id where missing, only the completion cut at max_length).

Outputs, in tests/fixtures/dpo/:
  cpo_tokens.json        CPOTrainer's chosen / rejected input_ids and labels
                         of every row of pairs.jsonl, chat_pairs.jsonl and
                         implicit_pairs.jsonl, for the tiny Llama and GPT-NeoX
                         tokenizers, and the max_length of each
  <case>/trl.json        the settings, and TRL's log of every step: loss,
                         rewards/*, logps/*, nll_loss (and ORPO's
                         log_odds_ratio, log_odds_chosen)
  <case>/initial_adapter/ the LoRA cases' fresh PEFT adapter
  <case>/trained.safetensors
                         the trained weights, as HF / PEFT name them

Run from the repository root, after tools/make_dpo_fixtures.py (which writes the pairs):

    tools/.venv/bin/python tools/make_simpo_orpo_fixtures.py
"""
import json
import tempfile

import torch
from datasets import Dataset
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.experimental.cpo import CPOConfig, CPOTrainer
from trl.experimental.orpo import ORPOConfig, ORPOTrainer

from make_dpo_fixtures import LEARNING_RATE, MAX_LENGTH, OUT, PAIRS, SETTINGS, TRAIN, start_case

# case: (objective, model, LoRA or full, extra settings)
CASES = {
    "llama_full_simpo": ("simpo", "tiny_llama", False, {"simpo_gamma": 0.5, "cpo_alpha": 0.0, "beta": 2.0}),
    "llama_lora_simpo": ("simpo", "tiny_llama", True, {"simpo_gamma": 0.5, "cpo_alpha": 0.0, "beta": 2.0}),
    "llama_lora_cpo_simpo": ("simpo", "tiny_llama", True,
                             {"simpo_gamma": 1.0, "cpo_alpha": 1.0, "beta": 2.0, "label_smoothing": 0.1}),
    "neox_lora_simpo": ("simpo", "tiny_neox", True, {"simpo_gamma": 0.5, "cpo_alpha": 0.0, "beta": 2.0}),
    "llama_full_orpo": ("orpo", "tiny_llama", False, {"beta": 1.0}),
    "llama_lora_orpo": ("orpo", "tiny_llama", True, {"beta": 1.0}),
    "neox_full_orpo": ("orpo", "tiny_neox", False, {"beta": 1.0}),
    "neox_lora_orpo": ("orpo", "tiny_neox", True, {"beta": 1.0}),
}
METRICS = {
    "simpo": ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
              "logps/rejected", "nll_loss"],
    "orpo": ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
             "logps/rejected", "nll_loss", "log_odds_ratio", "log_odds_chosen"],
}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def trainer_for(objective, model, tokenizer, rows, directory, **settings):
    config, trainer = (CPOConfig, CPOTrainer) if objective == "simpo" else (ORPOConfig, ORPOTrainer)
    extra = {"loss_type": "simpo"} if objective == "simpo" else {}
    args = config(output_dir=directory, report_to=[], use_cpu=True, bf16=False, gradient_checkpointing=False,
                  save_strategy="no", seed=0, dataloader_drop_last=False, logging_steps=1, **extra, **settings)
    return trainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def tokenised(model_name, rows, max_length):
    """CPOTrainer's tokenisation of the rows (ORPOTrainer's is the same), through a trainer that trains nothing."""
    model_dir = TRAIN / model_name
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for("simpo", model, tokenizer, rows, tmp, max_length=max_length)
        return [{k: r[k] for k in ["chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels"]}
                for r in trainer.train_dataset]


def run_case(case, objective, model_name, lora, extra, pairs):
    s = {**SETTINGS, "learning_rate": LEARNING_RATE[lora], "label_smoothing": 0.0, **extra}
    model, tokenizer, directory = start_case(case, model_name, lora, s)
    settings = dict(per_device_train_batch_size=PAIRS, max_steps=s["steps"], learning_rate=s["learning_rate"],
                    lr_scheduler_type=s["lr_scheduler_type"], beta=s["beta"], max_grad_norm=s["max_grad_norm"],
                    weight_decay=s["weight_decay"], adam_beta1=s["adam_beta1"], adam_beta2=s["adam_beta2"],
                    adam_epsilon=s["adam_epsilon"], optim="adamw_torch", max_length=MAX_LENGTH)
    if objective == "simpo":
        settings.update(simpo_gamma=s["simpo_gamma"], cpo_alpha=s["cpo_alpha"], label_smoothing=s["label_smoothing"])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(objective, model, tokenizer, pairs, tmp, **settings)
        trainer.train()
        log = [{k: e[k] for k in METRICS[objective]} for e in trainer.state.log_history if "loss" in e]
        trained = trainer.model
    assert len(log) == s["steps"], log
    written = {**s, "case": case, "objective": objective, "model": model_name, "lora": lora, "pairs": PAIRS,
               "max_length": MAX_LENGTH}
    (directory / "trl.json").write_text(json.dumps({**written, "log": log}, indent=2) + "\n")
    tensors = {}
    for name, p in trained.named_parameters():
        if lora and "lora_" not in name:
            continue
        tensors[name.replace(".default", "")] = p.detach().float().contiguous()
    save_file(tensors, str(directory / "trained.safetensors"),
              metadata={"generator": f"tools/make_simpo_orpo_fixtures.py (TRL {objective}, float64, CPU)"})
    print(f"{case}: loss {log[0]['loss']:.6f} -> {log[-1]['loss']:.6f}, margin {log[-1]['rewards/margins']:.4f}")


def main():
    torch.set_num_threads(1)
    files = {name: read_jsonl(OUT / f"{name}.jsonl") for name in ["pairs", "chat_pairs", "implicit_pairs"]}
    # Lengths at which some completions of each file are cut, and no prompt fills them.
    lengths = {"pairs": 48, "chat_pairs": 96, "implicit_pairs": 96}
    tokens = {}
    for model_name in ["tiny_llama", "tiny_neox"]:
        for name, rows in files.items():
            tokens[f"{model_name}/{name}"] = {"max_length": lengths[name],
                                              "rows": tokenised(model_name, rows, lengths[name])}
    (OUT / "cpo_tokens.json").write_text(json.dumps(tokens) + "\n")
    for case, (objective, model_name, lora, extra) in CASES.items():
        run_case(case, objective, model_name, lora, extra, files["pairs"])


if __name__ == "__main__":
    main()

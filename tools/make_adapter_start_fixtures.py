"""PEFT continuing a trained LoRA adapter, for ft's `[lora] init_from` tests.

A run that starts from an existing adapter must continue it as PEFT does
(`PeftModel.from_pretrained(base, dir, is_trainable=True)` then training):
these fixtures are PEFT's own continuation, six AdamW steps on fixed rows,
so the tests compare ft's run against it without PEFT at test time.

Inputs (tools/make_train_fixtures.py): the base tests/fixtures/train/tiny_llama,
the adapter tests/fixtures/train/tiny_llama_lora/adapter (r 4, alpha 8,
random A and B on every projection) and that case's batch.json (2 rows x 12
tokens, some labels -100).

Outputs, in tests/fixtures/adapter_start/:
  rows.jsonl           the batch's rows in ft's "tokens" data format
  adapter_bin/         the same adapter as PEFT writes it with
                       safe_serialization=False (adapter_model.bin)
  trajectory.json      the training settings, the loss of each step as PEFT
                       computes it before that step's update, and the loss
                       after the last update (loss_after)
  trained.safetensors  every lora_A / lora_B after the six steps, PEFT's names
  adapter_rslora/      the same adapter marked rank-stabilised (use_rslora:
                       scale alpha / sqrt(r) = 4 where LoRA's is alpha / r = 2)
  trajectory_rslora.json, trained_rslora.safetensors
                       PEFT continuing adapter_rslora the same way

PEFT runs in float64 from the float32 files: AdamW (torch's), constant
learning rate, no warmup, the global gradient norm clipped, the loss the mean
over the batch's scored tokens (HF's shift). Run from the repository root:

    tools/.venv/bin/python tools/make_adapter_start_fixtures.py
"""
import json
import pathlib
import shutil

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = ROOT / "tests/fixtures/train/tiny_llama"
CASE = ROOT / "tests/fixtures/train/tiny_llama_lora"
OUT = ROOT / "tests/fixtures/adapter_start"

SETTINGS = {"steps": 6, "learning_rate": 1e-2, "weight_decay": 0.01, "adam_beta1": 0.9, "adam_beta2": 0.999,
            "adam_epsilon": 1e-8, "max_grad_norm": 1.0}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    batch = json.loads((CASE / "batch.json").read_text())
    with open(OUT / "rows.jsonl", "w") as f:
        for ids, labels in zip(batch["input_ids"], batch["labels"]):
            f.write(json.dumps({"input_ids": ids, "labels": labels}) + "\n")
    input_ids, labels = torch.tensor(batch["input_ids"]), torch.tensor(batch["labels"])

    base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, CASE / "adapter", is_trainable=True)

    # The same adapter in PEFT's other file format.
    shutil.rmtree(OUT / "adapter_bin", ignore_errors=True)
    model.save_pretrained(OUT / "adapter_bin", safe_serialization=False)
    tidy_config(OUT / "adapter_bin")
    (OUT / "adapter_bin" / "README.md").unlink(missing_ok=True)
    continue_training(model, input_ids, labels, "")

    # The same weights as a rank-stabilised adapter.
    shutil.rmtree(OUT / "adapter_rslora", ignore_errors=True)
    shutil.copytree(CASE / "adapter", OUT / "adapter_rslora")
    config_file = OUT / "adapter_rslora" / "adapter_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "use_rslora": True}, indent=2) + "\n")
    tidy_config(OUT / "adapter_rslora")
    base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, OUT / "adapter_rslora", is_trainable=True)
    assert model.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"] == 4.0
    continue_training(model, input_ids, labels, "_rslora")


def tidy_config(adapter):
    config_file = adapter / "adapter_config.json"  # a path that means something on every machine
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = "tests/fixtures/train/tiny_llama"
    config["target_modules"] = sorted(config["target_modules"])  # a set in PEFT: its order changes between runs
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


# Six AdamW steps of PEFT on the rows; writes trajectory{suffix}.json and trained{suffix}.safetensors.
def continue_training(model, input_ids, labels, suffix):
    model = model.double()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and all(p.dtype == torch.float64 for p in params)
    s = SETTINGS
    optimizer = torch.optim.AdamW(params, lr=s["learning_rate"], betas=(s["adam_beta1"], s["adam_beta2"]),
                                  eps=s["adam_epsilon"], weight_decay=s["weight_decay"])

    def batch_loss():  # HF's own loss casts the logits to float32; the reference keeps float64
        logits = model(input_ids=input_ids).logits
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1), ignore_index=-100)

    losses = []
    for _ in range(s["steps"]):
        optimizer.zero_grad(set_to_none=True)
        loss = batch_loss()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s["max_grad_norm"])
        optimizer.step()
        losses.append(loss.item())

    with torch.no_grad():
        after = batch_loss().item()
    (OUT / f"trajectory{suffix}.json").write_text(
        json.dumps({**s, "loss": losses, "loss_after": after}, indent=2) + "\n")
    trained = {n.replace(".default", ""): p.detach().float().contiguous()
               for n, p in model.named_parameters() if p.requires_grad}
    save_file(trained, OUT / f"trained{suffix}.safetensors",
              metadata={"generator": "tools/make_adapter_start_fixtures.py (PEFT, float64)"})
    print(f"{suffix or 'lora'}: {len(trained)} trained tensors; loss {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main()

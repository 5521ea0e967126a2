#!/usr/bin/env python3
"""4-bit bases saved by transformers + bitsandbytes, and PEFT's QLoRA on them, for ft's tests.

Each case loads a tiny parity model (tests/fixtures/parity/<base>, float32)
with load_in_4bit, saves it as transformers does (the packed weights and
their quant state beside the unquantized embeddings, norms, biases and
head), puts PEFT's LoRA on every linear module (r 4, alpha 8, no dropout,
every lora_A and lora_B drawn at random), and runs the parity fixtures'
batch forward and backward on the CPU in float32, as a QLoRA step runs.

Outputs, in tests/fixtures/quant/<case>/:
  model/                  the 4-bit model as save_pretrained writes it
  adapter/                PEFT's adapter
  expected.safetensors    loss, logits, and grad.<PEFT tensor name> for every
                          lora_A / lora_B
  rows.jsonl              the batch's rows in ft's "tokens" data format
  trajectory.json         PEFT continuing that adapter over the saved 4-bit
                          model for 20 AdamW steps: the settings, each step's
                          loss before its update, the loss after the last
  trained.safetensors     every lora_A / lora_B after the 20 steps

Run from the repository root:

    tools/.venv/bin/python tools/make_qlora_fixtures.py
"""
import json
import pathlib
import shutil

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests/fixtures/parity"
OUT = ROOT / "tests/fixtures/quant"

CASES = {
    # case: (base, quant type, double quantization)
    "llama_nf4_double": ("llama_gqa", "nf4", True),
    "llama_fp4": ("llama_gqa", "fp4", False),
    "neox_nf4": ("neox_parallel", "nf4", False),
}

# The trajectory's settings: torch's AdamW, constant learning rate, the global
# gradient norm clipped, the loss HF's mean over the scored tokens.
SETTINGS = {"steps": 20, "learning_rate": 5e-3, "weight_decay": 0.01, "adam_beta1": 0.9, "adam_beta2": 0.999,
            "adam_epsilon": 1e-8, "max_grad_norm": 1.0}


def make_case(case, base, kind, double, seed):
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=kind,
                                      bnb_4bit_use_double_quant=double, bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(PARITY / base, quantization_config=quantization,
                                                 dtype=torch.float32, device_map="cpu")
    model.config._attn_implementation = "eager"
    directory = OUT / case
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory / "model")

    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
    peft_model.save_pretrained(directory / "adapter")
    config_file = directory / "adapter" / "adapter_config.json"  # a path that means something on every machine
    config = json.loads(config_file.read_text().replace(str(PARITY / base), f"tests/fixtures/quant/{case}/model"))
    config["target_modules"] = sorted(config["target_modules"])  # a set in PEFT: its order changes between runs
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (directory / "adapter" / "README.md").unlink(missing_ok=True)

    batch = load_file(str(PARITY / base / "expected.safetensors"))
    peft_model.train()
    out = peft_model(input_ids=batch["input_ids"], labels=batch["labels"])
    out.loss.backward()
    expected = {"loss": out.loss.detach().float().reshape(()), "logits": out.logits.detach().float().contiguous()}
    for name, p in peft_model.named_parameters():
        if "lora_" in name:
            expected["grad." + name.replace(".default", "")] = p.grad.float().contiguous()
    save_file(expected, str(directory / "expected.safetensors"),
              metadata={"generator": "tools/make_qlora_fixtures.py (PEFT over bitsandbytes, float32, CPU)"})
    print(f"{case}: loss {out.loss.item():.6f}, {len(expected) - 2} LoRA gradients")
    write_trajectory(directory, batch["input_ids"], batch["labels"])


# PEFT continuing the saved adapter over the saved 4-bit model, as a QLoRA run
# started from that adapter trains: float32 on the CPU, bitsandbytes
# dequantizing each layer as it runs.
def write_trajectory(directory, input_ids, labels):
    with open(directory / "rows.jsonl", "w") as f:
        for ids, row_labels in zip(input_ids.tolist(), labels.tolist()):
            f.write(json.dumps({"input_ids": ids, "labels": row_labels}) + "\n")
    base = AutoModelForCausalLM.from_pretrained(directory / "model", dtype=torch.float32, device_map="cpu")
    base.config._attn_implementation = "eager"
    model = PeftModel.from_pretrained(base, directory / "adapter", is_trainable=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and all(p.dtype == torch.float32 for p in params)
    s = SETTINGS
    optimizer = torch.optim.AdamW(params, lr=s["learning_rate"], betas=(s["adam_beta1"], s["adam_beta2"]),
                                  eps=s["adam_epsilon"], weight_decay=s["weight_decay"])
    losses = []
    for _ in range(s["steps"]):
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s["max_grad_norm"])
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = model(input_ids=input_ids, labels=labels).loss.item()
    (directory / "trajectory.json").write_text(json.dumps({**s, "loss": losses, "loss_after": after}, indent=2) + "\n")
    trained = {n.replace(".default", ""): p.detach().float().contiguous()
               for n, p in model.named_parameters() if p.requires_grad}
    save_file(trained, str(directory / "trained.safetensors"),
              metadata={"generator": "tools/make_qlora_fixtures.py (PEFT over bitsandbytes, float32, CPU)"})
    print(f"  trajectory: loss {losses[0]:.6f} -> {losses[-1]:.6f} -> {after:.6f}")


def main():
    torch.set_num_threads(1)
    for seed, (case, (base, kind, double)) in enumerate(CASES.items(), start=1):
        make_case(case, base, kind, double, seed)


if __name__ == "__main__":
    main()

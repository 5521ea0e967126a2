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

Run from the repository root:

    tools/.venv/bin/python tools/make_qlora_fixtures.py
"""
import pathlib
import shutil

import torch
from peft import LoraConfig, get_peft_model
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
    config_file.write_text(config_file.read_text().replace(str(PARITY / base), f"tests/fixtures/quant/{case}/model"))
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


def main():
    torch.set_num_threads(1)
    for seed, (case, (base, kind, double)) in enumerate(CASES.items(), start=1):
        make_case(case, base, kind, double, seed)


if __name__ == "__main__":
    main()

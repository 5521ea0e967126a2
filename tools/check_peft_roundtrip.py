"""Checks that PEFT loads LoRA adapters and merged models that ft writes.

    tools/.venv/bin/python tools/check_peft_roundtrip.py build/release/bin/ftrun

For each adapter in tests/fixtures/peft (written by PEFT itself), ft converts it
to float16 and bfloat16 (`ftrun convert ADAPTER OUT --dtype ...`) and merges it
into its base model (`ftrun convert BASE OUT --merge-lora ADAPTER`). PEFT must
load ft's adapter directories onto the base model and give the logits of the
original adapter (within the new dtype's rounding), and transformers must load
ft's merged model and give the logits of PEFT's own merge. Exit status 0 when
every check holds.
"""
import pathlib
import subprocess
import sys
import tempfile

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = ROOT / "tests/fixtures/parity/llama_gqa"
ADAPTERS = ["llama_gqa_lora", "llama_gqa_rslora"]
IDS = torch.tensor([[1, 5, 9, 33, 7, 100, 64, 2]])


def logits(model):
    with torch.no_grad():
        return model(IDS).logits.float()


def main():
    ftrun = sys.argv[1]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in ADAPTERS:
            adapter = ROOT / "tests/fixtures/peft" / name
            base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
            reference = logits(PeftModel.from_pretrained(base, adapter).merge_and_unload())
            for dtype, tolerance in [("float16", 1e-2), ("bfloat16", 5e-2)]:
                out = pathlib.Path(tmp) / f"{name}-{dtype}"
                subprocess.run([ftrun, "convert", str(adapter), str(out), "--dtype", dtype], check=True,
                               stdout=subprocess.DEVNULL)
                base = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
                got = logits(PeftModel.from_pretrained(base, out))
                diff = (got - reference).abs().max().item()
                ok &= diff < tolerance
                print(f"{name}: PEFT loads ft's {dtype} adapter; max |logits - PEFT's| = {diff:.2e}")
            merged = pathlib.Path(tmp) / f"{name}-merged"
            subprocess.run([ftrun, "convert", str(BASE), str(merged), "--merge-lora", str(adapter)], check=True,
                           stdout=subprocess.DEVNULL)
            diff = (logits(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)) - reference).abs().max().item()
            ok &= diff < 1e-4
            print(f"{name}: transformers loads ft's merged model; max |logits - PEFT merge| = {diff:.2e}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

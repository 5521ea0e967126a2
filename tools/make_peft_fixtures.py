"""LoRA adapters written by PEFT, and the weights PEFT's merge gives, for ft's tests.

ft reads PEFT adapter directories (adapter_config.json, adapter_model.safetensors)
and merges them into a base model in `ftrun convert --merge-lora`; these fixtures
let the tests check both against PEFT itself, without PEFT at test time.

Base model: tests/fixtures/parity/llama_gqa (made by make_parity_fixtures.py).
Outputs, in tests/fixtures/peft/:
  llama_gqa_lora/        PEFT adapter: r=4, alpha=8, q/k/down projections, random B
  llama_gqa_rslora/      rank-stabilised variant (scale alpha/sqrt(r)), embeddings adapted too
  <name>.merged.safetensors   every weight after merge_and_unload(), float32

Run: tools/.venv/bin/python tools/make_peft_fixtures.py
"""
import pathlib
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = ROOT / "tests/fixtures/parity/llama_gqa"
OUT = ROOT / "tests/fixtures/peft"

CASES = {
    "llama_gqa_lora": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "down_proj"],
                                 lora_dropout=0.0, task_type="CAUSAL_LM"),
    "llama_gqa_rslora": LoraConfig(r=8, lora_alpha=4, use_rslora=True,
                                   target_modules=["v_proj", "gate_proj", "embed_tokens"],
                                   lora_dropout=0.0, task_type="CAUSAL_LM"),
}


def main():
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, config in CASES.items():
        model = AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float32)
        peft_model = get_peft_model(model, config)
        with torch.no_grad():  # PEFT starts B (or embedding A) at zero: randomise every adapter weight
            for pname, p in peft_model.named_parameters():
                if "lora_" in pname:
                    p.normal_(0.0, 0.2)
        target = OUT / name
        shutil.rmtree(target, ignore_errors=True)
        peft_model.save_pretrained(target)
        config_file = target / "adapter_config.json"  # a path that means something on every machine
        config_file.write_text(config_file.read_text().replace(str(BASE), "tests/fixtures/parity/llama_gqa"))
        (target / "README.md").unlink(missing_ok=True)
        merged = peft_model.merge_and_unload()
        tensors = {k: v.detach().contiguous() for k, v in merged.state_dict().items()}
        if merged.config.tie_word_embeddings:
            tensors.pop("lm_head.weight", None)
        save_file(tensors, OUT / f"{name}.merged.safetensors")
        size = sum(f.stat().st_size for f in target.iterdir())
        print(f"{name}: {len(tensors)} merged tensors, adapter {size} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PEFT LoRA adapters on the tiny mixtures of experts, and PEFT's float64 results, for ft's tests.

PEFT 0.21 on transformers 5 adapts a mixture of experts' stacked expert
weights and routers as parameters (`target_parameters`, its ParamWrapper), and
its "all-linear" resolves differently per architecture: Mixtral and Qwen3-MoE
get the attention, the routers and the experts (gate_up_proj at twice the
rank and alpha, by `rank_pattern`), Qwen2-MoE its nn.Linear modules (the
attention, the shared expert and its gate), GraniteMoE the attention only,
GraniteMoeShared the attention and its shared_mlp.
These fixtures pin down ft's LoRA against that, without PEFT at test time.

Base models: tests/fixtures/parity/<base> (made by make_parity_fixtures.py),
with the batch stored there (input_ids and labels of expected.safetensors).
Outputs, in tests/fixtures/peft/moe/<case>/:
  adapter/                 PEFT's adapter (r 4, alpha 8, no dropout), every lora_B
                           and lora_A drawn at random (float32)
  expected.safetensors     loss (HF's, with the load-balancing loss where the
                           config adds it), logits, and grad.<PEFT tensor name>
                           for every lora_A / lora_B, computed by PEFT in float64

The adapters' weights are redrawn until every token of the batch chooses its
experts by a clear margin (as make_parity_fixtures.py does for the routers),
so float32 rounding cannot change a choice. Run from the repository root:

    tools/.venv/bin/python tools/make_moe_lora_fixtures.py
"""
import pathlib
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests/fixtures/parity"
OUT = ROOT / "tests/fixtures/peft/moe"

ROUTING_GAP = 0.02  # the least gap between a token's k-th and (k+1)-th router logit

CASES = {
    # case: (base, LoraConfig keyword arguments)
    "mixtral_all_linear": ("mixtral_top2", dict(target_modules="all-linear")),
    "qwen3_moe_all_linear": ("qwen3_moe_sparse_step", dict(target_modules="all-linear")),
    "qwen2_moe_all_linear": ("qwen2_moe_shared", dict(target_modules="all-linear")),
    "granite_moe_all_linear": ("granite_moe_top2", dict(target_modules="all-linear")),
    "granite_moe_shared_all_linear": ("granite_moe_shared", dict(target_modules="all-linear")),
    "mixtral_parameters_rslora": ("mixtral_top2", dict(target_modules=["v_proj"],
                                                       target_parameters=["down_proj", "gate.weight"],
                                                       use_rslora=True)),
}


def load_base(base, dtype):
    model = AutoModelForCausalLM.from_pretrained(PARITY / base, dtype=dtype)
    model.config._attn_implementation = "eager"
    model.config._experts_implementation = "eager"  # grouped_mm refuses float64
    return model


def routing(model, input_ids):
    """The smallest gap between a token's k-th and (k+1)-th router logit, over sparse layers."""
    k = model.config.num_experts_per_tok
    with torch.no_grad():
        out = model(input_ids=input_ids, output_router_logits=True)
    gaps = []
    for logits in out.router_logits:
        top = logits.double().topk(k + 1, dim=-1)
        gaps.append((top.values[:, k - 1] - top.values[:, k]).min().item())
    return min(gaps)


def make_case(case, base, kwargs, seed):
    batch = load_file(str(PARITY / base / "expected.safetensors"))
    input_ids, labels = batch["input_ids"], batch["labels"]
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM", **kwargs)
    for attempt in range(100):
        model = get_peft_model(load_base(base, torch.float32), config)
        gen = torch.Generator().manual_seed(seed * 1000 + attempt)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.copy_(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
        model64 = get_peft_model(load_base(base, torch.float64), config)
        model64.load_state_dict({n: p.double() for n, p in model.state_dict().items()})
        gap = routing(model64, input_ids)
        if gap > ROUTING_GAP:
            break
    else:
        raise AssertionError(f"{case}: no draw of the adapter separates every token's choice of experts")

    directory = OUT / case
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory / "adapter")
    config_file = directory / "adapter" / "adapter_config.json"  # a path that means something on every machine
    config_file.write_text(config_file.read_text().replace(str(PARITY / base), f"tests/fixtures/parity/{base}"))
    (directory / "adapter" / "README.md").unlink(missing_ok=True)

    model64.train()
    out = model64(input_ids=input_ids, labels=labels)
    out.loss.backward()
    expected = {"loss": out.loss.detach().float().reshape(()), "logits": out.logits.detach().float().contiguous()}
    for name, p in model64.named_parameters():
        if "lora_" in name:
            expected["grad." + name.replace(".default", "")] = p.grad.float().contiguous()
        else:
            assert p.grad is None, name  # the base stays frozen
    save_file(expected, str(directory / "expected.safetensors"),
              metadata={"generator": "tools/make_moe_lora_fixtures.py (PEFT, float64)"})
    saved = load_file(str(directory / "adapter" / "adapter_model.safetensors"))
    print(f"{case}: {len(saved)} adapter tensors, loss {out.loss.item():.6f}, "
          f"adapter drawn {attempt + 1} times, smallest routing gap {gap:.3f}")


def main():
    torch.set_num_threads(1)
    for seed, (case, (base, kwargs)) in enumerate(CASES.items(), start=1):
        make_case(case, base, kwargs, seed)


if __name__ == "__main__":
    main()

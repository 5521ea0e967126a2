#!/usr/bin/env python3
"""GPTQ checkpoints in GPTQModel's (and AutoGPTQ's) format, for ft's tests.

Each case takes tests/fixtures/train/tiny_llama and replaces every linear
weight of its layers by GPTQ's packed form, as GPTQModel saves a quantized
model and transformers loads it:
  <module>.qweight  int32 [in * bits / 32, out]   codes along the input, the
                                                   k-th of a word at bits * k
  <module>.qzeros   int32 [groups, out * bits / 32]  zero points, packed along
                                                   the output the same way
  <module>.scales   fp16  [groups, out]
  <module>.g_idx    int32 [in]                    the group of each input row
and config.json's quantization_config (quant_method "gptq", bits, group_size,
desc_act, sym, checkpoint_format). The codes, zeros and scales are drawn at
random: these fixtures pin the format and the dequantization, not GPTQ's
search for good codes.

The "gptq" checkpoint format (v1) stores each zero point less one, as
AutoGPTQ did; "gptq_v2" stores it as it is. The weight is
  W[o, i] = scales[g_idx[i], o] * (q[i, o] - zero[g_idx[i], o])
in fp16, as GPTQModel's torch kernel computes it (the int difference times
the fp16 scale, rounded to fp16). That reference is written beside each
case as the whole model (`dequantized/`, fp16 weights), so tests compare
ft's reading of the packed model with it.

    tools/.venv/bin/python tools/make_gptq_fixtures.py
"""
import json
import pathlib
import shutil

import torch
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = ROOT / "tests/fixtures/train/tiny_llama"
OUT = ROOT / "tests/fixtures/gptq"

CASES = {
    # case: (bits, group_size, desc_act, checkpoint_format)
    "tiny_llama_4bit_g16": (4, 16, False, "gptq"),
    "tiny_llama_4bit_desc_act": (4, 16, True, "gptq"),
    "tiny_llama_8bit_v2": (8, 32, False, "gptq_v2"),
    "tiny_llama_2bit": (2, -1, False, "gptq"),
}
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def pack(values, bits, dim):
    """int codes packed 32 / bits to an int32 word along `dim`, the k-th at bits * k."""
    per = 32 // bits
    v = values.to(torch.int64)
    if dim == 1:
        v = v.t()
    rows, cols = v.shape
    v = v.reshape(rows // per, per, cols)
    word = torch.zeros(rows // per, cols, dtype=torch.int64)
    for k in range(per):
        word |= v[:, k, :] << (bits * k)
    word = ((word + 2**31) % 2**32 - 2**31).to(torch.int32)  # the same 32 bits, as int32
    return word if dim == 0 else word.t().contiguous()


def unpack(words, bits, dim):
    per = 32 // bits
    w = words.to(torch.int64) & 0xFFFFFFFF
    if dim == 1:
        w = w.t()
    parts = [(w >> (bits * k)) & ((1 << bits) - 1) for k in range(per)]
    v = torch.stack(parts, dim=1).reshape(w.shape[0] * per, w.shape[1])
    return v if dim == 0 else v.t()


def make_case(name, bits, group_size, desc_act, checkpoint_format, seed):
    gen = torch.Generator().manual_seed(seed)
    tensors = load_file(str(BASE / "model.safetensors"))
    packed, whole = {}, {}
    for key, value in tensors.items():
        module = key.rsplit(".", 1)[0]
        if not (key.endswith(".weight") and module.rsplit(".", 1)[-1] in LINEAR):
            packed[key] = value
            whole[key] = value
            continue
        out_features, in_features = value.shape
        group = in_features if group_size == -1 else group_size
        groups = in_features // group
        g_idx = torch.arange(in_features, dtype=torch.int32) // group
        if desc_act:  # act-order: input rows quantized in another order, each keeping its group
            g_idx = g_idx[torch.randperm(in_features, generator=gen)]
        q = torch.randint(0, 2**bits, (in_features, out_features), generator=gen)
        zero = torch.randint(1, 2**bits, (groups, out_features), generator=gen)  # v1 stores zero - 1 >= 0
        scales = (value.abs().amax() / 2**bits * (0.5 + torch.rand(groups, out_features, generator=gen))).half()
        stored_zero = zero - 1 if checkpoint_format == "gptq" else zero
        packed[module + ".qweight"] = pack(q, bits, 0)
        packed[module + ".qzeros"] = pack(stored_zero, bits, 1)
        packed[module + ".scales"] = scales
        packed[module + ".g_idx"] = g_idx
        # The reference: unpacked again from the stored words, as a reader does.
        codes = unpack(packed[module + ".qweight"], bits, 0)
        zeros = unpack(packed[module + ".qzeros"], bits, 1) + (1 if checkpoint_format == "gptq" else 0)
        gi = g_idx.long()
        weight = scales[gi] * (codes - zeros[gi]).to(torch.float16)  # fp16, [in, out]
        assert torch.equal(codes, q) and torch.equal(zeros, zero)
        whole[key] = weight.t().contiguous()

    directory = OUT / name
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "dequantized").mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BASE / f, directory / f)
    config = json.loads((BASE / "config.json").read_text())
    (directory / "dequantized" / "config.json").write_text(json.dumps(config, indent=2))
    config["quantization_config"] = {"quant_method": "gptq", "bits": bits, "group_size": group_size,
                                     "desc_act": desc_act, "sym": True, "checkpoint_format": checkpoint_format,
                                     "damp_percent": 0.01, "true_sequential": True}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(packed, str(directory / "model.safetensors"), metadata={"format": "pt"})
    save_file(whole, str(directory / "dequantized" / "model.safetensors"), metadata={"format": "pt"})
    print(f"{name}: {bits}-bit, group {group_size}, desc_act {desc_act}, {checkpoint_format}")


def main():
    for seed, (name, args) in enumerate(CASES.items(), start=1):
        make_case(name, *args, seed)


if __name__ == "__main__":
    main()

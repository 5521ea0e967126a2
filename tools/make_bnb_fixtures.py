#!/usr/bin/env python3
"""What bitsandbytes makes of a set of weights, for tests/quant: the 4-bit
codes and absmax of quantize_4bit (NF4 and FP4, every block size, with and
without double quantization) and the weights it dequantizes back to.

    python3 tools/make_bnb_fixtures.py [OUT]   (default tests/fixtures/quant/bnb4.safetensors)

Inputs cover normal and heavy-tailed values, all-zero blocks, values exactly
on the code books' midpoints (a block whose absmax is 1 scales by exactly
1), odd counts, short last blocks, and bf16 weights. The largest case is not
stored: its values are an integer hash that tests/quant recomputes, and it
has enough blocks (over 131072) for every level of torch's cascaded sum in
the double-quantization offset. torch runs on one thread, because torch
splits a sum of more than 32768 values among its threads and the offset's
last bit then depends on how many there are.
"""
import json
import sys

import numpy as np
import torch
import bitsandbytes.functional as F
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
from safetensors.torch import save_file


def hashed(n, scale):
    """float32 values from an integer hash, computed the same way in C++."""
    i = np.arange(n, dtype=np.uint64)
    h = ((i * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.uint32)
    x = h.astype(np.float32) * np.float32(2.0 ** -32) - np.float32(0.5)
    return torch.from_numpy((x * np.float32(scale)).astype(np.float32))


def reference_dequantize(q, state):
    """bitsandbytes' reference dequantization (its torch kernel), not the
    native CPU one: that one's vector path indexes absmax by rows, which
    is wrong for rows that are not a whole number of blocks, and writes
    FP4's negative zero as +0."""
    absmax = state.absmax
    if state.nested:
        absmax = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
    code = F.get_4bit_type(state.quant_type, device="cpu")
    return _dequantize_4bit_compute(q.reshape(-1), absmax.float(), code, state.blocksize, state.shape, state.dtype)


def fnv1a(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def midpoints(kind):
    code = np.sort(F.get_4bit_type(kind, device="cpu").numpy())
    return ((code[:-1] + code[1:]) / np.float32(2)).astype(np.float32)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/quant/bnb4.safetensors"
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    tensors, cases = {}, []

    def add(name, x, kind, blocksize, double, stored=True):
        q, state = F.quantize_4bit(x, blocksize=blocksize, compress_statistics=double, quant_type=kind)
        deq = reference_dequantize(q, state).float()
        case = {"name": name, "type": kind, "blocksize": blocksize, "double_quant": double,
                "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
        if stored:
            tensors[f"{name}.input"] = x.contiguous()
            tensors[f"{name}.packed"] = q.reshape(-1).contiguous()
            tensors[f"{name}.dequantized"] = deq.reshape(-1).contiguous()
        else:
            # Megabytes of codes: their FNV-1a hash, and the dequantized values' sum.
            case["hashed"] = {"count": x.numel(), "scale": 0.25, "packed_fnv1a": fnv1a(q.reshape(-1).numpy().tobytes()),
                              "dequantized_sum": float(deq.double().sum())}
        if double:
            tensors[f"{name}.absmax"] = state.absmax.contiguous()
            tensors[f"{name}.nested_absmax"] = state.state2.absmax.contiguous()
            tensors[f"{name}.offset"] = state.offset.reshape(1).float().contiguous()
        else:
            tensors[f"{name}.absmax"] = state.absmax.contiguous()
        cases.append(case)

    for kind in ("nf4", "fp4"):
        for blocksize in (32, 64, 128, 256, 512, 1024, 2048, 4096):
            for double in (False, True):
                tag = f"{kind}_b{blocksize}_{'dq' if double else 'plain'}"
                n = 3 * blocksize + 37  # a short last block, an odd count
                x = torch.randn(n, generator=g) * 0.05
                add(f"{tag}_normal", x, kind, blocksize, double)
        for double in (False, True):
            tag = f"{kind}_{'dq' if double else 'plain'}"
            # Heavy tails: a Cauchy-like ratio, so one value dominates its block.
            x = torch.randn(64, 96, generator=g) / (torch.rand(64, 96, generator=g) + 0.01)
            add(f"{tag}_heavy", x, kind, 64, double)
            # Zero blocks, whole and short.
            x = torch.randn(5 * 64 + 9, generator=g)
            x[64:192] = 0
            x[320:] = 0
            add(f"{tag}_zeros", x, kind, 64, double)
            # Every midpoint exactly, both signs, in blocks holding 1.0.
            m = midpoints(kind)
            row = np.concatenate([[1.0], m, -m, [0.0, -0.0]]).astype(np.float32)
            x = torch.from_numpy(np.resize(row, 4 * 64).astype(np.float32))
            add(f"{tag}_ties", x, kind, 64, double)
            # bf16 weights at a weight's shape.
            x = (torch.randn(48, 80, generator=g) * 0.02).to(torch.bfloat16)
            add(f"{tag}_bf16", x, kind, 64, double)
            add(f"{tag}_odd", torch.randn(7, 9, generator=g), kind, 32, double)
    # Enough blocks for every level of torch's cascaded sum.
    add("nf4_dq_hashed", hashed(140_000 * 32 + 5, 0.25), "nf4", 32, True, stored=False)

    save_file(tensors, out, metadata={"cases": json.dumps(cases), "bitsandbytes": __import__("bitsandbytes").__version__,
                                      "torch": torch.__version__})
    print(f"{len(cases)} cases in {out}")


if __name__ == "__main__":
    main()

"""torchao's 4-bit AdamW, step by step, for ft's adamw4bit to equal to the bit.

torchao.optim.AdamW4bit (Li et al. 2023, "Memory efficient optimizers with
4-bit states") keeps each moment of a tensor of at least 4096 elements, whose
count is a multiple of 128, in blocks of 128: one f32 scale per block (its
largest magnitude) and a 4-bit code per element, two to a byte, the first
element in the high nibble. The first moment's codes index a signed 16-value
dynamic map, the second's the unsigned linear map 1/16 .. 1 (no zero). Other
tensors keep plain moments in the parameter's dtype. Each step runs in float32
(torchao's single_param_adam): lerp the decoded moments towards the gradient
and its square, update with them, and encode them again.

torchao compiles that step with torch.compile, which on a CPU generates C++
whose arithmetic the compiler may fuse differently; the fixtures run it eagerly
(torch's own kernels), which is what the C++ follows.

Output: tests/fixtures/optim/adamw4bit.json. Run:
    tools/.venv/bin/python tools/make_adamw4bit_fixtures.py
"""
import json
import pathlib
import sys

import numpy as np
import torch

torch.compile = lambda fn, **_: fn  # eager: torch's kernels, not generated code
from torchao.optim import AdamW4bit  # noqa: E402
from torchao.optim.subclass_4bit import OptimState4bit, get_qmap_signed  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_optimizer_fixtures import hashed_values  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/optim/adamw4bit.json"
STEPS = 6


def hexes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes().hex()


def state_record(state):
    record = {}
    for key in ("exp_avg", "exp_avg_sq"):
        t = state[key]
        if isinstance(t, OptimState4bit):
            record[key + "_codes"] = hexes(t.codes)
            record[key + "_scale"] = hexes(t.scale)
        else:
            record[key] = hexes(t)
    return record


def gradient(case, step, n):
    """Step `step`'s gradient (from 1): hashed values that grow each step, one block of 128 zero."""
    g = torch.from_numpy(hashed_values(1000 * case + step, n)) * torch.tensor(0.5 + step, dtype=torch.float32)
    g[256:384] = 0
    return g


def run(case, name, n, dtype, hyper):
    """The inputs are hashed values (make_optimizer_fixtures.py), which the test computes too."""
    p = torch.nn.Parameter(torch.from_numpy(hashed_values(100 + case, n)).to(dtype))
    opt = AdamW4bit([p], lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                    weight_decay=hyper["weight_decay"])
    record = {"case": case, "name": name, "n": n, "dtype": str(dtype).removeprefix("torch.")}
    for step in range(1, STEPS + 1):
        p.grad = gradient(case, step, n).to(dtype)
        opt.step()
        if step == 1:
            record["first_state"] = state_record(opt.state[p])
    record["final_state"] = state_record(opt.state[p])
    record["final"] = hexes(p)
    return record


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    hyper = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1}
    cases = [
        run(0, "quantized", 8192, torch.float32, hyper),
        run(1, "quantized_odd_blocks", 4096 + 3 * 128, torch.float32, hyper),
        run(2, "small", 1000, torch.float32, hyper),  # plain moments: fewer than 4096
        run(3, "not_whole_blocks", 4100, torch.float32, hyper),  # plain moments: 4100 % 128 != 0
        run(4, "quantized_bf16", 4096, torch.bfloat16, hyper),
        run(5, "small_bf16", 200, torch.bfloat16, hyper),
    ]
    signed = np.array(get_qmap_signed(), dtype=np.float32)
    OUT.write_text(json.dumps({"hyper": hyper, "signed_map": signed.tobytes().hex(), "cases": cases}) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

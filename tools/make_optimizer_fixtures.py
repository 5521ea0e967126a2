"""Reference trajectories of optimizers, schedules and clipping for ft's tests.

ft's updates must match what users compare against: torch.optim.SGD and AdamW,
Lion as Chen et al. 2023 define it (written here in float64; torch has none),
transformers' get_scheduler, and torch.nn.utils.clip_grad_norm_.

Output: tests/fixtures/optim/reference.json (small). Run:
    tools/.venv/bin/python tools/make_optimizer_fixtures.py
"""
import json
import pathlib

import torch
from transformers import get_scheduler

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/fixtures/optim"
STEPS = 6


def trajectory(make_optimizer, p0, grads):
    p = torch.nn.Parameter(p0.clone())
    opt = make_optimizer([p])
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append(p.detach().tolist())
    return out


def lion(p0, grads, lr, wd, b1, b2):
    p, m, out = p0.clone(), torch.zeros_like(p0), []
    for g in grads:
        p = p * (1 - lr * wd)
        p = p - lr * torch.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
        out.append(p.tolist())
    return out


def main():
    torch.manual_seed(0)
    n = 64
    p0 = torch.randn(n, dtype=torch.float64)
    grads = [torch.randn(n, dtype=torch.float64) * (0.1 + s) for s in range(STEPS)]
    cases = {
        "sgd": ({"lr": 0.05, "weight_decay": 0.0}, lambda ps: torch.optim.SGD(ps, lr=0.05)),
        "sgd_momentum": ({"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
                         lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
        "sgd_nesterov": ({"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
                         lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
        "adamw": ({"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1},
                  lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)),
    }
    reference = {"initial": p0.tolist(), "grads": [g.tolist() for g in grads], "optimizers": {}}
    for name, (hyper, make) in cases.items():
        reference["optimizers"][name] = {"hyper": hyper, "trajectory": trajectory(make, p0, grads)}
    hyper = {"lr": 0.01, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1}
    reference["optimizers"]["lion"] = {"hyper": hyper, "trajectory": lion(p0, grads, 0.01, 0.1, 0.9, 0.99)}

    schedules = []
    for kind, warmup, total in [("linear", 3, 10), ("cosine", 2, 12), ("constant_with_warmup", 4, 9),
                                ("constant", 0, 5), ("linear", 0, 7), ("cosine", 0, 1)]:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.5)
        sched = get_scheduler(kind, opt, num_warmup_steps=warmup, num_training_steps=total)
        rates = []
        for _ in range(total + 2):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        schedules.append({"kind": kind, "lr": 0.5, "warmup": warmup, "total": total, "rates": rates})
    reference["schedules"] = schedules

    clip = []
    for max_norm in [0.5, 1e6]:
        gs = [g.clone() for g in grads[:3]]
        ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in gs]
        for p, g in zip(ps, gs):
            p.grad = g
        norm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        clip.append({"max_norm": max_norm, "norm": norm.item(), "clipped": [p.grad.tolist() for p in ps]})
    reference["clip"] = clip

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "reference.json").write_text(json.dumps(reference))
    print(OUT / "reference.json", (OUT / "reference.json").stat().st_size, "bytes")


if __name__ == "__main__":
    main()

"""Reference trajectories of optimizers, schedules and clipping for ft's tests.

ft's updates must match what users compare against: torch.optim.SGD and AdamW,
Lion as Chen et al. 2023 define it (written here in float64; torch has none),
transformers' get_scheduler, and torch.nn.utils.clip_grad_norm_; Adafactor as
transformers.optimization.Adafactor runs it, in float64; and 8-bit AdamW as a
numpy model of the scheme in include/ft/optim/adamw8bit.hpp, written apart from
the C++ so that the two check each other bit for bit.

Output: tests/fixtures/optim/reference.json, adafactor.json, adamw8bit.json
(small). Run:
    tools/.venv/bin/python tools/make_optimizer_fixtures.py
"""
import json
import pathlib

import numpy as np
import torch
from transformers import get_scheduler
from transformers.optimization import Adafactor

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

    write("reference.json", reference)
    write("adafactor.json", adafactor_reference())
    write("adamw8bit.json", adamw8bit_reference())


def write(name, data):
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps(data))
    print(OUT / name, (OUT / name).stat().st_size, "bytes")


# ---- Adafactor ---------------------------------------------------------------

ADAFACTOR_CASES = {
    "no_momentum": dict(lr=1e-2, relative_step=False, scale_parameter=False, warmup_init=False, beta1=None,
                        weight_decay=0.01),
    "relative_warmup": dict(lr=None, relative_step=True, scale_parameter=True, warmup_init=True),
    "momentum": dict(lr=1e-3, beta1=0.9, relative_step=False),
    "relative_clipped": dict(lr=None, relative_step=True, scale_parameter=True, clip_threshold=0.5,
                             decay_rate=-0.5, weight_decay=0.1),
}


def adafactor_reference():
    """transformers' Adafactor on float64 tensors of rank 1, 2 and 3, step by step."""
    gen = torch.Generator().manual_seed(1)
    tensors = {}
    for name, shape in [("matrix", [6, 10]), ("vector", [7]), ("stack", [2, 3, 4])]:
        p0 = torch.randn(shape, generator=gen, dtype=torch.float64)
        grads = [torch.randn(shape, generator=gen, dtype=torch.float64) * (0.5 + s) for s in range(STEPS)]
        tensors[name] = {"shape": shape, "initial": p0.flatten().tolist(),
                         "grads": [g.flatten().tolist() for g in grads]}
    cases = {}
    for case, options in ADAFACTOR_CASES.items():
        trajectories = {}
        for name, t in tensors.items():
            p = torch.nn.Parameter(torch.tensor(t["initial"], dtype=torch.float64).reshape(t["shape"]))
            opt = Adafactor([p], **options)
            trajectories[name] = []
            for g in t["grads"]:
                p.grad = torch.tensor(g, dtype=torch.float64).reshape(t["shape"])
                opt.step()
                trajectories[name].append(p.detach().flatten().tolist())
        cases[case] = {"options": options, "trajectories": trajectories}
    return {"tensors": tensors, "cases": cases}


# ---- 8-bit AdamW -------------------------------------------------------------
# The scheme of include/ft/optim/adamw8bit.hpp, modelled in numpy float32: per
# block of 256, decode m and v, AdamW with every product that feeds a sum fused
# (fma32), encode at the block's new absmax to the nearest map value; a positive
# v never takes code 0.

BLOCK = 256
F32 = np.float32


def dynamic_map(signed):
    """value[code]: magnitude c in decade E = bits - 1 - (c.bit_length() - 1), fraction k = c - 2^f."""
    bits = 7 if signed else 8
    magnitudes = [0.0]
    for c in range(1, 2 ** bits):
        f = c.bit_length() - 1
        decade = bits - 1 - f
        magnitudes.append((1 + 9 * (c - 2 ** f + 1) / 2 ** f) / float(10 ** (decade + 1)))
    magnitudes = np.array(magnitudes, dtype=np.float64).astype(F32)
    value = np.concatenate([magnitudes, -magnitudes]) if signed else magnitudes
    wide = magnitudes.astype(np.float64)
    return value, (wide[:-1] + wide[1:]) / 2


def encode(x, magnitudes_midpoints, signed):
    """The nearest magnitude is the count of midpoints below |x| (a tie goes to the smaller)."""
    a = np.abs(x) if signed else x
    code = np.searchsorted(magnitudes_midpoints, a.astype(np.float64), side="left").astype(np.uint8)
    if signed:
        code = np.where((x < 0) & (code > 0), code | np.uint8(0x80), code).astype(np.uint8)
    return code


def fma32(a, b, c):
    """a * b + c rounded once to float32, for float32 inputs: the product is exact in
    float64, TwoSum gives the float64 sum and its exact error, and a sum that lies
    exactly halfway between two float32 values is nudged towards its error."""
    a, b, c = (np.asarray(x, dtype=F32).astype(np.float64) for x in (a, b, c))
    product = a * b
    s = product + c
    t = s - product
    error = (product - (s - t)) + (c - t)
    halfway = (s.view(np.uint64) & np.uint64((1 << 29) - 1)) == np.uint64(1 << 28)
    s = np.where(halfway & (error != 0), np.nextafter(s, np.where(error > 0, np.inf, -np.inf)), s)
    out = s.astype(F32)
    assert np.all((out == 0) | (np.abs(out) >= np.finfo(F32).tiny)), "fma32 models normal results only"
    return out


def per_block(x, n):
    return np.repeat(x, BLOCK)[:n]


def block_max(x):
    padded = np.zeros(-(-x.size // BLOCK) * BLOCK, dtype=F32)
    padded[:x.size] = x
    return padded.reshape(-1, BLOCK).max(axis=1)


def adamw8bit_steps(p, grads, hyper):
    smap, smid = dynamic_map(True)
    umap, umid = dynamic_map(False)
    n = p.size
    m_q, v_q = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    m_absmax = v_absmax = np.zeros(-(-n // BLOCK), F32)
    lr, wd, b1, b2, eps = (F32(hyper[k]) for k in ("lr", "weight_decay", "beta1", "beta2", "eps"))
    out = []
    for t, g in enumerate(grads, start=1):
        bias1, bias2 = F32(1) - b1 ** F32(t), F32(1) - b2 ** F32(t)
        decay = fma32(-lr, wd, F32(1))
        m = fma32(b1, smap[m_q] * per_block(m_absmax, n), (F32(1) - b1) * g)
        v = fma32(b2, umap[v_q] * per_block(v_absmax, n), (F32(1) - b2) * g * g)
        denom = np.sqrt(v) / np.sqrt(bias2) + eps
        p = fma32(p, decay, -((lr / bias1) * m / denom))
        m_absmax, v_absmax = block_max(np.abs(m)), block_max(v)
        m_scale, v_scale = per_block(m_absmax, n), per_block(v_absmax, n)
        safe_m, safe_v = np.where(m_scale > 0, m_scale, F32(1)), np.where(v_scale > 0, v_scale, F32(1))
        m_q = np.where(m_scale > 0, encode(m / safe_m, smid, True), 0).astype(np.uint8)
        v_q = np.where(v_scale > 0, encode(v / safe_v, umid, False), 0).astype(np.uint8)
        v_q = np.where((v_q == 0) & (v > 0), 1, v_q).astype(np.uint8)  # a positive v is never 0
        out.append({"m_q": m_q.tobytes().hex(), "v_q": v_q.tobytes().hex(),
                    "m_absmax": m_absmax.astype(np.float64).tolist(), "v_absmax": v_absmax.astype(np.float64).tolist()})
    return p, out


def hashed_values(salt, n):
    """Inputs both sides compute exactly: splitmix64 of (salt << 32 | i) gives a 24-bit
    fraction u and an exponent e; value = (u / 2^24 - 1/2) 2^-(e + 3 ((i / 256) mod 5))."""
    z = (np.uint64(salt) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    fraction = (z >> np.uint64(40)).astype(F32) / F32(1 << 24) - F32(0.5)
    exponent = ((z >> np.uint64(8)) & np.uint64(7)).astype(np.int32) + 3 * ((np.arange(n) // BLOCK) % 5)
    return np.ldexp(fraction, -exponent).astype(F32)


def adamw8bit_reference():
    n, steps = 5000, 4
    hyper = {"lr": 1e-2, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    p0 = hashed_values(0, n)
    grads = [hashed_values(s, n) for s in range(1, steps + 1)]
    p, states = adamw8bit_steps(p0, grads, hyper)
    return {"n": n, "hyper": hyper, "signed_map": dynamic_map(True)[0].tobytes().hex(),
            "unsigned_map": dynamic_map(False)[0].tobytes().hex(), "initial_head": p0[:BLOCK].tobytes().hex(),
            "grad_head": grads[0][:BLOCK].tobytes().hex(),
            "states": states, "final": p.tobytes().hex()}


if __name__ == "__main__":
    main()

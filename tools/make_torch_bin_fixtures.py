"""Legacy torch.save checkpoints (pytorch_model*.bin) for ft's reader tests.

ft reads these zip + pickle files without Python; the fixtures cover what
torch.save really writes for state dicts: every storage dtype ft knows,
tensors that share a storage, strided views, storage offsets, sharded
checkpoints with an index, and a pickle that builds an object ft must refuse.

Outputs, in tests/fixtures/torch/:
  llama_gqa_bin/     config.json + pytorch_model.bin of tests/fixtures/parity/llama_gqa
  smollm2_sharded/   config.json + two pytorch_model-0000N-of-00002.bin + index
  odd.bin            storages shared, transposed, offset; f32/bf16/f16/i64
  odd.expected.safetensors   the same tensors, contiguous
  not_a_state_dict.bin       a pickle that builds a user class

Run: tools/.venv/bin/python tools/make_torch_bin_fixtures.py
"""
import json
import pathlib
import shutil

import torch
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARITY = ROOT / "tests/fixtures/parity"
OUT = ROOT / "tests/fixtures/torch"


class Opaque:
    """Stands for any object a pickle may build; ft must refuse it."""


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)

    single = OUT / "llama_gqa_bin"
    single.mkdir()
    shutil.copy(PARITY / "llama_gqa/config.json", single)
    torch.save(load_file(PARITY / "llama_gqa/model.safetensors"), single / "pytorch_model.bin")

    sharded = OUT / "smollm2_sharded"
    sharded.mkdir()
    shutil.copy(PARITY / "smollm2_tied/config.json", sharded)
    tensors = load_file(PARITY / "smollm2_tied/model.safetensors")
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(halves):
        file = f"pytorch_model-{i + 1:05d}-of-00002.bin"
        torch.save({n: tensors[n] for n in part}, sharded / file)
        weight_map.update({n: file for n in part})
    (sharded / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(t.numel() * 4 for t in tensors.values())},
                    "weight_map": weight_map}, indent=2))

    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    halves16 = torch.arange(10, dtype=torch.float16) / 3
    odd = {
        "a": a,
        "a_t": a.t(),                      # shares a's storage, strided
        "a_row": a[1],                     # shares a's storage, offset 4
        "b": torch.linspace(-2, 2, 5, dtype=torch.bfloat16),
        "c": halves16[2:7],                # offset into a half storage
        "i": torch.tensor([1, -2, 3 << 40], dtype=torch.int64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }
    torch.save(odd, OUT / "odd.bin")
    save_file({k: v.contiguous().clone() for k, v in odd.items()}, OUT / "odd.expected.safetensors")
    torch.save({"weight": torch.ones(2), "extra": Opaque()}, OUT / "not_a_state_dict.bin")
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f.relative_to(ROOT), f.stat().st_size)


if __name__ == "__main__":
    main()

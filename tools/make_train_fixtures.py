#!/usr/bin/env python3
"""Writes tiny trainable models, a small data set and LoRA references under tests/fixtures/train/.

Training tests need a model that is small enough to train for a few steps in a
test, yet is a real HF checkpoint with a real tokenizer and chat template, so
the whole path (tokenise, template, batch, train, save, reload in HF) runs as
it does on a real model. These are those models, and the references that pin
down ft's LoRA against PEFT's.

Outputs, in tests/fixtures/train/:
  tiny_llama/        LlamaForCausalLM: hidden 32, 2 layers, 4 heads (2 KV), ffn 64,
                     tied embeddings, random weights (std 0.02, vocabulary matrices 0.5, norms 1), float32
  tiny_neox/         GPTNeoXForCausalLM: hidden 32, 2 layers, 4 heads, ffn 128,
                     rotary fraction 0.25, parallel residual, untied head
                     Both hold config.json, model.safetensors, tokenizer.json and
                     tokenizer_config.json (eos "<|im_end|>", pad "<|endoftext|>",
                     SmolLM2's ChatML template). The tokenizer is a byte-level BPE
                     of 512 tokens trained on data/jargon/train.jsonl.
  jargon_small.jsonl             the first 48 rows of data/jargon/train.jsonl whose
                                 instruction + input + output is under 400 characters
  jargon_small_validation.jsonl  the 8 such rows after them
  <model>_lora/adapter/          a PEFT adapter (r 4, alpha 8, no dropout, random B)
  <model>_lora/batch.json        2 rows x 12 tokens: input_ids and labels (some -100)
  <model>_lora/expected.safetensors
      loss (mean over scored tokens, HF's shift), logits [2, 12, V] and
      grad.<PEFT tensor name> for every lora_A / lora_B weight, computed by
      PEFT in float64 from the float32 weights and stored as float32.
  <model>_prompt/adapter/        a PEFT prompt-tuning adapter: 6 virtual tokens, initialised
                                 from PROMPT_TEXT, then moved by noise (std 0.1)
  <model>_prompt/expected.safetensors
      init (the virtual tokens as PEFT initialises them from the text), and on the
      LoRA case's batch: loss, logits [2, 6 + 12, V] and grad.prompt_embeddings,
      from PEFT in float64.

Deterministic (fixed seeds, one CPU thread; a run is compared against a
second tokenizer training) and idempotent. Run from the repository root:

    tools/.venv/bin/python tools/make_train_fixtures.py
"""
import copy
import json
import pathlib
import shutil

import torch
from peft import LoraConfig, PeftModel, PromptTuningConfig, get_peft_model
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)
from transformers.utils import logging as hf_logging

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "train"
JARGON = ROOT / "data" / "jargon" / "train.jsonl"
TEMPLATE = ROOT / "tests" / "fixtures" / "chat_templates" / "smollm2.jinja"  # SmolLM2's ChatML template

VOCAB = 512
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as in SmolLM2
SMALL_ROWS, VALIDATION_ROWS, MAX_CHARS = 48, 8, 400
BATCH, SEQ = 2, 12
LIMIT = 400 * 1024  # bytes per directory

PROMPT_TOKENS, PROMPT_TEXT = 6, "Explain the jargon term"

LORA = {
    "tiny_llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "tiny_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
}


def jargon_rows():
    with open(JARGON, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def row_text(row):
    return row["instruction"] + row.get("input", "") + row["output"]


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(rows):
    """A SmolLM2-shaped byte-level BPE (digits split, no prefix space) trained on the jargon text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [t for row in rows for t in (row["instruction"], row.get("input", ""), row["output"]) if t]
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def tokenizer_config():
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIAL)}
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": "<|im_start|>",
        "chat_template": TEMPLATE.read_text(encoding="utf-8"),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "extra_special_tokens": {},
        "model_max_length": 512,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>",
        "vocab_size": VOCAB,
    }


def write_tokenizer(tok, directory):
    tok.save(str(directory / "tokenizer.json"))
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------- models

def tiny_llama():
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.02, attention_dropout=0.0,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ))


def tiny_neox():
    return GPTNeoXForCausalLM(GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=512, layer_norm_eps=1e-5, hidden_act="gelu",
        use_parallel_residual=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        initializer_range=0.02, attention_dropout=0.0, hidden_dropout=0.0,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ))


MODELS = {"tiny_llama": tiny_llama, "tiny_neox": tiny_neox}


@torch.no_grad()
def plain_init(model, gen):
    """Linear weights N(0, 0.02), token embeddings and the output layer N(0, 0.5);
    norm weights 1 and every bias 0. The wider vocabulary matrices let a small
    adapter move the logits far enough for a short test run to show learning
    (at 0.02 on a 32-wide model, logits stay within about +-0.1 of each other)."""
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, torch.nn.LayerNorm) or "RMSNorm" in type(module).__name__:
                p.fill_(1.0 if name == "weight" else 0.0)
            elif name == "bias":
                p.zero_()
            else:
                std = 0.5 if p.shape[0] == model.config.vocab_size else 0.02
                p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def make_model(name, tok, seed):
    directory = OUT / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    torch.manual_seed(seed)
    model = MODELS[name]().float()
    plain_init(model, torch.Generator().manual_seed(seed))
    model.save_pretrained(directory, safe_serialization=True)
    for f in directory.iterdir():
        if f.name not in {"config.json", "model.safetensors"}:
            f.unlink()
    write_tokenizer(tok, directory)
    return directory


def check_model_dir(directory, small):
    """transformers loads the directory; the tokenizer and chat template work."""
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id == 0
    assert len(tokenizer) == VOCAB, len(tokenizer)
    row = small[0]
    messages = [{"role": "user", "content": row["instruction"]}, {"role": "assistant", "content": row["output"]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith(row["output"] + "<|im_end|>\n"), text[-80:]
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert ids.count(1) == 3 and ids.count(2) == 3  # three <|im_start|>, three <|im_end|>
    with torch.no_grad():
        out = model(torch.tensor([ids]), labels=torch.tensor([ids]))
    print(f"  [{directory.name}] {sum(p.numel() for p in model.parameters())} parameters, "
          f"chat row of {len(ids)} tokens, loss {out.loss.item():.4f} (log V = {torch.log(torch.tensor(VOCAB)):.4f})")
    return ids


# ---------------------------------------------------------------- LoRA references

def make_batch(ids, gen):
    """Row 0: the start of a chat-formatted example, prompt masked; row 1: random ids, two labels masked."""
    row0 = torch.tensor(ids[:SEQ])
    row1 = torch.randint(3, VOCAB, (SEQ,), generator=gen)
    input_ids = torch.stack([row0, row1])
    labels = input_ids.clone()
    labels[0, :4] = -100
    labels[1, torch.tensor([3, 8])] = -100
    return input_ids, labels


def save_adapter(model, case, name, **paths):
    """PEFT's save_pretrained into case/adapter, without machine paths or a set's order in the config."""
    model.save_pretrained(case / "adapter")
    (case / "adapter" / "README.md").unlink(missing_ok=True)
    config_file = case / "adapter" / "adapter_config.json"
    adapter_config = json.loads(config_file.read_text())
    adapter_config["base_model_name_or_path"] = f"tests/fixtures/train/{name}"
    for key in paths:
        adapter_config[key] = f"tests/fixtures/train/{name}"
    if isinstance(adapter_config.get("target_modules"), list):
        adapter_config["target_modules"] = sorted(adapter_config["target_modules"])
    config_file.write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")


def check_reloads(directory, case, model, input_ids):
    """The adapter as saved reproduces the model it came from."""
    reloaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager"),
        case / "adapter")
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids=input_ids).logits, model(input_ids=input_ids).logits)


def lora_case(name, directory, ids, seed):
    case = OUT / f"{name}_lora"
    shutil.rmtree(case, ignore_errors=True)
    (case / "adapter").mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)

    base = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=LORA[name], task_type="CAUSAL_LM")
    torch.manual_seed(seed)
    peft32 = get_peft_model(base, config)
    with torch.no_grad():  # A as PEFT draws it (U(+-1/sqrt(in))), B small and non-zero
        for pname, p in peft32.named_parameters():
            if "lora_A" in pname:
                bound = 1.0 / p.shape[1] ** 0.5
                p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound)
            elif "lora_B" in pname:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    save_adapter(peft32, case, name)

    input_ids, labels = make_batch(ids, gen)
    with open(case / "batch.json", "w") as f:
        json.dump({"input_ids": input_ids.tolist(), "labels": labels.tolist()}, f)
        f.write("\n")

    def run(model):
        model.train()
        model.zero_grad(set_to_none=True)
        out = model(input_ids=input_ids, labels=labels)
        out.loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        return out.logits.detach(), out.loss.detach(), grads

    peft64 = copy.deepcopy(peft32).double()
    logits64, loss64, grads64 = run(peft64)
    logits32, loss32, grads32 = run(peft32)

    vocab = logits64.shape[-1]
    own = torch.nn.functional.cross_entropy(logits64[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1),
                                            ignore_index=-100)
    assert abs(own.item() - loss64.item()) < 1e-6 * own.item()

    with safe_open(str(case / "adapter" / "adapter_model.safetensors"), "pt") as f:
        saved = set(f.keys())
    expected = {"logits": logits64.float().contiguous(), "loss": loss64.float().reshape(()).contiguous()}
    for pname, g in grads64.items():
        assert "lora_" in pname, pname  # the base stays frozen
        file_name = pname.replace(".default.weight", ".weight")
        assert file_name in saved, file_name
        assert g.abs().max() > 0, pname
        expected[f"grad.{file_name}"] = g.float().contiguous()
    assert len(grads64) == len(saved) == 2 * len(LORA[name]) * base.config.num_hidden_layers
    save_file(expected, str(case / "expected.safetensors"),
              metadata={"generator": "tools/make_train_fixtures.py (PEFT, float64)"})

    check_reloads(directory, case, peft32, input_ids)
    with torch.no_grad():
        with peft32.disable_adapter():
            plain = peft32(input_ids).logits
    effect = (logits64.float() - plain).abs().max().item()
    worst = max(((grads32[n] - grads64[n]).abs().max() / grads64[n].abs().max()).item() for n in grads64)
    print(f"  [{case.name}] loss {loss64.item():.6f}, {len(grads64)} LoRA gradients, adapter moves logits by "
          f"{effect:.3f}; HF fp32 vs fp64: logits {(logits32 - logits64).abs().max().item():.1e}, "
          f"worst grad {worst:.1e}")
    return case, input_ids, labels


def prompt_case(name, directory, input_ids, labels, seed):
    case = OUT / f"{name}_prompt"
    shutil.rmtree(case, ignore_errors=True)
    (case / "adapter").mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)

    base = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    config = PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=PROMPT_TOKENS, prompt_tuning_init="TEXT",
                                prompt_tuning_init_text=PROMPT_TEXT, tokenizer_name_or_path=str(directory))
    peft32 = get_peft_model(base, config)
    table = peft32.prompt_encoder.default.embedding.weight
    init = table.detach().clone()
    with torch.no_grad():  # away from the text's embeddings, so loading is not initialising
        table.add_(0.1 * torch.randn(table.shape, generator=gen, dtype=torch.float64).float())
    save_adapter(peft32, case, name, tokenizer_name_or_path=True)

    peft64 = copy.deepcopy(peft32).double()
    peft64.train()
    out = peft64(input_ids=input_ids, labels=labels)
    out.loss.backward()
    grads = {n: p.grad for n, p in peft64.named_parameters() if p.requires_grad}
    assert list(grads) == ["prompt_encoder.default.embedding.weight"], list(grads)
    grad = grads["prompt_encoder.default.embedding.weight"]
    assert out.logits.shape[1] == PROMPT_TOKENS + input_ids.shape[1]
    assert grad.abs().max() > 0

    with safe_open(str(case / "adapter" / "adapter_model.safetensors"), "pt") as f:
        assert set(f.keys()) == {"prompt_embeddings"}, set(f.keys())
    expected = {"init": init.contiguous(), "logits": out.logits.detach().float().contiguous(),
                "loss": out.loss.detach().float().reshape(()).contiguous(),
                "grad.prompt_embeddings": grad.float().contiguous()}
    save_file(expected, str(case / "expected.safetensors"),
              metadata={"generator": "tools/make_train_fixtures.py (PEFT, float64)"})

    check_reloads(directory, case, peft32, input_ids)
    print(f"  [{case.name}] {PROMPT_TOKENS} virtual tokens from {PROMPT_TEXT!r}, loss {out.loss.item():.6f}")
    return case


def dir_size(path):
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main():
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    OUT.mkdir(parents=True, exist_ok=True)

    rows = jargon_rows()
    short = [r for r in rows if len(row_text(r)) < MAX_CHARS]
    small, validation = short[:SMALL_ROWS], short[SMALL_ROWS:SMALL_ROWS + VALIDATION_ROWS]
    for file, subset in [("jargon_small.jsonl", small), ("jargon_small_validation.jsonl", validation)]:
        with open(OUT / file, "w", encoding="utf-8") as f:
            for r in subset:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"jargon: {len(small)} + {len(validation)} rows of {len(short)} under {MAX_CHARS} characters")

    tok = train_tokenizer(rows)
    again = train_tokenizer(rows)
    assert tok.to_str() == again.to_str(), "BPE training is not deterministic"
    assert tok.get_vocab_size() == VOCAB and [tok.token_to_id(s) for s in SPECIAL] == [0, 1, 2]

    for seed, name in enumerate(MODELS, start=2024):
        print(f"{name}:")
        directory = make_model(name, tok, seed)
        ids = check_model_dir(directory, small)
        case, input_ids, labels = lora_case(name, directory, ids, seed + 100)
        prompt = prompt_case(name, directory, input_ids, labels, seed + 200)
        for d in (directory, case, prompt):
            size = dir_size(d)
            print(f"  {d.relative_to(ROOT)}: {size / 1024:.1f} KiB")
            assert size < LIMIT, f"{d} is {size} bytes"


if __name__ == "__main__":
    main()

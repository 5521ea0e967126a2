#!/usr/bin/env python3
"""Writes the GGUF fixtures under tests/fixtures/gguf/ for tests/io/test_gguf.cpp.

ft reads GGUF files (llama.cpp's format) and dequantises their tensors in C++
(include/ft/io/gguf.hpp, ggml_quants.hpp). These fixtures pin down what the
reference implementation, the `gguf` Python package that llama.cpp maintains,
reads from the same bytes, so the C++ tests need neither Python nor llama.cpp.

  quants.gguf                  one 3 x 512 tensor per ggml type ft dequantises (F32, F16,
                               BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), named after it
                               in lower case. Q8_0/Q4_0/Q4_1 come from gguf.quants.quantize
                               of random values; the K types (which the package cannot
                               quantise) are random bytes with f16 scales set to sane,
                               zero and subnormal values; F16 and BF16 include zeros,
                               infinities, NaN and subnormals.
  quants_expected.safetensors  gguf.quants.dequantize of each tensor, float32, same names.
  ggml_type_sizes.json         gguf's GGML_QUANT_SIZES: name -> [id, block size, block bytes].
  tiny_llama.gguf              a Llama GGUF (2 layers, d=64, 4 heads, 2 KV heads, tied
                               embeddings) with a byte-level BPE vocabulary trained here
                               (tokenizer.ggml.pre "smollm"), mixed tensor types, and
                               blk.0.attn_q/attn_k in F32 holding 1000 * row + column, so a
                               test can see exactly where each GGUF row went.
  tiny_llama_spm.gguf          the same model with a SentencePiece vocabulary
                               (tokenizer.ggml.model "llama": scores, byte tokens).

It also writes the seed corpus of the fuzz target tests/fuzz/gguf.cpp, files of
a few hundred bytes under tests/fuzz/corpus/gguf/: every metadata value type
(nested arrays too) with one block of every supported tensor type, and two tiny
vocabularies (byte-level BPE, SentencePiece).

Deterministic (fixed seeds) and idempotent (every output is overwritten). Run
from the repository root:

    tools/.venv/bin/python tools/make_gguf_fixtures.py
"""
import collections
import json
import pathlib

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import gguf
from gguf import GGMLQuantizationType as Q

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf"

CORPUS = """\
A GGUF file carries a model for llama.cpp: metadata, a vocabulary, and tensors
packed in blocks. Fine-tuning starts from the weights; the tokenizer must split
text exactly as it did when the model was trained. In 2024 there were 366 days,
and 1234567 is a number with seven digits. Don't guess; check: they've seen it,
we'll see it, I'm sure it's right. def square(x): return x * x  # comment
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Tokens, merges and scores describe how words become ids: the the the, then there.
"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = "<tool>"
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")
D, HEADS, KV_HEADS, FFN, LAYERS, CONTEXT = 64, 4, 2, 128, 2, 256


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8)


def quant_fixtures(rng):
    rows, cols = 3, 512
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    raw = {}
    raw[Q.F32] = x.copy()
    f16 = x.astype(np.float16)
    f16.reshape(-1)[:8] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -3e-6, 65504], dtype=np.float16)
    raw[Q.F16] = f16
    bf16 = gguf.quants.quantize(x, Q.BF16)
    specials = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x8080, 0x7F7F], dtype=np.uint16)
    bf16.reshape(-1)[:16] = specials.view(np.uint8)
    raw[Q.BF16] = bf16
    for t in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        raw[t] = gguf.quants.quantize(x, t)
    # K types: random payload, then scales: mostly sane, one zero, one subnormal.
    for t, scale_offsets in ((Q.Q4_K, (0, 2)), (Q.Q5_K, (0, 2)), (Q.Q6_K, (208,))):
        block, size = gguf.GGML_QUANT_SIZES[t]
        blocks = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
        for k, off in enumerate(scale_offsets):
            scales = rng.uniform(1e-3, 5e-2, size=len(blocks)) * rng.choice([-1, 1], size=len(blocks))
            scales[0] = 0.0 if k == 0 else 3e-6
            scales[1] = 3e-6 if k == 0 else 0.0
            blocks[:, off:off + 2] = f16_bytes(scales).reshape(-1, 2)
        raw[t] = blocks.reshape(rows, -1)

    writer = gguf.GGUFWriter(str(OUT / "quants.gguf"), "ft-fixture")
    expected = {}
    for t, data in raw.items():
        name = t.name.lower()
        if t in (Q.F32, Q.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=t)  # byte shape; the writer derives the element shape
        expected[name] = np.ascontiguousarray(gguf.quants.dequantize(data, t), dtype=np.float32).reshape(rows, cols)
    write(writer)
    save_file(expected, str(OUT / "quants_expected.safetensors"))
    sizes = {t.name: [int(t), b, s] for t, (b, s) in gguf.GGML_QUANT_SIZES.items()}
    (OUT / "ggml_type_sizes.json").write_text(json.dumps(sizes, indent=1) + "\n")


def write(writer):
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def byte_level_vocab():
    """A byte-level BPE trained on CORPUS with SmolLM's split (digits alone, then GPT-2's)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer)
    model = json.loads(tok.to_str())["model"]
    tokens = [None] * len(model["vocab"])
    for text, i in model["vocab"].items():
        tokens[i] = text
    tokens.append(USER_DEFINED)
    types = [3 if t in SPECIALS else 1 for t in tokens[:-1]] + [4]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return tokens, types, merges


def spm_vocab():
    """A SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces
    learned by merging the most frequent adjacent pair, scored so earlier merges win."""
    words = collections.Counter("\u2581" + w for w in CORPUS.split())
    pieces = sorted({c for w in words for c in w})
    seqs = {w: list(w) for w in words}
    merged = []
    for _ in range(120):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged.append(a + b)
        for w in seqs:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    for i, p in enumerate(merged):
        tokens.append(p)
        types.append(1)
        scores.append(-float(i))
    for i, p in enumerate(pieces):
        tokens.append(p)
        types.append(1)
        scores.append(-1000.0 - i)
    tokens.append(USER_DEFINED)
    types.append(4)
    scores.append(0.0)
    return tokens, types, scores


def tiny_llama(path, rng, vocab_kind):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("ft tiny llama")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(D)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(D // HEADS)
    if vocab_kind == "gpt2":
        tokens, types, merges = byte_level_vocab()
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_merges(merges)
        writer.add_bos_token_id(SPECIALS.index("<|im_start|>"))
        writer.add_eos_token_id(SPECIALS.index("<|im_end|>"))
        writer.add_unk_token_id(0)
        writer.add_pad_token_id(SPECIALS.index("<|im_end|>"))
        writer.add_add_bos_token(False)
        writer.add_chat_template(CHAT_TEMPLATE)
    else:
        tokens, types, scores = spm_vocab()
        writer.add_tokenizer_model("llama")
        writer.add_token_scores(scores)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_unk_token_id(0)
        writer.add_add_bos_token(True)
        writer.add_add_space_prefix(True)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    vocab = len(tokens)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def add(name, x, t):
        if t == Q.F32:
            writer.add_tensor(name, x)
        elif t == Q.F16:
            writer.add_tensor(name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, t)
            writer.add_tensor(name, q, raw_dtype=t)

    q_rows, kv_rows = D, KV_HEADS * (D // HEADS)
    pattern = lambda rows: (1000 * np.arange(rows)[:, None] + np.arange(D)[None, :]).astype(np.float32)
    add("token_embd.weight", normal(vocab, D), Q.Q8_0)
    for l in range(LAYERS):
        p = f"blk.{l}."
        add(p + "attn_norm.weight", 1 + normal(D), Q.F32)
        add(p + "attn_q.weight", pattern(q_rows) if l == 0 else normal(q_rows, D), Q.F32 if l == 0 else Q.Q4_1)
        add(p + "attn_k.weight", pattern(kv_rows) if l == 0 else normal(kv_rows, D), Q.F32 if l == 0 else Q.Q4_0)
        add(p + "attn_v.weight", normal(kv_rows, D), Q.Q8_0)
        add(p + "attn_output.weight", normal(D, q_rows), Q.F16)
        add(p + "ffn_norm.weight", 1 + normal(D), Q.F32)
        add(p + "ffn_gate.weight", normal(FFN, D), Q.BF16)
        add(p + "ffn_up.weight", normal(FFN, D), Q.Q4_1)
        add(p + "ffn_down.weight", normal(D, FFN), Q.Q4_0)
    add("output_norm.weight", 1 + normal(D), Q.F32)
    write(writer)


def fuzz_seeds(out):
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    w = gguf.GGUFWriter(str(out / "types.gguf"), "ft-fuzz")
    V = gguf.GGUFValueType
    for i, (t, v) in enumerate([(V.UINT8, 1), (V.INT8, -1), (V.UINT16, 2), (V.INT16, -2), (V.UINT32, 3),
                                (V.INT32, -3), (V.FLOAT32, 0.5), (V.BOOL, True), (V.STRING, "s"), (V.UINT64, 4),
                                (V.INT64, -4), (V.FLOAT64, 0.25)]):
        w.add_key_value(f"k.{t.name.lower()}", v, t)
    w.add_array("k.array", [1, 2, 3])
    w.add_array("k.nested", [["a", "b"], ["c"]])
    for t, n in ((Q.F32, 4), (Q.F16, 4), (Q.BF16, 4), (Q.Q8_0, 32), (Q.Q4_0, 32), (Q.Q4_1, 32)):
        x = rng.standard_normal((1, n)).astype(np.float32)
        data = x if t == Q.F32 else x.astype(np.float16) if t == Q.F16 else gguf.quants.quantize(x, t)
        w.add_tensor(t.name.lower(), data, raw_dtype=None if t in (Q.F32, Q.F16) else t)
    for t in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        w.add_tensor(t.name.lower(), rng.integers(0, 256, size=(1, gguf.GGML_QUANT_SIZES[t][1]), dtype=np.uint8),
                     raw_dtype=t)
    write(w)
    for kind in ("gpt2", "llama"):
        w = gguf.GGUFWriter(str(out / f"vocab_{kind}.gguf"), "llama")
        w.add_tokenizer_model(kind)
        if kind == "gpt2":
            w.add_tokenizer_pre("smollm")
            w.add_token_list(["<|im_end|>", "a", "b", "ab", "\u0120", "\u0120ab", "1"])
            w.add_token_types([3, 1, 1, 1, 1, 1, 4])
            w.add_token_merges(["a b", "\u0120 ab"])
        else:
            w.add_token_list(["<unk>", "<s>", "</s>", "<0x41>", "\u2581", "a", "b", "ab", "\u2581ab"])
            w.add_token_types([2, 3, 3, 6, 1, 1, 1, 1, 1])
            w.add_token_scores([0.0, 0.0, 0.0, 0.0, -5.0, -6.0, -7.0, -1.0, -2.0])
            w.add_add_space_prefix(True)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        write(w)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    fuzz_seeds(ROOT / "tests" / "fuzz" / "corpus" / "gguf")
    quant_fixtures(np.random.default_rng(1))
    tiny_llama(OUT / "tiny_llama.gguf", np.random.default_rng(2), "gpt2")
    tiny_llama(OUT / "tiny_llama_spm.gguf", np.random.default_rng(3), "llama")
    for f in sorted(OUT.iterdir()):
        print(f"{f.relative_to(ROOT)}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()

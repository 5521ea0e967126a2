"""Checks an HF model directory that ft converted from a Llama GGUF file against
the GGUF file itself, to prove the conversion (tokenizer, weights, and the
un-permutation of attn_q/attn_k rows) right.

    tools/.venv/bin/python tools/check_gguf_conversion.py GGUF HF_DIR [--ftrun PATH] [--llama-cpp DIR]

where HF_DIR was written by ft (`ftrun convert`, or ft::io::convert_gguf_to_hf).

What it compares, for a handful of prompts and one chat-templated message:

  tokens   HF's tokenizer (transformers AutoTokenizer on HF_DIR/tokenizer.json) against
           an independent byte-level BPE written here from the GGUF metadata alone
           (tokens, merges, token types, and llama.cpp's split regexes for
           tokenizer.ggml.pre), and against llama.cpp itself with --llama-cpp.
  logits   transformers' LlamaForCausalLM on HF_DIR against a reference forward pass
           written here in float64 from the GGUF weights dequantised by the `gguf`
           package, in llama.cpp's own convention: attn_q/attn_k rows as the file
           stores them and rotary embedding over adjacent pairs (2i, 2i+1). HF rotates
           half-split pairs (i, i + d/2) on un-permuted rows, so the two agree only if
           the un-permutation is exactly right. It also runs HF with the rows left
           permuted, to show how far off a conversion without it is.
           With --ftrun, also ft's own logits on HF_DIR (`ftrun eval --logits-out`
           on the HF token ids): ft and HF must agree within 1e-3 with the same top-5.
           With --llama-cpp, also against llama.cpp's logits (which use quantised
           activations, so they agree with the others to about 1e-1, not 1e-5).

--llama-cpp DIR: a directory holding llama.cpp's CPU Python extension
_llama_cpp_cpu.cpython-311-x86_64-linux-gnu.so from the llama-cpp-cffi wheel on
PyPI (`pip download --no-deps llama-cpp-cffi`, unzip llama/_llama_cpp_cpu*.so),
with the `cffi` package importable (PYTHONPATH). That build needs
__cxa_call_terminate from GCC 13's libstdc++; on Debian 12 the script compiles a
one-line stand-in with g++ and loads it first.

Exit status 0 when every token id matches and the HF logits agree with the
reference within 1e-3 (and the top-5 tokens match); 1 otherwise.
"""
import argparse
import pathlib
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
import regex
import torch

import gguf

PROMPTS = [
    "The capital of France is",
    "In 2024, 1234567 people wrote 89 lines of C++ code.",
    "Hello, world! I'm here; they've gone, we'll see.",
    "  two leading spaces,\ttab\n\nand   trailing   ",
    "naïve café — 東京タワー 🚀 Ελληνικά",
    "def square(x):\n    return x ** 2  # <|im_end|> is special",
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]

# llama.cpp's split regexes for each tokenizer.ggml.pre (llama-vocab.cpp), applied in order.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
SPLITS = {
    "gpt-2": [GPT2],
    "smollm": [r"\p{N}", GPT2],
    "starcoder": [r"\p{N}", GPT2],
    "refact": [r"\p{N}", GPT2],
    "llama-bpe": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"],
}
SPLITS["llama3"] = SPLITS["llama-v3"] = SPLITS["llama-bpe"]


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def byte_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class ReferenceBpe:
    """llama.cpp's byte-level BPE tokenizer, from the GGUF metadata alone."""

    def __init__(self, reader):
        self.tokens = field(reader, "tokenizer.ggml.tokens")
        types = field(reader, "tokenizer.ggml.token_type", [1] * len(self.tokens))
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(field(reader, "tokenizer.ggml.merges"))}
        pre = field(reader, "tokenizer.ggml.pre")
        if pre not in SPLITS:
            raise SystemExit(f"no reference split for tokenizer.ggml.pre {pre!r}")
        self.splits = [regex.compile(p) for p in SPLITS[pre]]
        self.ignore_merges = pre in ("llama-bpe", "llama3", "llama-v3")
        special = sorted((self.tokens[i] for i, t in enumerate(types) if t in (3, 4)), key=len, reverse=True)
        self.special = regex.compile("|".join(regex.escape(s) for s in special)) if special else None
        self.bytes = byte_to_unicode()
        self.bos = field(reader, "tokenizer.ggml.bos_token_id")
        self.add_bos = field(reader, "tokenizer.ggml.add_bos_token", pre in ("llama-bpe", "llama3", "llama-v3"))

    def split(self, text):
        pieces = [text]
        for pattern in self.splits:
            out = []
            for piece in pieces:
                at = 0
                for m in pattern.finditer(piece):
                    if m.start() > at:
                        out.append(piece[at:m.start()])
                    if m.end() > m.start():
                        out.append(m.group())
                    at = m.end()
                if at < len(piece):
                    out.append(piece[at:])
            pieces = out
        return pieces

    def bpe(self, word):
        if self.ignore_merges and word in self.ids:
            return [self.ids[word]]
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.ranks.get((parts[i], parts[i + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in self.ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.ids[p] for p in parts]

    def encode(self, text):
        ids = [self.bos] if self.add_bos else []
        chunks, at = [], 0
        for m in (self.special.finditer(text) if self.special else []):
            chunks.append((False, text[at:m.start()]))
            chunks.append((True, m.group()))
            at = m.end()
        chunks.append((False, text[at:]))
        for special, chunk in chunks:
            if special:
                ids.append(self.ids[chunk])
                continue
            for piece in self.split(chunk):
                ids += self.bpe("".join(self.bytes[b] for b in piece.encode("utf-8")))
        return ids


def dequantised_weights(reader):
    weights = {}
    for t in reader.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        weights[t.name] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64).reshape(tuple(reversed(t.shape.tolist()))))
    return weights


def reference_logits(reader, w, ids):
    """A Llama forward pass in llama.cpp's convention, float64, all positions."""
    heads = int(field(reader, "llama.attention.head_count"))
    kv_heads = int(field(reader, "llama.attention.head_count_kv", heads))
    eps = float(field(reader, "llama.attention.layer_norm_rms_epsilon"))
    theta = float(field(reader, "llama.rope.freq_base", 10000.0))
    layers = int(field(reader, "llama.block_count"))
    x = w["token_embd.weight"][torch.tensor(ids)]
    T, d = x.shape
    hd = d // heads
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    angle = pos * theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # T x hd/2
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]

    def norm(v, g):
        return v * torch.rsqrt((v * v).mean(-1, keepdim=True) + eps) * g

    def rope_adjacent(v):  # T x H x hd, pairs (2i, 2i+1)
        a, b = v[..., 0::2], v[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).reshape(v.shape)

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(layers):
        p = f"blk.{l}."
        h = norm(x, w[p + "attn_norm.weight"])
        q = rope_adjacent((h @ w[p + "attn_q.weight"].T).view(T, heads, hd))
        k = rope_adjacent((h @ w[p + "attn_k.weight"].T).view(T, kv_heads, hd))
        v = (h @ w[p + "attn_v.weight"].T).view(T, kv_heads, hd)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5 + mask
        att = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), v).reshape(T, d)
        x = x + att @ w[p + "attn_output.weight"].T
        h = norm(x, w[p + "ffn_norm.weight"])
        gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
        x = x + (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    x = norm(x, w["output_norm.weight"])
    return x @ w.get("output.weight", w["token_embd.weight"]).T


class LlamaCpp:
    """llama.cpp through the llama-cpp-cffi extension: tokenizer and last-position logits."""

    def __init__(self, directory, gguf_path):
        sys.path.insert(0, directory)
        try:
            from _llama_cpp_cpu import ffi, lib
        except ImportError as e:
            if "__cxa_call_terminate" not in str(e):
                raise
            shim_dir = tempfile.mkdtemp()
            src, so = os.path.join(shim_dir, "shim.cpp"), os.path.join(shim_dir, "libshim.so")
            with open(src, "w") as f:
                f.write('#include <exception>\nextern "C" [[noreturn]] void __cxa_call_terminate(void*) noexcept '
                        "{ std::terminate(); }\n")
            subprocess.run(["g++", "-shared", "-fPIC", "-O1", src, "-o", so], check=True)
            ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)
            from _llama_cpp_cpu import ffi, lib
        self.ffi, self.lib = ffi, lib
        lib.llama_backend_init()
        self.model = lib.llama_model_load_from_file(gguf_path.encode(), lib.llama_model_default_params())
        self.vocab = lib.llama_model_get_vocab(self.model)
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 512, 512, 1, 1
        self.ctx = lib.llama_init_from_model(self.model, params)

    def tokenize(self, text):
        raw = text.encode("utf-8")
        out = self.ffi.new("int32_t[]", len(raw) + 8)
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), out, len(raw) + 8, True, True)
        return [out[i] for i in range(n)]

    def last_logits(self, ids):
        self.lib.llama_kv_self_clear(self.ctx)
        tokens = self.ffi.new("int32_t[]", ids)
        if self.lib.llama_decode(self.ctx, self.lib.llama_batch_get_one(tokens, len(ids))) != 0:
            raise SystemExit("llama_decode failed")
        n_vocab = self.lib.llama_vocab_n_tokens(self.vocab)
        return torch.tensor(list(self.ffi.unpack(self.lib.llama_get_logits_ith(self.ctx, -1), n_vocab)), dtype=torch.float64)


def run_ftrun(ftrun, hf_dir, rows):
    """ft's next-token logits for each row of token ids (ftrun eval --logits-out)."""
    import json
    import subprocess
    import tempfile

    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp) / "rows.jsonl"
        data.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
        out = pathlib.Path(tmp) / "logits.safetensors"
        subprocess.run([ftrun, "eval", "--model", hf_dir, "--data", str(data), "--logits-out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        return load_file(out)["next_token_logits"]


def top5(logits, tok):
    return [(int(i), tok.decode([int(i)])) for i in torch.topk(logits, 5).indices]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("hf_dir")
    ap.add_argument("--llama-cpp", metavar="DIR")
    ap.add_argument("--ftrun", metavar="PATH", help="ftrun binary: compare ft's next-token logits with HF's")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    reader = gguf.GGUFReader(args.gguf)
    tok = AutoTokenizer.from_pretrained(args.hf_dir)
    model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        raise SystemExit("the Python reference tokenizer covers byte-level BPE (tokenizer.ggml.model gpt2) only")
    reference_tok = ReferenceBpe(reader)
    llama = LlamaCpp(args.llama_cpp, args.gguf) if args.llama_cpp else None
    weights = dequantised_weights(reader)
    counts = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    print(f"GGUF {args.gguf}: tensor types {counts}")

    # The same model with attn_q/attn_k rows as GGUF stores them: what a converter
    # that forgot the un-permutation would produce.
    naive = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for l, layer in enumerate(naive.model.layers):
            layer.self_attn.q_proj.weight.copy_(weights[f"blk.{l}.attn_q.weight"].float())
            layer.self_attn.k_proj.weight.copy_(weights[f"blk.{l}.attn_k.weight"].float())

    texts = PROMPTS + [tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)]
    ft_logits = run_ftrun(args.ftrun, args.hf_dir, [tok(t)["input_ids"] for t in texts]) if args.ftrun else None
    worst_ft = 0.0
    ok = True
    worst = worst_naive = worst_llama = 0.0
    for text in texts:
        print(f"\nprompt {text!r}")
        hf_ids = tok(text)["input_ids"]
        ref_ids = reference_tok.encode(text)
        same = hf_ids == ref_ids
        line = f"  tokens: HF {len(hf_ids)} ids; GGUF-metadata reference {'same' if same else 'DIFFERENT'}"
        if llama:
            cpp_ids = llama.tokenize(text)
            same_cpp = hf_ids == cpp_ids
            line += f"; llama.cpp {'same' if same_cpp else 'DIFFERENT'}"
            if not same_cpp:
                print(f"    llama.cpp {cpp_ids}")
            ok &= same_cpp
        print(line)
        if not same:
            print(f"    HF        {hf_ids}\n    reference {ref_ids}")
        ok &= same

        with torch.no_grad():
            hf = model(torch.tensor([hf_ids])).logits[0].double()
            bad = naive(torch.tensor([hf_ids])).logits[0].double()
        ref = reference_logits(reader, weights, hf_ids)
        diff = (hf - ref).abs().max().item()
        diff_naive = (bad - ref).abs().max().item()
        worst, worst_naive = max(worst, diff), max(worst_naive, diff_naive)
        same_top = torch.equal(torch.topk(hf[-1], 5).indices, torch.topk(ref[-1], 5).indices)
        ok &= diff < 1e-3 and same_top
        print(f"  logits, all {len(hf_ids)} positions: max |HF - reference| = {diff:.3g}; "
              f"without un-permutation {diff_naive:.3g}")
        print(f"  top-5 HF        {top5(hf[-1], tok)}")
        print(f"  top-5 reference {top5(ref[-1], tok)}" + ("" if same_top else "  DIFFERENT"))
        print(f"  top-5 without un-permutation {top5(bad[-1], tok)}")
        if ft_logits is not None:
            mine = ft_logits[texts.index(text)].double()
            d = (mine - hf[-1]).abs().max().item()
            worst_ft = max(worst_ft, d)
            same_ft = torch.equal(torch.topk(mine, 5).indices, torch.topk(hf[-1], 5).indices)
            ok &= d < 1e-3 and same_ft
            print(f"  ft last position: max |ft - HF| = {d:.3g}; top-5 {top5(mine, tok)}" + ("" if same_ft else "  DIFFERENT"))
        if llama:
            cpp = llama.last_logits(hf_ids)
            d = (cpp - hf[-1]).abs().max().item()
            if not d <= worst_llama:  # keeps a NaN (llama.cpp overflows f16 on absurd weights)
                worst_llama = d
            print(f"  llama.cpp last position: max |llama.cpp - HF| = {d:.3g}; top-5 {top5(cpp, tok)}")

    if ft_logits is not None:
        print(f"\nworst |ft - HF| at the last position {worst_ft:.3g}")
    print(f"\nworst max |HF - reference| {worst:.3g}; without un-permutation {worst_naive:.3g}"
          + (f"; worst |llama.cpp - HF| {worst_llama:.3g}" if llama else ""))
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes GGUF files of the families llama.cpp names besides Llama, for
tests/io/test_gguf_families.cpp: `ftrun convert` of each must give back the
model it came from.

For every case a tiny random HF model (weights rounded to float16, the type
the GGUF stores them in) is written as llama.cpp's convert_hf_to_gguf.py
writes that architecture: its metadata keys, gguf-py's own tensor names
(gguf.get_tensor_name_map), and the converter's changes to the data (Gemma's
norm weights stored as 1 + w; Granite's, GraniteMoE's and Mixtral's q/k rows interleaved
for ggml's rotary pairing; Phi-3's LongRoPE factors as rope_factors_short/long
tensors; Bloom's per-head q/k/v rows regrouped as all queries, keys, values;
a mixture's experts stacked, one tensor per projection, and Qwen2-MoE's
shared expert's gate as a vector).
A byte-level BPE vocabulary of the model's size goes with it.

  tests/fixtures/gguf/families/<case>.gguf   (qwen2, qwen3, gemma, gemma2, gemma3, phi3, granite,
                                             starcoder, bloom, mixtral, qwen2moe, qwen3moe,
                                             granitemoe, granitemoeshared)
  tests/fixtures/gguf/families/<case>_expected.safetensors
      input_ids [2, 16] and the source model's float32 logits on them.

Where transformers can read the architecture's GGUF itself (qwen2, phi3,
gemma2, gemma3, bloom, qwen2moe, qwen3moe), the script loads the file with it and checks that its
weights are the source model's, so the encoding here is the one transformers
inverts, not only ft's reading of llama.cpp.

Deterministic; naming cases writes only those. Run from the repository root:

    tools/.venv/bin/python tools/make_gguf_family_fixtures.py [CASE ...]
"""
import pathlib
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, BloomConfig, BloomForCausalLM, GPTBigCodeConfig,
                          GPTBigCodeForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM,
                          Gemma3TextConfig, GemmaConfig, GemmaForCausalLM, GraniteConfig, GraniteForCausalLM,
                          GraniteMoeConfig, GraniteMoeForCausalLM, GraniteMoeSharedConfig,
                          GraniteMoeSharedForCausalLM,
                          MixtralConfig, MixtralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.utils import logging as hf_logging

import gguf

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf" / "families"
VOCAB = 260
BATCH, SEQ = 2, 16
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def qwen2():
    return "qwen2", Qwen2ForCausalLM, Qwen2Config(**SHAPE, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                                   rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def qwen3():
    return "qwen3", Qwen3ForCausalLM, Qwen3Config(**SHAPE, head_dim=24, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                                   rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def gemma():
    return "gemma", GemmaForCausalLM, GemmaConfig(**{**SHAPE, "num_key_value_heads": 1}, head_dim=16,
                                                   rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")


def gemma2():
    # llama.cpp keeps no query_pre_attn_scalar: it scales by 1/sqrt(head_dim) (but for the 46-layer 27B).
    return "gemma2", Gemma2ForCausalLM, Gemma2Config(
        **SHAPE, head_dim=16, query_pre_attn_scalar=16, sliding_window=5, attn_logit_softcapping=4.0,
        final_logit_softcapping=3.0, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh")


def gemma3():
    # Six layers: llama.cpp keeps no layer pattern and takes Gemma 3's, every sixth layer global.
    shape = {**SHAPE, "num_hidden_layers": 6, "hidden_size": 32, "intermediate_size": 48}
    return "gemma3", Gemma3ForCausalLM, Gemma3TextConfig(
        **shape, head_dim=16, query_pre_attn_scalar=16, sliding_window=5, rms_norm_eps=1e-6,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})


def phi3():
    # LongRoPE past its original length (the 16-token rows reach position 12), a quarter of each head unrotated.
    return "phi3", Phi3ForCausalLM, Phi3Config(
        **SHAPE, original_max_position_embeddings=12, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.5],
                         "long_factor": [1.0, 3.0, 6.0, 12.0, 24.0, 48.0]},
        pad_token_id=0, bos_token_id=1, eos_token_id=2)


def granite():
    return "granite", GraniteForCausalLM, GraniteConfig(
        **SHAPE, rms_norm_eps=1e-6, tie_word_embeddings=True, embedding_multiplier=3.0, residual_multiplier=0.5,
        attention_multiplier=0.2, logits_scaling=4.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def starcoder():
    # llama.cpp writes feed_forward_length as 4 x n_embd and one key/value head: what n_inner=None and
    # multi_query give.
    return "starcoder", GPTBigCodeForCausalLM, GPTBigCodeConfig(
        vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, multi_query=True,
        activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5, attn_pdrop=0.0, embd_pdrop=0.0,
        resid_pdrop=0.0)


def bloom():
    return "bloom", BloomForCausalLM, BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4,
                                                   layer_norm_epsilon=1e-5, hidden_dropout=0.0,
                                                   attention_dropout=0.0)


def mixtral():
    # llama.cpp writes Mixtral as "llama" with experts.
    return "llama", MixtralForCausalLM, MixtralConfig(**SHAPE, num_local_experts=4, num_experts_per_tok=2,
                                                      rms_norm_eps=1e-5, tie_word_embeddings=False,
                                                      rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def qwen2moe():
    return "qwen2moe", Qwen2MoeForCausalLM, Qwen2MoeConfig(
        **SHAPE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, shared_expert_intermediate_size=80,
        norm_topk_prob=False, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def qwen3moe():
    # llama.cpp renormalises Qwen3-MoE's top k (norm_topk_prob), as transformers' GGUF reader assumes.
    return "qwen3moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(
        **SHAPE, head_dim=24, num_experts=6, num_experts_per_tok=3, moe_intermediate_size=40, norm_topk_prob=True,
        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})


def granitemoe():
    return "granitemoe", GraniteMoeForCausalLM, GraniteMoeConfig(
        **{**SHAPE, "intermediate_size": 40}, num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-6,
        tie_word_embeddings=True, embedding_multiplier=2.0, residual_multiplier=0.7, attention_multiplier=0.3,
        logits_scaling=3.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def granitemoeshared():
    # llama.cpp writes GraniteMoeShared as "granitemoe" with a shared expert.
    return "granitemoe", GraniteMoeSharedForCausalLM, GraniteMoeSharedConfig(
        **{**SHAPE, "intermediate_size": 32}, num_local_experts=3, num_experts_per_tok=2,
        shared_intermediate_size=56, rms_norm_eps=1e-6, tie_word_embeddings=False, embedding_multiplier=1.5,
        residual_multiplier=0.5, attention_multiplier=0.25, logits_scaling=2.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


CASES = {f.__name__: f for f in (qwen2, qwen3, gemma, gemma2, gemma3, phi3, granite, starcoder, bloom, mixtral,
                                 qwen2moe, qwen3moe, granitemoe, granitemoeshared)}
# transformers reads these architectures' GGUF files too (not qwen3 here: it ignores attention.key_length,
# which this case's explicit head_dim needs).
READ_BY_TRANSFORMERS = {"qwen2", "phi3", "gemma2", "gemma3", "bloom", "qwen2moe", "qwen3moe"}


def metadata(w, arch, c):
    """The keys convert_hf_to_gguf.py writes for the architecture."""
    if arch in ("starcoder", "bloom"):
        w.add_context_length(c.n_positions if arch == "starcoder" else c.hidden_size)  # Bloom: seq_length or n_embed
        w.add_embedding_length(c.hidden_size)
        w.add_feed_forward_length(4 * c.hidden_size)
        w.add_block_count(c.num_hidden_layers)
        w.add_head_count(c.num_attention_heads)
        w.add_head_count_kv(1 if arch == "starcoder" else c.num_attention_heads)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
        return
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    rope = c.rope_parameters
    if arch in ("qwen2", "qwen3", "granite", "phi3", "llama", "qwen2moe", "qwen3moe", "granitemoe"):
        w.add_rope_freq_base(rope["rope_theta"])
    experts = getattr(c, "num_local_experts", None) or getattr(c, "num_experts", None)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        if arch in ("qwen2moe", "qwen3moe"):  # llama and granitemoe: the experts are feed_forward_length wide
            w.add_expert_feed_forward_length(c.moe_intermediate_size)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
        if getattr(c, "shared_intermediate_size", 0):
            w.add_expert_shared_feed_forward_length(c.shared_intermediate_size)
    if arch in ("qwen3", "qwen3moe", "gemma", "gemma2", "gemma3"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
        w.add_sliding_window(c.sliding_window)
    if arch == "gemma3":
        w.add_rope_freq_base(rope["full_attention"]["rope_theta"])
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["full_attention"]["factor"])
        w.add_sliding_window(c.sliding_window)
    if arch == "phi3":
        rotary = int(rope["partial_rotary_factor"] * c.hidden_size) // c.num_attention_heads
        w.add_rope_dimension_count(rotary)
        w.add_rope_scaling_orig_ctx_len(c.original_max_position_embeddings)
        w.add_sliding_window(c.sliding_window or 0)
        scale = c.max_position_embeddings / c.original_max_position_embeddings
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(c.original_max_position_embeddings))))
    if arch in ("granite", "granitemoe"):
        w.add_vocab_size(c.vocab_size)
        w.add_rope_dimension_count(head_dim)
        w.add_attention_scale(c.attention_multiplier)
        w.add_embedding_scale(c.embedding_multiplier)
        w.add_residual_scale(c.residual_multiplier)
        w.add_logit_scale(c.logits_scaling)


def vocabulary(w):
    """The 256 tokens of the byte-level alphabet, one merge and three special tokens: VOCAB in all."""
    from tokenizers import pre_tokenizers
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + ["ab"] + specials
    assert len(tokens) == VOCAB
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (VOCAB - len(specials)) + [3] * len(specials))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))


def permute(x, heads):
    """llama.cpp's LlamaModel.permute: each head's two rotary halves interleaved."""
    return x.reshape(heads, 2, x.shape[0] // heads // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def tensors(w, arch, model):
    c = model.config
    model_arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    names = gguf.get_tensor_name_map(model_arch, c.num_hidden_layers)
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if name.endswith("rotary_emb.inv_freq"):
            continue
        x = t.float().numpy().copy()
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            x = x + np.float32(1)
        if (".experts." in name or name.endswith(("shared_expert_gate.weight", "router.weight"))
                or "shared_mlp.input_linear" in name):
            moe_tensor(w, name, x, c)
            continue
        if arch in ("granite", "granitemoe", "llama") and name.endswith(("q_proj.weight", "k_proj.weight")):
            x = permute(x, c.num_attention_heads if "q_proj" in name else c.num_key_value_heads)
        if arch == "bloom" and "query_key_value" in name:  # each head's q, k, v -> all q, all k, all v
            heads = c.num_attention_heads
            x = x.reshape(heads, 3, c.hidden_size // heads, -1).swapaxes(0, 1).reshape(x.shape)
        target = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if target is None and arch == "bloom":  # the converter strips Bloom's "transformer." prefix
            target = names.get_name(name.removeprefix("transformer."), try_suffixes=(".weight", ".bias"))
        assert target is not None, f"{arch}: gguf-py has no name for {name}"
        if x.ndim == 1 or name.endswith("norm.weight"):
            w.add_tensor(target, x.astype(np.float32))
        else:
            w.add_tensor(target, x.astype(np.float16))
    if arch == "phi3":
        rope = c.rope_parameters
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))


def moe_tensor(w, name, x, c):
    """A sparse layer's experts as the converter stacks them (transformers 5 keeps them fused: gate_up_proj
    [E, 2F, C], down_proj [E, C, F]), Qwen2-MoE's shared expert gate [1, C] as a vector, GraniteMoE's router,
    and GraniteMoeShared's fused shared gate|up split in two."""
    layer = name.split(".")[2]
    if name.endswith("router.weight"):
        w.add_tensor(f"blk.{layer}.ffn_gate_inp.weight", x.astype(np.float16))
    elif "shared_mlp.input_linear" in name:
        s = x.shape[0] // 2
        w.add_tensor(f"blk.{layer}.ffn_gate_shexp.weight", x[:s].astype(np.float16))
        w.add_tensor(f"blk.{layer}.ffn_up_shexp.weight", x[s:].astype(np.float16))
    elif name.endswith("shared_expert_gate.weight"):
        w.add_tensor(f"blk.{layer}.ffn_gate_inp_shexp.weight", x.reshape(-1).astype(np.float32))
    elif name.endswith("gate_up_proj"):
        f = x.shape[1] // 2
        w.add_tensor(f"blk.{layer}.ffn_gate_exps.weight", x[:, :f].astype(np.float16))
        w.add_tensor(f"blk.{layer}.ffn_up_exps.weight", x[:, f:].astype(np.float16))
    elif name.endswith("down_proj"):
        w.add_tensor(f"blk.{layer}.ffn_down_exps.weight", x.astype(np.float16))
    else:
        raise AssertionError(f"no GGUF name for {name}")


def make_case(name, seed):
    arch, cls, config = CASES[name]()
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1 + (0 if arch.startswith("gemma") else 1))
            elif n.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif n.endswith(("mlp.gate.weight", "router.weight")):
                # a router: logits far apart, so no rounding changes a choice
                p.copy_(torch.randn(p.shape, generator=gen) * 2.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)
            if p.dim() > 1 and not n.endswith("norm.weight"):
                p.copy_(p.half().float())  # the values a float16 GGUF holds

    path = OUT / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"ft tiny {arch}")
    metadata(w, arch, config)
    vocabulary(w)
    tensors(w, arch, model)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    input_ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    save_file({"input_ids": input_ids.to(torch.int32).contiguous(), "logits": logits.float().contiguous()},
              str(OUT / f"{name}_expected.safetensors"),
              metadata={"generator": "tools/make_gguf_family_fixtures.py"})

    if arch in READ_BY_TRANSFORMERS:
        # transformers' reader takes no expert widths from the metadata (it keeps its config's defaults), so a
        # mixture is read with its own config; the tensors still come from the file.
        given = {"config": config} if arch.endswith("moe") else {}
        read = AutoModelForCausalLM.from_pretrained(str(OUT), gguf_file=path.name, dtype=torch.float32, **given)
        source, loaded = model.state_dict(), read.state_dict()
        for n, t in source.items():
            if n.endswith("rotary_emb.inv_freq") or (n == "lm_head.weight" and config.tie_word_embeddings):
                continue
            want = t.float()
            if arch.startswith("gemma") and n.endswith("norm.weight"):
                want = (want + 1) - 1  # float32's rounding of the stored 1 + w
            assert torch.equal(loaded[n].float(), want), f"{name}: transformers reads {n} otherwise"
        print(f"  [{name}] transformers reads the same {len(source)} tensors from the GGUF")
    print(f"{name}: {path.stat().st_size} bytes, logits {tuple(logits.shape)}")


def main():
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = sys.argv[1:] or list(CASES)
    unknown = sorted(set(wanted) - set(CASES))
    assert not unknown, f"unknown cases {unknown}"
    for i, name in enumerate(CASES):
        if name in wanted:
            make_case(name, 100 + i)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the HF Transformers parity fixtures under tests/fixtures/parity/.

ft re-implements the Llama-family (Qwen2, Qwen3 and Granite included), Phi-3,
GPT-NeoX, GPTBigCode, Bloom, Gemma 1-3 and the mixtures of experts (Mixtral,
Qwen2-MoE, Qwen3-MoE) forward and backward passes in C++. These fixtures pin down what HF Transformers computes for a few tiny,
randomly initialised models, so the C++ tests can check logits, loss and every
parameter gradient against them without Python or network access.

Each case directory holds the checkpoint as HF writes it (config.json,
model.safetensors, float32) and expected.safetensors with input_ids, labels,
logits, loss and grad.<parameter name> for every entry of
model.named_parameters(). The expected values come from running the same model
in float64 (then stored as float32), so they carry no fp32 rounding of a
float32 forward pass; note that HF still computes RoPE cos/sin, the attention
softmax and the loss in float32 internally even for a float64 model. The
llama_gqa directory also holds eval.jsonl and eval_expected.json for
`ftrun eval`.

Deterministic (fixed seeds, one CPU thread) and idempotent (every output is
overwritten). Run from the repository root:

    tools/.venv/bin/python tools/make_parity_fixtures.py [CASE ...]

Naming cases writes only those (each keeps its seed, its place in CASES), so
adding a case leaves the others' files as they are, whichever transformers
version wrote them.
"""
import copy
import json
import math
import pathlib
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (
    BloomConfig,
    BloomForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3Config,
    Gemma3ForCausalLM,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    GemmaConfig,
    GemmaForCausalLM,
    GPTBigCodeConfig,
    GPTBigCodeForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    GraniteMoeSharedConfig,
    GraniteMoeSharedForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    SiglipVisionConfig,
)
from transformers.utils import logging as hf_logging

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "parity"
BATCH, SEQ = 2, 16
WEIGHT_STD = 0.1  # 0.02 gives nearly uniform logits at this size
KEEP = {"config.json", "model.safetensors"}


def llama_gqa():
    return LlamaForCausalLM, LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=0.0,
    )


def smollm2_tied():
    return LlamaForCausalLM, LlamaConfig(
        vocab_size=112, hidden_size=48, intermediate_size=128, head_dim=8,
        num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        attention_dropout=0.0,
    )


def llama3_rope_scaling():
    # original_max_position_embeddings is 48, not 8: the inverse frequencies of
    # a 16-wide head are then one untouched (wavelength < 48/4), one smoothed
    # and six divided by the factor, so all three branches of the Llama-3 rule
    # are exercised. With 8 no frequency can stay untouched (the shortest
    # wavelength is 2*pi > 8/4).
    return LlamaForCausalLM, LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 48,
        },
        attention_dropout=0.0,
    )


def qwen2_bias():
    return Qwen2ForCausalLM, Qwen2Config(
        vocab_size=104, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False, max_window_layers=2, attention_dropout=0.0,
    )


def qwen3_qk_norm():
    # head_dim 24 is not hidden_size / heads (16): Qwen3 states it. Biases on,
    # as attention_bias allows, and tied embeddings as the small Qwen3s have.
    return Qwen3ForCausalLM, Qwen3Config(
        vocab_size=116, hidden_size=64, intermediate_size=96, head_dim=24,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        attention_bias=True, use_sliding_window=False, attention_dropout=0.0,
    )


def granite_multipliers():
    # Granite's four multipliers, each away from 1 and from Llama's implied
    # values (the attention's 1/sqrt(16) = 0.25), so each one shows.
    return GraniteForCausalLM, GraniteConfig(
        vocab_size=108, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
        logits_scaling=4.0, attention_bias=True, attention_dropout=0.0,
    )


def phi3_fused():
    # Phi-3's fused qkv_proj and gate_up_proj, half the head rotary, and a
    # sliding window shorter than the sequence, each as config.json states it.
    return Phi3ForCausalLM, Phi3Config(
        vocab_size=100, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, original_max_position_embeddings=64, rms_norm_eps=1e-5,
        tie_word_embeddings=False, sliding_window=6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        attention_dropout=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )


def phi3_longrope():
    # Phi-4-mini's shape in small: a quarter of each head unrotated, tied
    # tables, LongRoPE with short factors away from 1 and an attention factor
    # derived from max / original positions (192 / 48). Every position here,
    # generation's included, stays below the original 48.
    return Phi3ForCausalLM, Phi3Config(
        vocab_size=92, hidden_size=64, intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=192, original_max_position_embeddings=48, rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 4.5],
                         "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]},
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
        attention_dropout=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )


def phi3_longrope_long():
    # LongRoPE past its original length: phi3_longrope's shape with an original length of 12 and
    # untied tables, so the 16-token rows reach position 12 and HF takes the long factors at every
    # position of the batch; its generations cross from the short factors to the long ones.
    model_cls, config = phi3_longrope()
    config.max_position_embeddings, config.original_max_position_embeddings = 64, 12
    config.tie_word_embeddings = False
    config.rope_parameters["long_factor"] = [1.0, 3.0, 6.0, 12.0, 24.0, 48.0]
    return model_cls, config


def mistral_sliding():
    return MistralForCausalLM, MistralConfig(
        vocab_size=120, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        sliding_window=5, attention_dropout=0.0,
    )


def neox(parallel, rotary_fraction):
    return GPTNeoXForCausalLM, GPTNeoXConfig(
        vocab_size=100, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, layer_norm_eps=1e-5, hidden_act="gelu",
        use_parallel_residual=parallel, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": rotary_fraction},
        attention_dropout=0.0, hidden_dropout=0.0,
    )


def gpt_bigcode(multi_query):
    """StarCoder's block: multi-query attention, learned positions, tied tables; or one key and
    value per head, unscaled scores and its own output layer."""
    return GPTBigCodeForCausalLM, GPTBigCodeConfig(
        vocab_size=100, n_embd=64, n_inner=160, n_layer=2, n_head=4, n_positions=48,
        multi_query=multi_query, scale_attn_weights=multi_query, tie_word_embeddings=multi_query,
        activation_function="gelu_pytorch_tanh" if multi_query else "gelu", layer_norm_epsilon=1e-5,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )


def bloom(heads, width, tied):
    """Bloom: ALiBi over a power-of-two head count, tied tables; or over six heads (the slopes of a
    non-power-of-two count) with its own output layer."""
    return BloomForCausalLM, BloomConfig(
        vocab_size=100, hidden_size=width, n_layer=2, n_head=heads, layer_norm_epsilon=1e-5,
        tie_word_embeddings=tied, apply_residual_connection_post_layernorm=False,
        hidden_dropout=0.0, attention_dropout=0.0, pretraining_tp=1, slow_but_exact=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=3,
    )


def gemma():
    """Gemma: RMSNorm scaled by (1 + w), embeddings scaled by sqrt(hidden_size), GeGLU (tanh GELU), a
    stated head_dim wider than hidden_size over the heads, grouped-query heads, tied tables."""
    return GemmaForCausalLM, GemmaConfig(
        vocab_size=100, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_dropout=0.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma2():
    """Gemma 2: Gemma's block with a norm after each branch, query_pre_attn_scalar unlike head_dim,
    attention scores and final logits soft-capped at caps small enough to bend them, and a
    sliding-window layer before a global one (Gemma2Config's default layer_types)."""
    return Gemma2ForCausalLM, Gemma2Config(
        vocab_size=100, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        query_pre_attn_scalar=24, attn_logit_softcapping=1.5, final_logit_softcapping=2.5,
        sliding_window=5, attention_dropout=0.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma3():
    """Gemma 3 (text): Gemma 2's block with per-head q/k norms scaled by (1 + w), no soft-caps, two
    local layers then a global one (sliding_window_pattern 3), each kind with its own rotary base and
    the global one linearly scaled."""
    return Gemma3ForCausalLM, Gemma3TextConfig(
        vocab_size=100, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
        rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000.0}},
        query_pre_attn_scalar=24, sliding_window=5, sliding_window_pattern=3,
        attention_dropout=0.0, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )


def gemma3_vision():
    """Gemma 3 as its multimodal checkpoints come (4B and up): Gemma3ForConditionalGeneration with a
    small SigLIP vision tower beside the text model; ft trains the text model, read from under
    model.language_model, and the fixture's gradients are the text model's."""
    _, text = gemma3()
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14, attention_dropout=0.0)
    return Gemma3ForConditionalGeneration, Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                                        mm_tokens_per_image=4, image_token_index=99,
                                                        boi_token_index=97, eoi_token_index=98)


def mixtral():
    """Mixtral: every MLP a mixture of 4 experts, top 2 renormalised, with the load-balancing loss added
    (output_router_logits) at a weight large enough to move every router gradient."""
    return MixtralForCausalLM, MixtralConfig(
        vocab_size=100, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_parameters={"rope_theta": 10000.0},
        num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.1,
        tie_word_embeddings=False,
    )


def qwen2_moe():
    """Qwen2-MoE: 6 experts, top 2 not renormalised, a shared expert behind its sigmoid gate, q/k/v
    biases, the middle layer dense (mlp_only_layers), the load-balancing loss added."""
    return Qwen2MoeForCausalLM, Qwen2MoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_parameters={"rope_theta": 10000.0},
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24,
        norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], output_router_logits=True,
        router_aux_loss_coef=0.05, qkv_bias=True, use_sliding_window=False, tie_word_embeddings=False,
    )


def qwen3_moe():
    """Qwen3-MoE: per-head q/k norms, 8 experts, top 3 renormalised (norm_topk_prob), every second
    layer sparse (decoder_sparse_step 2: the middle one of three), no load-balancing loss (HF's default)."""
    return Qwen3MoeForCausalLM, Qwen3MoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters={"rope_theta": 10000.0}, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=16,
        norm_topk_prob=True, decoder_sparse_step=2, output_router_logits=False, use_sliding_window=False,
        tie_word_embeddings=False,
    )


def granite_moe():
    """GraniteMoE (granite-3.0-1b-a400m's kind): Granite's four multipliers, 4 experts whose top 2 by
    logit are weighted by a softmax over those two, the experts stacked in one tensor in the file,
    the load-balancing loss added."""
    return GraniteMoeForCausalLM, GraniteMoeConfig(
        vocab_size=100, hidden_size=32, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_parameters={"rope_theta": 10000.0},
        num_local_experts=4, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.1,
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.5,
        tie_word_embeddings=True,
    )


def granite_moe_shared():
    """GraniteMoeShared (granite-4.0-tiny's kind without Mamba): GraniteMoE with a shared MLP of
    its own width beside the experts, added to their output without a gate; 3 experts, MQA."""
    return GraniteMoeSharedForCausalLM, GraniteMoeSharedConfig(
        vocab_size=100, hidden_size=32, intermediate_size=16, shared_intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_parameters={"rope_theta": 10000.0}, num_local_experts=3, num_experts_per_tok=2,
        output_router_logits=True, router_aux_loss_coef=0.05, embedding_multiplier=2.0, residual_multiplier=0.7,
        attention_multiplier=0.25, logits_scaling=1.5, tie_word_embeddings=False,
    )


MOE_CASES = ("mixtral_top2", "qwen2_moe_shared", "qwen3_moe_sparse_step", "granite_moe_top2", "granite_moe_shared")
GRANITE_MOE_CASES = ("granite_moe_top2", "granite_moe_shared")

CASES = {
    "llama_gqa": llama_gqa,
    "smollm2_tied": smollm2_tied,
    "llama3_rope_scaling": llama3_rope_scaling,
    "qwen2_bias": qwen2_bias,
    "mistral_sliding": mistral_sliding,
    "neox_parallel": lambda: neox(True, 0.25),
    "neox_sequential": lambda: neox(False, 0.5),
    "qwen3_qk_norm": qwen3_qk_norm,
    "granite_multipliers": granite_multipliers,
    "phi3_fused": phi3_fused,
    "phi3_longrope": phi3_longrope,
    "phi3_longrope_long": phi3_longrope_long,
    "gpt_bigcode_mqa": lambda: gpt_bigcode(True),
    "gpt_bigcode_mha": lambda: gpt_bigcode(False),
    "bloom_alibi": lambda: bloom(4, 64, True),
    "bloom_six_heads": lambda: bloom(6, 48, False),
    "gemma_geglu": gemma,
    "gemma2_softcap": gemma2,
    "gemma3_local_global": gemma3,
    "gemma3_vision_text": gemma3_vision,
    "mixtral_top2": mixtral,
    "qwen2_moe_shared": qwen2_moe,
    "qwen3_moe_sparse_step": qwen3_moe,
    "granite_moe_top2": granite_moe,
    "granite_moe_shared": granite_moe_shared,
}


def build(case):
    model_cls, config = CASES[case]()
    config._attn_implementation = "eager"
    if case in MOE_CASES:
        config._experts_implementation = "eager"  # grouped_mm refuses float64
    model = model_cls(config).float()
    assert model.config._attn_implementation == "eager"
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, f"{case}: dropout {m.p}"
    return model


def is_norm(module):
    return isinstance(module, torch.nn.LayerNorm) or "RMSNorm" in type(module).__name__


@torch.no_grad()
def randomise(model, gen):
    """Gives every parameter a non-trivial value (HF init leaves biases at 0 and norms at 1)."""
    done = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in done:
                continue
            done.add(id(p))
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if is_norm(module) and name == "weight":
                value = 1.0 + 0.1 * noise
            elif name == "bias":
                value = 0.1 * noise
            else:
                value = WEIGHT_STD * noise
            p.copy_(value.to(p.dtype))
    assert len(done) == len(list(model.parameters()))


def make_inputs(vocab, gen):
    input_ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    labels = input_ids.clone()
    labels[0, :3] = -100
    picks = torch.randperm(SEQ - 1, generator=gen)[:2] + 1  # positions 1..T-1 of row 1
    labels[1, picks] = -100
    return input_ids, labels


def forward_backward(model, input_ids, labels):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(input_ids=input_ids, labels=labels)
    out.loss.backward()
    # Parameters the text does not reach (a vision tower) have no gradient.
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    # A mixture of experts' load-balancing loss, as much of it as the loss holds (0 when not added).
    aux = model.config.router_aux_loss_coef * out.aux_loss.item() if getattr(out, "aux_loss", None) is not None else 0.0
    return out.logits.detach(), out.loss.detach(), grads, aux


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def dir_size(path):
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def check_rope(case, model):
    if case != "llama3_rope_scaling":
        return
    rope = model.model.rotary_emb
    cfg = model.config
    dim = cfg.head_dim
    theta = cfg.rope_parameters["rope_theta"]
    plain = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaled = rope.inv_freq.double()
    ratio = plain / scaled
    print(f"  [{case}] unscaled inv_freq: {[f'{x:.4g}' for x in plain.tolist()]}")
    print(f"  [{case}]   scaled inv_freq: {[f'{x:.4g}' for x in scaled.tolist()]}")
    print(f"  [{case}]   unscaled/scaled: {[f'{x:.4g}' for x in ratio.tolist()]}")
    assert (ratio - 1).abs().max() > 0.5, "llama3 scaling has no effect"
    assert (ratio - 1).abs().min() < 1e-6, "no high-frequency component left untouched"
    assert ((ratio > 1 + 1e-6) & (ratio < 8 - 1e-6)).any(), "no smoothed component"


def loss_with(model, config, input_ids, labels):
    """The loss of the model's weights under another configuration (float64)."""
    other = type(model)(config).double()
    other.load_state_dict(model.state_dict())
    other.train()
    with torch.no_grad():
        return other(input_ids=input_ids, labels=labels).loss.item()


def check_sliding(case, model, input_ids, labels, loss):
    if case not in ("mistral_sliding", "phi3_fused"):
        return
    config = copy.deepcopy(model.config)
    config.sliding_window = None
    full_loss = loss_with(model, config, input_ids, labels)
    print(f"  [{case}] loss with sliding_window={model.config.sliding_window}: {loss:.8f}, with None: {full_loss:.8f}")
    assert abs(full_loss - loss) > 1e-3, "sliding window has no effect"


def check_gemma2(case, model, input_ids, labels, loss):
    """Each of Gemma 2's options must change the loss, or the fixture would not hold it."""
    if case != "gemma2_softcap":
        return
    assert model.config.layer_types == ["sliding_attention", "full_attention"], model.config.layer_types
    for key, value in (("attn_logit_softcapping", None), ("final_logit_softcapping", None),
                       ("layer_types", ["full_attention"] * 2), ("query_pre_attn_scalar", 16)):
        config = copy.deepcopy(model.config)
        setattr(config, key, value)
        other_loss = loss_with(model, config, input_ids, labels)
        print(f"  [{case}] loss {loss:.8f}, with {key}={value}: {other_loss:.8f}")
        assert abs(other_loss - loss) > 1e-3, f"{key} has no effect"


def check_gemma3(case, model, input_ids, labels, loss):
    """The local layers' rotary base and the global layers' linear scaling must each change the loss."""
    if case != "gemma3_local_global":
        return
    assert model.config.layer_types == ["sliding_attention", "sliding_attention", "full_attention"]
    for kind, change in (("sliding_attention", {"rope_theta": 10000.0}), ("full_attention", {"factor": 1.0})):
        config = copy.deepcopy(model.config)
        config.rope_parameters[kind].update(change)
        other_loss = loss_with(model, config, input_ids, labels)
        print(f"  [{case}] loss {loss:.8f}, with {kind} {change}: {other_loss:.8f}")
        assert abs(other_loss - loss) > 1e-4, f"{kind} {change} has no effect"


def check_longrope(case, model, input_ids, labels, loss):
    """The long factors must be what the fixture's rows take."""
    if case != "phi3_longrope_long":
        return
    config = copy.deepcopy(model.config)
    config.rope_parameters["long_factor"] = list(config.rope_parameters["short_factor"])
    other_loss = loss_with(model, config, input_ids, labels)
    print(f"  [{case}] loss {loss:.8f}, with the short factors throughout: {other_loss:.8f}")
    assert abs(other_loss - loss) > 1e-3, "the long factors have no effect"


ROUTER_STD = 0.5  # WEIGHT_STD's routers give near-uniform probabilities
ROUTING_GAP = 0.05  # the least gap between a token's k-th and (k+1)-th router logit


def routing_gap(model, input_ids):
    """The smallest gap, over tokens and sparse layers, between the k-th and (k+1)-th router
    logit (float64): below bf16's rounding, a token's choice of experts is a coin toss. And
    whether every expert of every sparse layer is chosen by some token (else its weights would
    have no gradient to compare)."""
    k = model.config.num_experts_per_tok
    with torch.no_grad():
        out = copy.deepcopy(model).double()(input_ids=input_ids, output_router_logits=True)
    gaps, all_used = [], True
    for logits in out.router_logits:
        top = logits.double().topk(k + 1, dim=-1)
        gaps.append((top.values[:, k - 1] - top.values[:, k]).min().item())
        all_used &= top.indices[:, :k].unique().numel() == logits.shape[-1]
    return min(gaps), len(gaps), all_used


@torch.no_grad()
def choose_routers(case, model, input_ids, seed):
    """Draws the routers' weights (at ROUTER_STD, from a generator of their own) until every token
    chooses its experts by at least ROUTING_GAP, so that no rounding changes a choice."""
    routers = [p for name, p in model.named_parameters()
               if name.endswith((".mlp.gate.weight", ".block_sparse_moe.router.weight"))]
    assert routers, f"{case}: no router found"
    for attempt in range(200):
        gen = torch.Generator().manual_seed(seed * 1000 + attempt)
        for p in routers:
            p.copy_(ROUTER_STD * torch.randn(p.shape, generator=gen, dtype=torch.float64))
        gap, layers, all_used = routing_gap(model, input_ids)
        if gap > ROUTING_GAP and all_used:
            print(f"  [{case}] routers drawn {attempt + 1} times: {layers} sparse layers, smallest gap {gap:.3e}")
            return
    raise AssertionError(f"{case}: no draw of the routers separates every token's choice")


def file_names(case, grads, model):
    """Gradients under the names transformers writes to disk: a fused expert tensor [E, ...] split into
    each expert's gate, up and down projections (Mixtral's w1, w3, w2 under block_sparse_moe)."""
    if case not in MOE_CASES:
        return grads
    if case in GRANITE_MOE_CASES:  # the file keeps the experts stacked, under the original module names
        renames = {".experts.gate_up_proj": ".input_linear.weight", ".experts.down_proj": ".output_linear.weight",
                   ".router.weight": ".router.layer.weight"}
        out = {}
        for name, g in grads.items():
            for old, new in renames.items():
                if name.endswith(old):
                    name = name[: -len(old)] + new
            out[name] = g
        return out
    mixtral = case == "mixtral_top2"
    out = {}
    for name, g in grads.items():
        prefix, _, leaf = name.rpartition(".experts.")
        if leaf in ("gate_up_proj", "down_proj") and prefix:
            if mixtral:
                prefix = prefix.replace(".mlp", ".block_sparse_moe")
            for e in range(g.shape[0]):
                base = f"{prefix}.experts.{e}."
                if leaf == "down_proj":
                    out[base + ("w2" if mixtral else "down_proj") + ".weight"] = g[e]
                else:
                    half = g.shape[1] // 2
                    out[base + ("w1" if mixtral else "gate_proj") + ".weight"] = g[e, :half]
                    out[base + ("w3" if mixtral else "up_proj") + ".weight"] = g[e, half:]
            continue
        if mixtral and name.endswith(".mlp.gate.weight"):
            name = name.replace(".mlp.gate.weight", ".block_sparse_moe.gate.weight")
        out[name] = g
    return out


def check_moe(case, model, input_ids, labels, loss):
    """Every token's k-th and (k+1)-th router probabilities must lie apart, so that rounding cannot
    change which experts it takes; and the load-balancing loss, where the case adds it, must move
    the loss."""
    if case not in MOE_CASES:
        return
    gap, _, all_used = routing_gap(model, input_ids)
    assert gap > ROUTING_GAP and all_used, "a token's routing is too close to a tie, or an expert is idle"
    if model.config.output_router_logits:
        config = copy.deepcopy(model.config)
        config.output_router_logits = False
        other_loss = loss_with(model, config, input_ids, labels)
        print(f"  [{case}] loss {loss:.8f}, without the load-balancing loss: {other_loss:.8f}")
        assert abs(other_loss - loss) > 1e-3, "the load-balancing loss has no effect"


def check_reload(case, directory, model32, input_ids, labels, logits32):
    """The written checkpoint must reproduce the model it came from."""
    extra = {"experts_implementation": "eager"} if case in MOE_CASES else {}
    reloaded = type(model32).from_pretrained(directory, attn_implementation="eager", **extra)
    reloaded.float().train()
    with torch.no_grad():
        logits = reloaded(input_ids=input_ids, labels=labels).logits
    assert torch.equal(logits, logits32), f"{case}: reloaded checkpoint differs"


def make_case(case, seed):
    directory = OUT / case
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model32 = build(case)
    randomise(model32, gen)
    vocab = model32.config.get_text_config().vocab_size
    input_ids, labels = make_inputs(vocab, gen)
    if case in MOE_CASES:
        choose_routers(case, model32, input_ids, seed)
    model32.save_pretrained(directory, safe_serialization=True)
    for f in directory.iterdir():
        if f.name not in KEEP:
            f.unlink()

    logits32, loss32, grads32, _ = forward_backward(model32, input_ids, labels)
    model64 = copy.deepcopy(model32).double()
    logits64, loss64, grads64, aux64 = forward_backward(model64, input_ids, labels)

    # Independent float64 loss with HF's convention (shift by one, mean over non -100).
    own = torch.nn.functional.cross_entropy(
        logits64[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100).item() + aux64
    assert abs(own - loss64.item()) < 1e-6 * abs(own), (own, loss64.item())

    check_rope(case, model64)
    check_sliding(case, model64, input_ids, labels, loss64.item())
    check_gemma2(case, model64, input_ids, labels, loss64.item())
    check_gemma3(case, model64, input_ids, labels, loss64.item())
    check_longrope(case, model64, input_ids, labels, loss64.item())
    check_moe(case, model64, input_ids, labels, loss64.item())
    check_reload(case, directory, model32, input_ids, labels, logits32)

    expected = {
        "input_ids": input_ids.contiguous(),
        "labels": labels.contiguous(),
        "logits": logits64.float().contiguous(),
        "loss": loss64.float().reshape(()).contiguous(),
    }
    for name, g in file_names(case, grads64, model64).items():
        expected[f"grad.{name}"] = g.float().contiguous()
    save_file(expected, str(directory / "expected.safetensors"),
              metadata={"generator": "tools/make_parity_fixtures.py (float64 reference)"})

    # HF's own float32 run against the float64 reference: the noise floor.
    worst_grad = max(rel(grads32[n], grads64[n]) for n in grads64)
    print(f"  [{case}] fp32 vs fp64: logits {rel(logits32, logits64):.2e}, "
          f"loss {rel(loss32, loss64):.2e}, worst grad {worst_grad:.2e} (norm-relative)")

    n_params = sum(p.numel() for p in model32.parameters())
    return model32, {
        "case": case, "arch": type(model32).__name__, "params": n_params,
        "loss": loss64.item(), "log_v": math.log(vocab), "size": dir_size(directory),
    }


def make_eval(model32, directory, seed):
    """eval.jsonl and eval_expected.json for `ftrun eval` (llama_gqa)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = model32.config.vocab_size
    rows = []
    for i, length in enumerate([5, 11, 20, 8]):
        ids = torch.randint(0, vocab, (length,), generator=gen).tolist()
        row = {"input_ids": ids}
        if i == 1:
            row["labels"] = [-100] * 4 + ids[4:]  # prompt-masked row
        elif i == 2:
            labels = list(ids)
            for j in (0, 3, 7, 8, 15):
                labels[j] = -100
            row["labels"] = labels
        rows.append(row)

    model64 = copy.deepcopy(model32).double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row["input_ids"]])
            labels = torch.tensor([row.get("labels", row["input_ids"])])
            out = model64(input_ids=ids, labels=labels)
            targets = labels[0, 1:]
            mask = targets != -100
            logp = torch.log_softmax(out.logits[0, :-1].double(), dim=-1)
            nll = -logp[mask].gather(1, targets[mask][:, None]).sum().item()
            n = int(mask.sum())
            assert abs(nll / n - out.loss.item()) < 1e-6 * (nll / n)
            total += nll
            count += n
    loss = total / count
    with open(directory / "eval.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(directory / "eval_expected.json", "w") as f:
        json.dump({"loss": loss, "tokens": count, "perplexity": math.exp(loss)}, f, indent=2)
        f.write("\n")
    print(f"  [eval] {len(rows)} rows, {count} scored tokens, loss {loss:.8f}, "
          f"perplexity {math.exp(loss):.6f}")


def verify(directory):
    """Reads the outputs back with safetensors and checks names, dtypes, shapes."""
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(str(directory / "expected.safetensors"), "pt") as f:
        exp = {k: f.get_tensor(k) for k in f.keys()}
    assert all(t.dtype == torch.float32 for t in weights.values())
    assert exp["input_ids"].dtype == torch.int64 and exp["input_ids"].shape == (BATCH, SEQ)
    assert exp["labels"].dtype == torch.int64 and exp["labels"].shape == (BATCH, SEQ)
    assert exp["logits"].dtype == torch.float32 and exp["logits"].shape[:2] == (BATCH, SEQ)
    assert exp["loss"].dtype == torch.float32 and exp["loss"].shape == ()
    grads = {k[5:]: v for k, v in exp.items() if k.startswith("grad.")}
    assert all(v.dtype == torch.float32 for v in grads.values())
    assert all(torch.isfinite(v).all() and v.abs().max() > 0 for v in grads.values())
    return weights, grads


def main():
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = sys.argv[1:] or list(CASES)
    unknown = sorted(set(wanted) - set(CASES))
    assert not unknown, f"unknown cases {unknown}; known: {list(CASES)}"
    rows = []
    for seed, case in enumerate(CASES, start=1234):
        if case not in wanted:
            continue
        print(f"{case}:")
        model32, row = make_case(case, seed)
        if case == "llama_gqa":
            make_eval(model32, OUT / case, seed + 1000)
            row["size"] = dir_size(OUT / case)
        weights, grads = verify(OUT / case)
        only_w = sorted(set(weights) - set(grads))
        only_g = sorted(set(grads) - set(weights))
        if only_w or only_g:
            print(f"  [{case}] names only in model.safetensors: {only_w}; only in grads: {only_g}")
        assert case not in MOE_CASES or not (only_w or only_g), "expert gradients not under the files' names"
        assert row["size"] < 2 * 1024 * 1024, f"{case} is {row['size']} bytes"
        rows.append(row)

    print()
    print(f"{'case':<22}{'architecture':<22}{'params':>8}{'loss':>12}{'log(V)':>9}{'size':>11}")
    for r in rows:
        print(f"{r['case']:<22}{r['arch']:<22}{r['params']:>8}{r['loss']:>12.6f}"
              f"{r['log_v']:>9.4f}{r['size'] / 1024:>8.1f} KiB")


if __name__ == "__main__":
    main()

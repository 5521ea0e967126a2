// Every layer's backward against central finite differences, in double.
#include <doctest/doctest.h>

#include <ft/device/cpu/attention.hpp>
#include <ft/nn/attention_rows.hpp>
#include <ft/nn/cross_entropy.hpp>
#include <ft/nn/embedding.hpp>
#include <ft/nn/head_norm.hpp>
#include <ft/nn/linear.hpp>
#include <ft/nn/mlp.hpp>
#include <ft/nn/norm.hpp>
#include <ft/nn/rope.hpp>

#include "support/finite_difference.hpp"

namespace test_gradients {

using namespace ft;
using namespace ft::nn;
using ft::cpu::attention_backward;
using ft::cpu::attention_forward;
using ft::testing::dot;
using ft::testing::expect_gradient;
using ft::testing::random_vector;
using Vec = std::vector<double>;

TEST_CASE("embedding backward matches finite differences, and a padding row takes none") {
  std::mt19937 rng(1);
  const index_t N = 7, C = 5, V = 4;
  Vec table = random_vector(V * C, rng), w = random_vector(N * C, rng), out(N * C);
  std::vector<std::int32_t> ids{0, 3, 3, 1, 0, 3, 2};  // repeated ids sum their gradients
  auto loss = [&] {
    embedding_forward(out.data(), ids.data(), table.data(), N, C);
    return dot(out, w);
  };
  Vec dtable(table.size());
  embedding_backward(dtable.data(), ids.data(), w.data(), N, C);
  expect_gradient("table", table, dtable, loss);

  // A padding row (HF's pad_token_id, torch's padding_idx) takes no gradient; the others are unchanged.
  Vec padded(table.size());
  embedding_backward(padded.data(), ids.data(), w.data(), N, C, /*padding_idx=*/3);
  for (index_t v = 0; v < V; ++v)
    for (index_t c = 0; c < C; ++c) CHECK(padded[v * C + c] == (v == 3 ? 0.0 : dtable[v * C + c]));
}

TEST_CASE("linear backward matches finite differences, with and without bias") {
  std::mt19937 rng(2);
  const index_t N = 6, I = 5, O = 3;
  for (bool with_bias : {true, false}) {
    Vec x = random_vector(N * I, rng), W = random_vector(O * I, rng), b = random_vector(O, rng);
    Vec w = random_vector(N * O, rng), out(N * O);
    auto loss = [&] {
      linear_forward(out.data(), x.data(), W.data(), with_bias ? b.data() : nullptr, N, I, O);
      return dot(out, w);
    };
    Vec dx(x.size()), dW(W.size()), db(b.size());
    linear_backward(dx.data(), dW.data(), with_bias ? db.data() : nullptr, w.data(), x.data(), W.data(), N, I, O);
    expect_gradient("x", x, dx, loss);
    expect_gradient("W", W, dW, loss);
    if (with_bias) expect_gradient("b", b, db, loss);
  }
}

TEST_CASE("RMSNorm, LayerNorm and Gemma's RMSNorm (1 + w) backward match finite differences") {
  std::mt19937 rng(3);
  const index_t N = 5, C = 8;
  for (NormKind kind : {NormKind::rms, NormKind::layer, NormKind::rms_unit_offset}) {
    CAPTURE(int(kind));
    Vec x = random_vector(N * C, rng), g = random_vector(C, rng), b = random_vector(C, rng);
    Vec w = random_vector(N * C, rng), out(N * C), mean(N), rstd(N);
    auto loss = [&] {
      norm_forward(kind, out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), N, C, 1e-5);
      return dot(out, w);
    };
    loss();
    Vec dx(x.size()), dg(C), db(C);
    norm_backward(kind, dx.data(), dg.data(), db.data(), w.data(), x.data(), g.data(), mean.data(), rstd.data(),
                  N, C);
    expect_gradient("x", x, dx, loss);
    expect_gradient("weight", g, dg, loss);
    if (kind == NormKind::layer) expect_gradient("bias", b, db, loss);
    if (kind == NormKind::rms_unit_offset) {  // the plain RMSNorm with 1 + w as its weight
      Vec plain(N * C), one_plus(C);
      for (index_t c = 0; c < C; ++c) one_plus[c] = 1 + g[c];
      norm_forward(NormKind::rms, plain.data(), mean.data(), rstd.data(), x.data(), one_plus.data(), b.data(), N, C,
                   1e-5);
      loss();
      for (index_t i = 0; i < N * C; ++i) CHECK(out[i] == doctest::Approx(plain[i]).epsilon(1e-14));
    }
  }
}

TEST_CASE("rotary embedding backward matches finite differences: full, partial, Llama-3 scaled, LongRoPE by row") {
  std::mt19937 rng(4);
  const index_t N = 6, H = 2, G = 1, D = 8;
  RopeConfig full{.theta = 10000, .rotary_dim = 8};
  RopeConfig partial{.theta = 10000, .rotary_dim = 4};
  RopeConfig llama3{.theta = 500000, .rotary_dim = 8, .llama3 = true,
                    .scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                .original_max_position_embeddings = 8}};
  RopeConfig longrope{.theta = 10000, .rotary_dim = 8, .short_factors = {1, 1.5, 2, 3},
                      .long_factors = {1, 4, 9, 20}, .attention_factor = 1.2, .position_limit = 4};
  std::vector<std::int32_t> positions{0, 1, 2, 0, 1, 7};
  const std::vector<std::uint8_t> long_rows{0, 1, 0, 1, 0, 1};
  for (const RopeConfig& rope : {full, partial, llama3, longrope}) {
    auto inv = rope_inverse_frequencies(rope);
    auto long_inv = rope_inverse_frequencies(rope, /*long_factors=*/true);
    const bool by_row = !rope.long_factors.empty();
    const RopeTables tables{inv, by_row ? long_inv.data() : nullptr, by_row ? long_rows.data() : nullptr};
    const float scale = float(rope.attention_factor);
    Vec x = random_vector(N * (H + 2 * G) * D, rng), w = random_vector(x.size(), rng);
    auto loss = [&] {
      Vec y = x;
      rope_forward(y.data(), positions.data(), tables, N, H, G, D, scale);
      return dot(y, w);
    };
    if (by_row) {  // the flagged rows rotate by the long table, the others by the short one
      Vec by_table = x, short_only = x;
      rope_forward(by_table.data(), positions.data(), tables, N, H, G, D, scale);
      rope_forward(short_only.data(), positions.data(), RopeTables{inv}, N, H, G, D, scale);
      const index_t row = (H + 2 * G) * D;
      for (index_t n = 0; n < N; ++n) {
        const bool same = std::equal(by_table.begin() + n * row, by_table.begin() + (n + 1) * row,
                                     short_only.begin() + n * row);
        CHECK(same == (long_rows[std::size_t(n)] == 0 || positions[std::size_t(n)] == 0));
      }
    }
    Vec dx = w;
    rope_backward(dx.data(), positions.data(), tables, N, H, G, D, scale);
    // rope_backward rotates the gradient in place; values pass through unchanged.
    expect_gradient("qkv", x, dx, loss);
  }
}

TEST_CASE("per-head RMSNorm of queries and keys (Qwen3's q_norm, k_norm; Gemma 3's 1 + w) backward matches finite "
          "differences") {
  std::mt19937 rng(11);
  const index_t N = 5, H = 4, G = 2, D = 6;
  for (double offset : {0.0, 1.0}) {
    CAPTURE(offset);
    Vec x = random_vector(N * (H + 2 * G) * D, rng), w = random_vector(x.size(), rng);
    Vec q_weight = random_vector(D, rng), k_weight = random_vector(D, rng);
    Vec saved(N * (H + G) * D), rstd(N * (H + G));
    auto loss = [&] {
      Vec y = x;
      head_norm_forward(y.data(), saved.data(), rstd.data(), q_weight.data(), k_weight.data(), N, H, G, D, 1e-6,
                        offset);
      return dot(y, w);
    };
    loss();
    Vec dx = w, dq(D), dk(D);
    head_norm_backward(dx.data(), dq.data(), dk.data(), saved.data(), rstd.data(), q_weight.data(), k_weight.data(),
                       N, H, G, D, offset);
    // The values pass through: their gradient is w's, which dx keeps.
    expect_gradient("qkv", x, dx, loss);
    expect_gradient("q_norm.weight", q_weight, dq, loss);
    expect_gradient("k_norm.weight", k_weight, dk, loss);
  }
}

TEST_CASE("Llama-3 frequency scaling keeps short wavelengths and divides long ones") {
  RopeConfig plain{.theta = 500000, .rotary_dim = 16};
  RopeConfig scaled = plain;
  scaled.llama3 = true;
  scaled.scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_position_embeddings = 64};
  auto a = rope_inverse_frequencies(plain), b = rope_inverse_frequencies(scaled);
  CHECK(b.front() == a.front());                               // wavelength 2*pi < 64/4: kept
  CHECK(b.back() == doctest::Approx(a.back() / 8).epsilon(1e-6));  // longest wavelength: divided
}

TEST_CASE("LongRoPE divides each frequency by its short or long factor, and a batch reaching the limit takes the long") {
  RopeConfig rope{.theta = 10000, .rotary_dim = 4, .short_factors = {1.5, 2}, .long_factors = {3, 8},
                  .position_limit = 16};
  const auto plain = rope_inverse_frequencies(RopeConfig{.theta = 10000, .rotary_dim = 4});
  const auto short_table = rope_inverse_frequencies(rope), long_table = rope_inverse_frequencies(rope, true);
  CHECK(short_table[1] == doctest::Approx(plain[1] / 2).epsilon(1e-6));
  CHECK(long_table[1] == doctest::Approx(plain[1] / 8).epsilon(1e-6));
  const std::vector<std::int32_t> below{0, 1, 15, 3}, reaching{0, 16, 2};
  CHECK_FALSE(takes_long_factors(rope, below));
  CHECK(takes_long_factors(rope, reaching));
  CHECK_FALSE(takes_long_factors(RopeConfig{.theta = 10000, .rotary_dim = 4}, reaching));
}

namespace {
// Attention by its definition: full softmax rows over the visible keys.
Vec naive_attention(const Vec& qkv, const std::vector<std::int32_t>* docs, const AttentionShape& s) {
  index_t stride = (s.H + 2 * s.G) * s.D;
  Vec out(std::size_t(s.B * s.T * s.H * s.D));
  for (index_t b = 0; b < s.B; ++b)
    for (index_t h = 0; h < s.H; ++h)
      for (index_t i = 0; i < s.T; ++i) {
        index_t g = h / (s.H / s.G);
        std::vector<double> score(std::size_t(s.T), -INFINITY);
        double max = -INFINITY;
        for (index_t j = 0; j <= i; ++j) {
          if (docs && (*docs)[b * s.T + j] != (*docs)[b * s.T + i]) continue;
          if (s.window && i - j >= s.window) continue;
          double dotp = 0;
          for (index_t d = 0; d < s.D; ++d)
            dotp += qkv[(b * s.T + i) * stride + h * s.D + d] * qkv[(b * s.T + j) * stride + (s.H + g) * s.D + d];
          score[j] = dotp * (s.scale > 0 ? s.scale : 1 / std::sqrt(double(s.D)));
          if (s.softcap > 0) score[j] = s.softcap * std::tanh(score[j] / s.softcap);  // Gemma 2's eager form
          // ALiBi as HF writes it: the slope times the key's position in the row.
          if (s.alibi) score[j] += double(ft::nn::alibi_slope(h, s.H)) * double(j);
          max = std::max(max, score[j]);
        }
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - max));
        for (index_t j = 0; j <= i; ++j)
          for (index_t d = 0; d < s.D; ++d)
            out[(b * s.T + i) * s.H * s.D + h * s.D + d] +=
                score[j] / sum * qkv[(b * s.T + j) * stride + (s.H + s.G + g) * s.D + d];
      }
  return out;
}
}  // namespace

TEST_CASE("tiled attention equals full-softmax attention, its backward matches finite differences, and the row path equals both") {
  std::mt19937 rng(5);
  struct Case {
    const char* name;
    AttentionShape shape;
    bool documents;
  };
  // T above the 64-row tile so that tiles, rescaling and skipped tiles all run.
  for (const Case& c : {Case{"multi-head", {1, 9, 2, 2, 4, 0}, false},
                        Case{"grouped-query, two tiles", {2, 70, 4, 2, 4, 0}, false},
                        Case{"sliding window 5", {1, 70, 2, 1, 4, 5}, false},
                        Case{"documents in a packed row", {2, 70, 2, 1, 4, 0}, true},
                        Case{"documents and window", {1, 70, 2, 2, 4, 9}, true},
                        Case{"a stated scale (Granite's attention_multiplier)", {2, 70, 4, 2, 4, 0, 0.3}, true},
                        Case{"ALiBi over six heads (Bloom)", {2, 70, 6, 6, 4, 0, 0, true}, false},
                        Case{"ALiBi in a packed row", {1, 70, 6, 6, 4, 0, 0, true}, true},
                        Case{"soft-capped scores (Gemma 2)", {2, 70, 4, 2, 4, 0, 0.5, false, 0.8}, false},
                        Case{"soft-capped, windowed, packed", {1, 70, 2, 1, 4, 9, 0, false, 0.6}, true}}) {
    CAPTURE(c.name);
    const AttentionShape& s = c.shape;
    index_t N = s.B * s.T;
    std::vector<std::int32_t> docs(static_cast<std::size_t>(N));
    for (index_t n = 0; n < N; ++n) docs[n] = std::int32_t(n % s.T < 30 ? 0 : n % s.T < 66 ? 1 : 2);
    const std::int32_t* doc_ptr = c.documents ? docs.data() : nullptr;
    Vec qkv = random_vector(N * (s.H + 2 * s.G) * s.D, rng), out(N * s.H * s.D), lse(s.B * s.H * s.T);
    Vec w = random_vector(out.size(), rng);
    attention_forward(out.data(), lse.data(), qkv.data(), doc_ptr, s);
    Vec expected = naive_attention(qkv, c.documents ? &docs : nullptr, s);
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - expected[i]));
    CHECK(worst < 1e-12);

    auto loss = [&] {
      attention_forward(out.data(), lse.data(), qkv.data(), doc_ptr, s);
      return dot(out, w);
    };
    loss();
    Vec dqkv(qkv.size());
    attention_backward(dqkv.data(), w.data(), out.data(), lse.data(), qkv.data(), doc_ptr, s);
    expect_gradient("qkv", qkv, dqkv, loss);

    // The row path (what a GPU runs, nn/attention_rows.hpp) on the CPU: the same outputs,
    // log-sum-exps and gradient (the finite differences left out and lse perturbed: recomputed).
    attention_forward(out.data(), lse.data(), qkv.data(), doc_ptr, s);
    Vec row_out(out.size()), row_lse(lse.size()), row_dqkv(qkv.size());
    attention_forward_rows<device::Cpu>(row_out.data(), row_lse.data(), qkv.data(), doc_ptr, s);
    attention_backward_rows<device::Cpu>(row_dqkv.data(), w.data(), row_out.data(), row_lse.data(), qkv.data(),
                                         doc_ptr, s);
    double row_worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) row_worst = std::max(row_worst, std::abs(row_out[i] - out[i]));
    for (std::size_t i = 0; i < lse.size(); ++i) row_worst = std::max(row_worst, std::abs(row_lse[i] - lse[i]));
    for (std::size_t i = 0; i < dqkv.size(); ++i) row_worst = std::max(row_worst, std::abs(row_dqkv[i] - dqkv[i]));
    CHECK(row_worst < 1e-12);
  }
}

TEST_CASE("MLP middles backward match finite differences: SwiGLU, GELU, tanh GELU") {
  std::mt19937 rng(6);
  const index_t N = 4, F = 6;
  for (auto [gated, act] : {std::pair{true, Activation::silu}, std::pair{false, Activation::gelu},
                            std::pair{false, Activation::gelu_tanh}, std::pair{true, Activation::gelu}}) {
    Vec x = random_vector(N * (gated ? 2 : 1) * F, rng), w = random_vector(N * F, rng), h(N * F);
    auto loss = [&] {
      mlp_forward(h.data(), x.data(), N, F, gated, act);
      return dot(h, w);
    };
    Vec dx(x.size());
    mlp_backward(dx.data(), w.data(), x.data(), N, F, gated, act);
    expect_gradient("x", x, dx, loss);
  }
}

TEST_CASE("fused LM head cross-entropy: loss, ignore index, chunking, token count, logit scale and soft-cap") {
  std::mt19937 rng(7);
  const index_t N = 9, C = 5, V = 11;
  Vec h = random_vector(N * C, rng), W = random_vector(V * C, rng);
  std::vector<std::int32_t> targets{3, -100, 0, 10, 7, -100, 2, 2, 5};
  const double count = 13;  // e.g. the tokens of a whole accumulated batch

  // Reference loss from explicit logits, scaled and capped when asked.
  auto reference = [&](double scale, double cap) {
    double expected = 0;
    for (index_t n = 0; n < N; ++n) {
      if (targets[n] == ignore_index) continue;
      std::vector<double> z(V);
      double max = -INFINITY;
      for (index_t v = 0; v < V; ++v) {
        for (index_t c = 0; c < C; ++c) z[v] += h[n * C + c] * W[v * C + c];
        z[v] *= scale;
        if (cap > 0) z[v] = cap * std::tanh(z[v] / cap);
        max = std::max(max, z[v]);
      }
      double sum = 0;
      for (double x : z) sum += std::exp(x - max);
      expected += max + std::log(sum) - z[targets[n]];
    }
    return expected;
  };
  CHECK(reference(0.7, 1.3) != doctest::Approx(reference(0.7, 0)).epsilon(1e-3));  // the cap bends these logits

  for (index_t chunk : {1, 4, 256}) {
    CAPTURE(chunk);
    CrossEntropyOptions options{.chunk_rows = chunk, .token_count = count};
    if (chunk == 4) {  // Granite's scale and Gemma 2's cap on the logits: the gradient goes back through both
      options.logit_scale = 0.7;
      options.softcap = 1.3;
    }
    Vec dh(h.size()), dW(W.size());
    double loss = lm_head_cross_entropy(dh.data(), dW.data(), h.data(), W.data(), targets.data(), N, C, V, options);
    CHECK(loss == doctest::Approx(reference(options.logit_scale, options.softcap)).epsilon(1e-12));
    auto probe = [&] {
      CrossEntropyOptions eval = options;
      eval.backward = false;
      return lm_head_cross_entropy<device::Cpu, double>(nullptr, nullptr, h.data(), W.data(), targets.data(), N, C, V, eval) /
             count;
    };
    expect_gradient("hidden", h, dh, probe);
    expect_gradient("weight", W, dW, probe);
  }
}

}  // namespace test_gradients

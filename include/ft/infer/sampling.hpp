#pragma once
// Choosing the next token from a step's logits, as HF's generate and the
// OpenAI API (and vLLM) define the knobs, applied in this order:
//   repetition_penalty  HF: a token already in the prompt or the output has
//                       its logit divided by the penalty (multiplied when
//                       negative); 1 = off
//   presence_penalty,   OpenAI: subtracted from a token's logit once if it
//   frequency_penalty   is in the output, and once per occurrence; 0 = off
//   temperature         0: greedy (the first largest logit, as argmax); else
//                       logits / temperature, then
//   top_k               keep the k most likely (0 = all)
//   top_p               keep the most likely whose probabilities sum to p
//   min_p               keep those at least min_p x the most likely's
// and draw from what is left with the sequence's own random engine, seeded
// per request, so the same seed gives the same text whatever else is in the
// batch. Log-probabilities reported are the model's own (log-softmax of
// the raw logits), as vLLM reports them by default.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ft/core/error.hpp"

namespace ft::infer {

struct SamplingParams {
  double temperature = 1.0;
  std::int64_t top_k = 0;
  double top_p = 1.0, min_p = 0.0;
  double repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0;
  std::uint64_t seed = 0;

  // One line naming the first parameter out of range, or "".
  std::string check() const {
    if (!(temperature >= 0)) return "temperature must be >= 0";
    if (top_k < 0) return "top_k must be >= 0 (0: no limit)";
    if (!(top_p > 0 && top_p <= 1)) return "top_p must be in (0, 1]";
    if (!(min_p >= 0 && min_p <= 1)) return "min_p must be in [0, 1]";
    if (!(repetition_penalty > 0)) return "repetition_penalty must be > 0";
    if (!(presence_penalty >= -2 && presence_penalty <= 2)) return "presence_penalty must be in [-2, 2]";
    if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) return "frequency_penalty must be in [-2, 2]";
    return "";
  }
  bool greedy() const { return temperature == 0; }
};

class Sampler {
public:
  explicit Sampler(const SamplingParams& p) : p_(p), engine_(p.seed) {
    if (const std::string e = p.check(); !e.empty()) throw Error(e);
  }

  // The next token after `context` (the prompt and the output so far, of
  // which the last `output` tokens are the output), from logits [V]; the
  // logits are changed in place.
  std::int32_t next(std::span<float> logits, std::span<const std::int32_t> context, std::size_t output) {
    penalise(logits, context, output);
    if (p_.greedy()) return std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const std::size_t V = logits.size();
    const float top = *std::max_element(logits.begin(), logits.end());
    probabilities_.resize(V);
    double sum = 0;
    for (std::size_t i = 0; i < V; ++i) sum += probabilities_[i] = std::exp((double(logits[i]) - top) / p_.temperature);
    for (double& q : probabilities_) q /= sum;
    const std::size_t top_k = p_.top_k > 0 ? std::min(V, std::size_t(p_.top_k)) : V;
    if (top_k == V && p_.top_p >= 1 && p_.min_p <= 0) {  // nothing cut: draw over the ids as they are
      double u = std::uniform_real_distribution<double>(0, 1)(engine_);
      for (std::size_t i = 0; i < V; ++i)
        if ((u -= probabilities_[i]) < 0) return std::int32_t(i);
      return std::int32_t(std::max_element(probabilities_.begin(), probabilities_.end()) - probabilities_.begin());
    }
    // Most likely first, ties by the lower id; only as long a prefix is put
    // in order as the cuts need (a few dozen tokens, not the vocabulary).
    order_.resize(V);
    std::iota(order_.begin(), order_.end(), 0);
    auto more_likely = [&](std::int32_t a, std::int32_t b) {
      const double pa = probabilities_[std::size_t(a)], pb = probabilities_[std::size_t(b)];
      return pa > pb || (pa == pb && a < b);
    };
    std::size_t keep = 0;
    for (std::size_t sorted = std::min(V, std::size_t(64));; sorted = std::min(V, sorted * 4)) {
      std::partial_sort(order_.begin(), order_.begin() + std::ptrdiff_t(sorted), order_.end(), more_likely);
      keep = kept_prefix(sorted, top_k);
      if (keep > 0 || sorted == V) break;
    }
    if (keep == 0) keep = top_k;
    double kept = 0;
    for (std::size_t i = 0; i < keep; ++i) kept += probabilities_[std::size_t(order_[i])];
    double u = std::uniform_real_distribution<double>(0, kept)(engine_);
    for (std::size_t i = 0; i < keep; ++i) {
      u -= probabilities_[std::size_t(order_[i])];
      if (u < 0) return order_[i];
    }
    return order_[keep - 1];
  }

  // log p(token) under logits (the model's distribution).
  static float log_probability(std::span<const float> logits, std::int32_t token) {
    const float top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - top);
    return float(double(logits[std::size_t(token)]) - top - std::log(sum));
  }

private:
  // How many of the most likely tokens top_k, top_p and min_p keep (the
  // shortest of their prefixes), read from the first `sorted` of order_; 0
  // when that is not enough to tell.
  std::size_t kept_prefix(std::size_t sorted, std::size_t top_k) const {
    const double floor = p_.min_p * probabilities_[std::size_t(order_[0])];
    double cumulative = 0;
    for (std::size_t i = 0; i < sorted; ++i) {
      if (i == top_k) return top_k;
      const double q = probabilities_[std::size_t(order_[i])];
      if (p_.min_p > 0 && i > 0 && q < floor) return i;
      cumulative += q;
      if (p_.top_p < 1 && cumulative >= p_.top_p) return i + 1;
    }
    return sorted == top_k ? top_k : 0;
  }

  void penalise(std::span<float> logits, std::span<const std::int32_t> context, std::size_t output) {
    if (p_.repetition_penalty != 1) {
      std::vector<bool> seen(logits.size(), false);
      for (std::int32_t t : context) seen[std::size_t(t)] = true;
      for (std::size_t i = 0; i < logits.size(); ++i)
        if (seen[i]) logits[i] = logits[i] < 0 ? float(logits[i] * p_.repetition_penalty)
                                               : float(logits[i] / p_.repetition_penalty);
    }
    if (p_.presence_penalty != 0 || p_.frequency_penalty != 0) {
      std::unordered_map<std::int32_t, int> counts;
      for (std::size_t i = context.size() - output; i < context.size(); ++i) ++counts[context[i]];
      for (const auto& [t, n] : counts)
        logits[std::size_t(t)] -= float(p_.presence_penalty + p_.frequency_penalty * n);
    }
  }

  SamplingParams p_;
  std::mt19937_64 engine_;
  std::vector<double> probabilities_;
  std::vector<std::int32_t> order_;
};

}  // namespace ft::infer

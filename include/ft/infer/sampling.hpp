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
    std::vector<std::int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    probabilities_.resize(V);
    double sum = 0;
    for (std::size_t i = 0; i < V; ++i) sum += probabilities_[i] = std::exp((double(logits[i]) - top) / p_.temperature);
    for (double& q : probabilities_) q /= sum;
    // Most likely first; ties keep the lower id first.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return probabilities_[std::size_t(a)] > probabilities_[std::size_t(b)]; });
    std::size_t keep = V;
    if (p_.top_k > 0) keep = std::min(keep, std::size_t(p_.top_k));
    if (p_.top_p < 1) {
      double cumulative = 0;
      for (std::size_t i = 0; i < keep; ++i) {
        cumulative += probabilities_[std::size_t(order[i])];
        if (cumulative >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p_.min_p > 0) {
      const double floor = p_.min_p * probabilities_[std::size_t(order[0])];
      std::size_t k = 1;
      while (k < keep && probabilities_[std::size_t(order[k])] >= floor) ++k;
      keep = k;
    }
    double kept = 0;
    for (std::size_t i = 0; i < keep; ++i) kept += probabilities_[std::size_t(order[i])];
    double u = std::uniform_real_distribution<double>(0, kept)(engine_);
    for (std::size_t i = 0; i < keep; ++i) {
      u -= probabilities_[std::size_t(order[i])];
      if (u < 0) return order[i];
    }
    return order[keep - 1];
  }

  // log p(token) under logits (the model's distribution).
  static float log_probability(std::span<const float> logits, std::int32_t token) {
    const float top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - top);
    return float(double(logits[std::size_t(token)]) - top - std::log(sum));
  }

private:
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
};

}  // namespace ft::infer

#pragma once
// The loss of one preference pair and its derivatives, as TRL's DPOTrainer
// computes it (trl 1.16, f_divergence_type "reverse_kl"). With the log-ratios
// chosen = log pi(y_w|x) - log ref(y_w|x) and rejected = log pi(y_l|x) - log
// ref(y_l|x), each a sum over the completion's tokens, and d = chosen - rejected:
//   sigmoid       -log sigmoid(beta d)                        (DPO)
//   hinge         max(0, 1 - beta d)                          (SLiC)
//   ipo           (d' - 1 / (2 beta))^2, d' = chosen / n_w - rejected / n_l
//   robust        (-(1 - s) log sigmoid(beta d) + s log sigmoid(-beta d)) / (1 - 2s)
//   sigmoid_norm  -log sigmoid(beta d')
// where n_w, n_l are the completions' token counts and s the label smoothing.
// The derivatives are with respect to the policy's two log-probabilities;
// the reference's are constants.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

namespace ft::nn {

enum class PreferenceLoss { sigmoid, hinge, ipo, robust, sigmoid_norm };

inline std::optional<PreferenceLoss> preference_loss_from_name(std::string_view name) {
  if (name == "sigmoid") return PreferenceLoss::sigmoid;
  if (name == "hinge") return PreferenceLoss::hinge;
  if (name == "ipo") return PreferenceLoss::ipo;
  if (name == "robust") return PreferenceLoss::robust;
  if (name == "sigmoid_norm") return PreferenceLoss::sigmoid_norm;
  return std::nullopt;
}

struct PreferenceLossOptions {
  PreferenceLoss type = PreferenceLoss::sigmoid;
  double beta = 0.1;
  double label_smoothing = 0;  // robust only, in [0, 0.5)
};

struct PairLoss {
  double loss = 0;
  double d_chosen = 0, d_rejected = 0;  // d loss / d log pi(chosen), d loss / d log pi(rejected)
};

// log sigmoid(x) without overflow.
inline double log_sigmoid(double x) { return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x)); }
inline double sigmoid(double x) { return x < 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x)); }

// chosen_tokens, rejected_tokens: the completions' scored tokens (ipo and sigmoid_norm divide by them, at least 1).
inline PairLoss preference_pair_loss(const PreferenceLossOptions& o, double chosen_logratio, double rejected_logratio,
                                     double chosen_tokens, double rejected_tokens) {
  const double beta = o.beta;
  const bool normalised = o.type == PreferenceLoss::ipo || o.type == PreferenceLoss::sigmoid_norm;
  // d is linear in the two log-ratios: d = a chosen - b rejected.
  const double a = normalised ? 1 / std::max(1.0, chosen_tokens) : 1.0;
  const double b = normalised ? 1 / std::max(1.0, rejected_tokens) : 1.0;
  const double d = a * chosen_logratio - b * rejected_logratio;
  double loss = 0, dd = 0;  // the loss and d loss / d d
  switch (o.type) {
    case PreferenceLoss::sigmoid:
    case PreferenceLoss::sigmoid_norm:
      loss = -log_sigmoid(beta * d);
      dd = -beta * sigmoid(-beta * d);
      break;
    case PreferenceLoss::hinge:
      loss = std::max(0.0, 1 - beta * d);
      dd = 1 - beta * d > 0 ? -beta : 0.0;
      break;
    case PreferenceLoss::ipo: {
      const double e = d - 1 / (2 * beta);
      loss = e * e;
      dd = 2 * e;
      break;
    }
    case PreferenceLoss::robust: {
      const double s = o.label_smoothing;
      loss = (-(1 - s) * log_sigmoid(beta * d) + s * log_sigmoid(-beta * d)) / (1 - 2 * s);
      dd = (-(1 - s) * beta * sigmoid(-beta * d) - s * beta * sigmoid(beta * d)) / (1 - 2 * s);
      break;
    }
  }
  return {loss, dd * a, -dd * b};
}

}  // namespace ft::nn

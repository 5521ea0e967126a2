#pragma once
// The loss of one preference pair and its derivatives, as TRL computes it
// (trl 1.16). DPOTrainer (f_divergence_type "reverse_kl"), with the log-ratios
// chosen = log pi(y_w|x) - log ref(y_w|x) and rejected = log pi(y_l|x) - log
// ref(y_l|x), each a sum over the completion's tokens, and d = chosen - rejected:
//   sigmoid       -log sigmoid(beta d)                        (DPO)
//   hinge         max(0, 1 - beta d)                          (SLiC)
//   ipo           (d' - 1 / (2 beta))^2, d' = chosen / n_w - rejected / n_l
//   robust        (-(1 - s) log sigmoid(beta d) + s log sigmoid(-beta d)) / (1 - 2s)
//   sigmoid_norm  -log sigmoid(beta d')
//   simpo         -(1 - s) log sigmoid(beta e) - s log sigmoid(-beta e),
//                 e = d' - gamma / beta, no reference (CPOTrainer's "simpo")
// where n_w, n_l are the completions' token counts and s the label smoothing.
// ORPOTrainer, on the completions' mean log-probabilities p_w = log pi(y_w|x)
// / n_w and p_l, subtracts beta log sigmoid(log odds) from the chosen
// sequences' cross-entropy, with log odds = (p_w - p_l) - (log(1 - e^p_w) -
// log(1 - e^p_l)) (orpo_pair_loss).
// The derivatives are with respect to the policy's two log-probabilities
// (sums over the completions' tokens); the reference's are constants.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

namespace ft::nn {

enum class PreferenceLoss { sigmoid, hinge, ipo, robust, sigmoid_norm, simpo };

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
  double label_smoothing = 0;  // robust and simpo, in [0, 0.5)
  double gamma = 0;            // simpo's target margin
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
  const bool normalised =
      o.type == PreferenceLoss::ipo || o.type == PreferenceLoss::sigmoid_norm || o.type == PreferenceLoss::simpo;
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
    case PreferenceLoss::simpo: {
      const double s = o.label_smoothing, e = d - o.gamma / beta;
      loss = -(1 - s) * log_sigmoid(beta * e) - s * log_sigmoid(-beta * e);
      dd = -(1 - s) * beta * sigmoid(-beta * e) + s * beta * sigmoid(beta * e);
      break;
    }
  }
  return {loss, dd * a, -dd * b};
}

// log(1 - e^x) for x < 0, accurate at both ends.
inline double log1mexp(double x) { return x > -0.6931471805599453 ? std::log(-std::expm1(x)) : std::log1p(-std::exp(x)); }

struct OddsRatio {
  double log_odds = 0, log_sigmoid = 0;  // log odds and log sigmoid(log odds): ORPO's logged values
  double d_chosen = 0, d_rejected = 0;   // d log sigmoid(log odds) / d log pi(chosen), / d log pi(rejected)
};

// ORPO's odds ratio of a pair from its completions' summed log-probabilities
// and token counts; the pair's loss term is -beta times log_sigmoid. A
// completion's mean log-probability is below 0; at 0 (probability 1) its
// odds are infinite.
inline OddsRatio orpo_odds_ratio(double chosen_logp, double rejected_logp, double chosen_tokens,
                                 double rejected_tokens) {
  const double nw = std::max(1.0, chosen_tokens), nl = std::max(1.0, rejected_tokens);
  const double pw = chosen_logp / nw, pl = rejected_logp / nl;
  OddsRatio o;
  o.log_odds = (pw - pl) - (log1mexp(pw) - log1mexp(pl));
  o.log_sigmoid = log_sigmoid(o.log_odds);
  // d log odds / d p = 1 / (1 - e^p) for the chosen, the opposite for the rejected.
  const double outer = sigmoid(-o.log_odds);
  o.d_chosen = outer / -std::expm1(pw) / nw;
  o.d_rejected = -outer / -std::expm1(pl) / nl;
  return o;
}

}  // namespace ft::nn

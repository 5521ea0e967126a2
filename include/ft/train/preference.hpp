#pragma once
// Preference tuning (train.objective = "dpo", "simpo" or "orpo"), as TRL's
// DPOTrainer, CPOTrainer (loss_type "simpo") and ORPOTrainer compute it. A
// micro-batch holds R pairs: R chosen sequences, then the R rejected ones
// (data/batches.hpp, paired). Each sequence's log-probability is the sum
// over its completion's tokens (SimPO and ORPO take the mean), taken from
// the LM head's chunked cross-entropy (models/sequence_objective.hpp); the
// pair's loss is nn/preference_loss.hpp's, and the step's loss is the mean
// over its pairs.
//
// DPO's reference model is the model as the run starts. Its
// log-probabilities of the pairs the run's steps take, and of every
// validation pair, are computed once in forward passes before the first
// step (TRL's precompute_ref_log_probs), so the run holds one model whatever
// the adapter; a checkpoint keeps them, so a resumed run reads them instead
// of computing them from weights that have moved. SimPO and ORPO have no
// reference.
//
// A cross-entropy term over the chosen sequences (SimPO's cpo_alpha, ORPO's
// whole loss besides the odds ratio) is the mean over the step's scored
// chosen tokens, as ft's SFT loss is, so it does not depend on how the
// step's pairs fall into micro-batches and ranks; TRL takes the mean per
// micro-batch, the same when a step is one micro-batch. ORPO's covers the
// prompt's tokens too: its batches score every token (score_whole_sequences).
//
// Metrics, with TRL's names: per micro-batch (summed over the ranks that
// share it) the mean over pairs of rewards/chosen (DPO: beta (log pi - log
// ref) of the chosen; SimPO and ORPO: beta times its mean log-probability),
// rewards/rejected, rewards/accuracies (chosen reward above rejected),
// rewards/margins, logps/chosen, logps/rejected (SimPO's and ORPO's: means
// per token), and logits/chosen, logits/rejected: the mean logit over the
// completions' tokens; SimPO and ORPO add nll_loss, the chosen sequences'
// cross-entropy per token, and ORPO log_odds_ratio and log_odds_chosen, the
// means of log sigmoid(log odds) and of the log odds. A step logs the mean
// over its micro-batches.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/comm/communicator.hpp"
#include "ft/core/error.hpp"
#include "ft/data/batches.hpp"
#include "ft/models/sequence_objective.hpp"
#include "ft/nn/preference_loss.hpp"
#include "ft/recipe/recipe.hpp"

namespace ft::train {

enum class PreferenceKind { dpo, simpo, orpo };

inline PreferenceKind preference_kind(const std::string& objective) {
  if (objective == "dpo") return PreferenceKind::dpo;
  if (objective == "simpo") return PreferenceKind::simpo;
  if (objective == "orpo") return PreferenceKind::orpo;
  throw Error("internal: train.objective \"" + objective + "\" is not a preference objective");
}

// What a micro-batch adds to the metrics; summed over ranks before division.
struct PreferenceSums {
  static constexpr std::size_t fields = 15;
  enum Field {
    pairs, rewards_chosen, rewards_rejected, accuracies, margins, logps_chosen, logps_rejected,
    logits_chosen, chosen_tokens, logits_rejected, rejected_tokens, nll_sum, nll_tokens, log_odds_ratio,
    log_odds_chosen
  };
  std::array<double, fields> v{};
};

inline const char* const preference_metric_names[] = {
    "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected",
    "logits/chosen",  "logits/rejected",  "nll_loss",           "log_odds_ratio",  "log_odds_chosen"};
constexpr std::size_t preference_metrics = 11;

// How many of preference_metric_names an objective logs (a prefix of them).
inline std::size_t preference_metric_count(PreferenceKind kind) {
  return kind == PreferenceKind::dpo ? 8 : kind == PreferenceKind::simpo ? 9 : 11;
}

// The metrics of one micro-batch's sums, in preference_metric_names' order.
inline std::array<double, preference_metrics> preference_metrics_of(const PreferenceSums& s) {
  using F = PreferenceSums::Field;
  const double p = std::max(1.0, s.v[F::pairs]);
  auto per = [](double sum, double count) { return count > 0 ? sum / count : 0.0; };
  return {s.v[F::rewards_chosen] / p,
          s.v[F::rewards_rejected] / p,
          s.v[F::accuracies] / p,
          s.v[F::margins] / p,
          s.v[F::logps_chosen] / p,
          s.v[F::logps_rejected] / p,
          per(s.v[F::logits_chosen], s.v[F::chosen_tokens]),
          per(s.v[F::logits_rejected], s.v[F::rejected_tokens]),
          per(s.v[F::nll_sum], s.v[F::nll_tokens]),
          s.v[F::log_odds_ratio] / p,
          s.v[F::log_odds_chosen] / p};
}

// Whether position n of the batch is a scored token of its row's completion.
inline bool in_completion(const models::Batch& batch, index_t n) {
  if (batch.targets[std::size_t(n)] == -100) return false;
  return batch.completion_from.empty() || n % batch.T >= batch.completion_from[std::size_t(n / batch.T)];
}

// ORPO's batches: every token of a sequence is a target (its cross-entropy
// covers the prompt), and completion_from marks where each completion's
// targets begin. A row's first position predicts its second token; under
// prompt tuning the last virtual position predicts the first, as PEFT's
// labels do.
inline void score_whole_sequences(models::Batch& batch) {
  batch.completion_from.assign(std::size_t(batch.B), 0);
  for (index_t b = 0; b < batch.B; ++b) {
    const index_t length = batch.lengths.empty() ? batch.T : batch.lengths[std::size_t(b)];
    index_t first = length;
    for (index_t t = 0; t < length && first == length; ++t)
      if (batch.targets[std::size_t(b * batch.T + t)] != -100) first = t;
    batch.completion_from[std::size_t(b)] = first;
    for (index_t t = std::max<index_t>(0, batch.virtual_tokens - 1); t + 1 < length; ++t) {
      const auto n = std::size_t(b * batch.T + t);
      if (batch.targets[n] == -100) batch.targets[n] = batch.input_ids[n + 1];
    }
  }
}

// Each row's completion log-probability, token count and summed mean logit.
struct SequenceScores {
  std::vector<double> logp, tokens, logit_sum;
};

inline SequenceScores sequence_scores(const models::Batch& batch, std::span<const double> token_loss,
                                      std::span<const double> logit_mean) {
  SequenceScores s;
  s.logp.assign(std::size_t(batch.B), 0.0);
  s.tokens.assign(std::size_t(batch.B), 0.0);
  s.logit_sum.assign(std::size_t(batch.B), 0.0);
  for (index_t n = 0; n < batch.rows(); ++n) {
    if (!in_completion(batch, n)) continue;
    const auto b = std::size_t(n / batch.T);
    s.logp[b] -= token_loss[std::size_t(n)];
    s.tokens[b] += 1;
    s.logit_sum[b] += logit_mean[std::size_t(n)];
  }
  return s;
}

// The preference objective of a run: scores each micro-batch the head sees,
// and keeps each one's metric sums until the step takes them.
class PreferenceObjective : public models::SequenceObjective {
public:
  PreferenceObjective(PreferenceKind kind, const recipe::PreferenceSection& p) : kind_(kind) {
    const auto type = kind == PreferenceKind::simpo ? std::optional(nn::PreferenceLoss::simpo)
                                                    : nn::preference_loss_from_name(p.loss_type);
    if (!type) throw Error("preference.loss_type \"" + p.loss_type + "\" is not known");
    options_ = {*type, p.beta, p.label_smoothing, p.simpo_gamma};
    nll_weight_ = kind == PreferenceKind::orpo ? 1.0 : kind == PreferenceKind::simpo ? p.cpo_alpha : 0.0;
  }

  PreferenceKind kind() const { return kind_; }
  bool scores_prompts() const { return kind_ == PreferenceKind::orpo; }
  // Whether the loss has a cross-entropy term over the chosen sequences (SimPO with cpo_alpha, ORPO).
  bool adds_nll() const { return nll_weight_ != 0; }
  // The chosen tokens the cross-entropy term covers in `batch` (0 without one).
  double nll_tokens(const models::Batch& batch) const {
    if (!adds_nll()) return 0;
    double n = 0;
    for (index_t i = 0; i < batch.pairs * batch.T; ++i) n += batch.targets[std::size_t(i)] != -100;
    return n;
  }
  // The step's (or the evaluation's) pairs and nll_tokens over all its
  // micro-batches and ranks: the cross-entropy term is their mean.
  void normalise_nll(double pairs, double nll_tokens) { nll_scale_ = nll_tokens > 0 ? pairs / nll_tokens : 0.0; }

  double score(const models::Batch& batch, std::span<const double> token_loss, std::span<const double> logit_mean,
               std::span<double> weight, bool backward) override {
    const index_t P = batch.pairs;
    if (P <= 0 || batch.B != 2 * P)
      throw Error("internal: a preference objective needs a batch of pairs (2 x " + std::to_string(P) + " rows, got " +
                  std::to_string(batch.B) + ")");
    if (kind_ == PreferenceKind::dpo && batch.reference_logps.size() != std::size_t(batch.B))
      throw Error("internal: a batch of pairs without the reference's log-probabilities");
    if (scores_prompts() && batch.completion_from.size() != std::size_t(batch.B))
      throw Error("internal: ORPO's batch does not score its prompts (score_whole_sequences)");
    const SequenceScores s = sequence_scores(batch, token_loss, logit_mean);
    using F = PreferenceSums::Field;
    PreferenceSums sums;
    double loss = 0;
    std::vector<double> row_weight(std::size_t(batch.B), 0.0);
    for (index_t i = 0; i < P; ++i) {
      const auto c = std::size_t(i), r = std::size_t(P + i);
      // What the logps metrics show: DPO's sums, the others' means per token.
      double chosen = s.logp[c], rejected = s.logp[r];
      double reward_chosen = 0, reward_rejected = 0;
      nn::PairLoss pair;
      if (kind_ == PreferenceKind::dpo) {
        const double log_ratio_chosen = chosen - batch.reference_logps[c];
        const double log_ratio_rejected = rejected - batch.reference_logps[r];
        pair = nn::preference_pair_loss(options_, log_ratio_chosen, log_ratio_rejected, s.tokens[c], s.tokens[r]);
        reward_chosen = options_.beta * log_ratio_chosen;
        reward_rejected = options_.beta * log_ratio_rejected;
      } else {
        if (kind_ == PreferenceKind::simpo) {
          pair = nn::preference_pair_loss(options_, chosen, rejected, s.tokens[c], s.tokens[r]);
        } else {
          const nn::OddsRatio odds = nn::orpo_odds_ratio(chosen, rejected, s.tokens[c], s.tokens[r]);
          pair = {-options_.beta * odds.log_sigmoid, -options_.beta * odds.d_chosen, -options_.beta * odds.d_rejected};
          sums.v[F::log_odds_ratio] += odds.log_sigmoid;
          sums.v[F::log_odds_chosen] += odds.log_odds;
        }
        chosen /= std::max(1.0, s.tokens[c]);
        rejected /= std::max(1.0, s.tokens[r]);
        reward_chosen = options_.beta * chosen;
        reward_rejected = options_.beta * rejected;
      }
      loss += pair.loss;
      // The token loss is -log p, so its gradient carries the opposite sign.
      row_weight[c] = -pair.d_chosen;
      row_weight[r] = -pair.d_rejected;
      sums.v[F::pairs] += 1;
      sums.v[F::rewards_chosen] += reward_chosen;
      sums.v[F::rewards_rejected] += reward_rejected;
      sums.v[F::accuracies] += reward_chosen > reward_rejected ? 1 : 0;
      sums.v[F::margins] += reward_chosen - reward_rejected;
      sums.v[F::logps_chosen] += chosen;
      sums.v[F::logps_rejected] += rejected;
      sums.v[F::logits_chosen] += s.logit_sum[c];
      sums.v[F::chosen_tokens] += s.tokens[c];
      sums.v[F::logits_rejected] += s.logit_sum[r];
      sums.v[F::rejected_tokens] += s.tokens[r];
    }
    if (kind_ != PreferenceKind::dpo) {  // the chosen sequences' cross-entropy, logged even at weight 0
      for (index_t n = 0; n < P * batch.T; ++n)
        if (batch.targets[std::size_t(n)] != -100) {
          sums.v[F::nll_sum] += token_loss[std::size_t(n)];
          sums.v[F::nll_tokens] += 1;
        }
      loss += nll_weight_ * nll_scale_ * sums.v[F::nll_sum];
    }
    if (backward)
      for (index_t n = 0; n < batch.rows(); ++n) {
        const bool nll = adds_nll() && n < P * batch.T && batch.targets[std::size_t(n)] != -100;
        weight[std::size_t(n)] = (in_completion(batch, n) ? row_weight[std::size_t(n / batch.T)] : 0.0) +
                                 (nll ? nll_weight_ * nll_scale_ : 0.0);
      }
    micro_batches_.push_back(sums);
    return loss;
  }

  // The sums of the micro-batches scored since the last call, in order.
  std::vector<PreferenceSums> take() { return std::exchange(micro_batches_, {}); }

private:
  PreferenceKind kind_;
  nn::PreferenceLossOptions options_;
  double nll_weight_ = 0;  // the cross-entropy term's weight: cpo_alpha, 1 for ORPO, 0 for DPO
  double nll_scale_ = 0;   // pairs / cross-entropy tokens of the step (normalise_nll)
  std::vector<PreferenceSums> micro_batches_;
};

// The step's metrics: each micro-batch's sums added over the ranks (a rank
// without the head has none and adds zeros), then the mean over the step's
// micro-batches of each one's metrics, as TRL logs them.
inline std::array<double, preference_metrics> preference_step_metrics(PreferenceObjective& objective,
                                                                      std::size_t micro_batches,
                                                                      comm::Communicator& comm) {
  std::vector<PreferenceSums> mine = objective.take();
  if (mine.size() > micro_batches) throw Error("internal: more scored micro-batches than the step has");
  mine.resize(micro_batches);
  std::vector<double> all;
  for (const PreferenceSums& s : mine) all.insert(all.end(), s.v.begin(), s.v.end());
  comm.all_reduce_sum(std::span<double>(all), "the step's preference metrics").wait();
  std::array<double, preference_metrics> mean{};
  for (std::size_t k = 0; k < micro_batches; ++k) {
    PreferenceSums s;
    std::copy_n(all.begin() + std::ptrdiff_t(k * PreferenceSums::fields), PreferenceSums::fields, s.v.begin());
    const auto m = preference_metrics_of(s);
    for (std::size_t f = 0; f < preference_metrics; ++f) mean[f] += m[f] / double(micro_batches);
  }
  return mean;
}

// Records each row's completion log-probability: the reference pass.
class SequenceLogps : public models::SequenceObjective {
public:
  double score(const models::Batch& batch, std::span<const double> token_loss, std::span<const double> logit_mean,
               std::span<double>, bool) override {
    last_ = sequence_scores(batch, token_loss, logit_mean).logp;
    return 0;
  }
  // The last batch's, empty on a rank without the model's head; cleared.
  std::vector<double> take() { return std::exchange(last_, {}); }

private:
  std::vector<double> last_;
};

// The reference's log-probabilities in a checkpoint: {"train": [...],
// "validation": [...]}, one per example (a pair's chosen, then its rejected),
// each a double written to round-trip exactly.
inline constexpr const char* reference_logps_file = "reference_logps.json";

struct ReferenceLogps {
  std::vector<double> train, validation;
  double seconds = 0;  // the pass that computed them (0: read from a checkpoint)

  // The sequences scored (the others the run does not need).
  std::size_t scored() const {
    std::size_t n = 0;
    for (const auto* v : {&train, &validation})
      for (double x : *v) n += !std::isnan(x);
    return n;
  }

  // Gives a micro-batch of pairs its rows' reference log-probabilities.
  void attach(data::MicroBatch& m, bool from_validation) const {
    const std::vector<double>& table = from_validation ? validation : train;
    models::Batch& batch = m.batch;
    batch.reference_logps.assign(std::size_t(batch.B), 0.0);
    for (std::size_t i = 0; i < m.rows.size(); ++i) {
      const auto pair = std::size_t(m.rows[i]);
      batch.reference_logps[i] = table.at(2 * pair);
      batch.reference_logps[m.rows.size() + i] = table.at(2 * pair + 1);
      if (std::isnan(batch.reference_logps[i]) || std::isnan(batch.reference_logps[m.rows.size() + i]))
        throw Error("pair " + std::to_string(pair + 1) + " of the " + (from_validation ? "validation" : "training") +
                    " data has no reference log-probability: the run scored the pairs of the steps it was started "
                    "for, and now goes further (train.max_steps or num_train_epochs raised on resume); start a new "
                    "run from this one's result instead");
    }
  }

  // Pairs the run does not need were not scored: NaN here, null in the file.
  void write(const std::filesystem::path& dir) const {
    auto values = [](const std::vector<double>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (double x : v) a.push_back(std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x));
      return a;
    };
    std::ofstream(dir / reference_logps_file) << nlohmann::json{{"train", values(train)},
                                                                {"validation", values(validation)}}.dump()
                                              << "\n";
  }
  static ReferenceLogps read(const std::filesystem::path& dir, std::size_t train_examples,
                             std::size_t validation_examples) {
    const std::filesystem::path file = dir / reference_logps_file;
    ReferenceLogps out;
    try {
      std::ifstream in(file);
      const nlohmann::json j = nlohmann::json::parse(in);
      auto values = [](const nlohmann::json& a) {
        std::vector<double> v;
        for (const nlohmann::json& x : a)
          v.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
        return v;
      };
      out.train = values(j.at("train"));
      out.validation = values(j.at("validation"));
    } catch (const std::exception& e) {
      throw Error(file.string() + ": the reference's log-probabilities cannot be read (" + e.what() +
                  "); the checkpoint is damaged");
    }
    if (out.train.size() != train_examples || out.validation.size() != validation_examples)
      throw Error(file.string() + ": holds log-probabilities of " + std::to_string(out.train.size()) + " + " +
                  std::to_string(out.validation.size()) + " sequences, the data has " +
                  std::to_string(train_examples) + " + " + std::to_string(validation_examples) +
                  "; the checkpoint was written for other data");
    return out;
  }
};

// Readies a micro-batch of pairs for the objective: ORPO's prompts scored,
// DPO's reference log-probabilities attached.
inline void prepare_pairs(const PreferenceObjective& objective, const ReferenceLogps& reference, data::MicroBatch& m,
                          bool from_validation) {
  if (objective.scores_prompts()) score_whole_sequences(m.batch);
  if (objective.kind() == PreferenceKind::dpo) reference.attach(m, from_validation);
}

}  // namespace ft::train

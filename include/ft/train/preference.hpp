#pragma once
// Preference tuning (train.objective = "dpo"), as TRL's DPOTrainer computes
// it. A micro-batch holds R pairs: R chosen sequences, then the R rejected
// ones (data/batches.hpp, paired). Each sequence's log-probability is the sum
// over its completion's tokens, taken from the LM head's chunked
// cross-entropy (models/sequence_objective.hpp), and the pair's loss is
// nn/preference_loss.hpp's; the step's loss is the mean over its pairs.
//
// The reference model is the model as the run starts. Its log-probabilities
// of the pairs the run's steps take, and of every validation pair, are
// computed once in forward passes before the first step (TRL's
// precompute_ref_log_probs), so the run holds one model whatever the
// adapter; a checkpoint keeps them, so a resumed run reads them instead of
// computing them from weights that have moved.
//
// Metrics, with TRL's names: per micro-batch (summed over the ranks that
// share it) the mean over pairs of rewards/chosen = beta (log pi - log ref)
// of the chosen, rewards/rejected, rewards/accuracies (chosen reward above
// rejected), rewards/margins, logps/chosen, logps/rejected, and
// logits/chosen, logits/rejected: the mean logit over the completions'
// tokens; a step logs the mean over its micro-batches.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
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

// What a micro-batch adds to the metrics; summed over ranks before division.
struct PreferenceSums {
  static constexpr std::size_t fields = 11;
  enum Field {
    pairs, rewards_chosen, rewards_rejected, accuracies, margins, logps_chosen, logps_rejected,
    logits_chosen, chosen_tokens, logits_rejected, rejected_tokens
  };
  std::array<double, fields> v{};
};

inline const char* const preference_metric_names[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies",
                                                      "rewards/margins", "logps/chosen",     "logps/rejected",
                                                      "logits/chosen",  "logits/rejected"};
constexpr std::size_t preference_metrics = 8;

// The metrics of one micro-batch's sums, in preference_metric_names' order.
inline std::array<double, preference_metrics> preference_metrics_of(const PreferenceSums& s) {
  using F = PreferenceSums::Field;
  const double p = std::max(1.0, s.v[F::pairs]);
  return {s.v[F::rewards_chosen] / p,
          s.v[F::rewards_rejected] / p,
          s.v[F::accuracies] / p,
          s.v[F::margins] / p,
          s.v[F::logps_chosen] / p,
          s.v[F::logps_rejected] / p,
          s.v[F::chosen_tokens] > 0 ? s.v[F::logits_chosen] / s.v[F::chosen_tokens] : 0.0,
          s.v[F::rejected_tokens] > 0 ? s.v[F::logits_rejected] / s.v[F::rejected_tokens] : 0.0};
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
    if (batch.targets[std::size_t(n)] == -100) continue;
    const auto b = std::size_t(n / batch.T);
    s.logp[b] -= token_loss[std::size_t(n)];
    s.tokens[b] += 1;
    s.logit_sum[b] += logit_mean[std::size_t(n)];
  }
  return s;
}

// The DPO objective of a run: scores each micro-batch the head sees, and
// keeps each one's metric sums until the step takes them.
class PreferenceObjective : public models::SequenceObjective {
public:
  explicit PreferenceObjective(const recipe::PreferenceSection& p) {
    const auto type = nn::preference_loss_from_name(p.loss_type);
    if (!type) throw Error("preference.loss_type \"" + p.loss_type + "\" is not known");
    options_ = {*type, p.beta, p.label_smoothing};
  }

  double score(const models::Batch& batch, std::span<const double> token_loss, std::span<const double> logit_mean,
               std::span<double> weight, bool backward) override {
    const index_t P = batch.pairs;
    if (P <= 0 || batch.B != 2 * P)
      throw Error("internal: a preference objective needs a batch of pairs (2 x " + std::to_string(P) + " rows, got " +
                  std::to_string(batch.B) + ")");
    if (batch.reference_logps.size() != std::size_t(batch.B))
      throw Error("internal: a batch of pairs without the reference's log-probabilities");
    const SequenceScores s = sequence_scores(batch, token_loss, logit_mean);
    using F = PreferenceSums::Field;
    PreferenceSums sums;
    double loss = 0;
    std::vector<double> row_weight(std::size_t(batch.B), 0.0);
    for (index_t i = 0; i < P; ++i) {
      const auto c = std::size_t(i), r = std::size_t(P + i);
      const double chosen = s.logp[c] - batch.reference_logps[c], rejected = s.logp[r] - batch.reference_logps[r];
      const nn::PairLoss pair = nn::preference_pair_loss(options_, chosen, rejected, s.tokens[c], s.tokens[r]);
      loss += pair.loss;
      // The token loss is -log p, so its gradient carries the opposite sign.
      row_weight[c] = -pair.d_chosen;
      row_weight[r] = -pair.d_rejected;
      const double reward_chosen = options_.beta * chosen, reward_rejected = options_.beta * rejected;
      sums.v[F::pairs] += 1;
      sums.v[F::rewards_chosen] += reward_chosen;
      sums.v[F::rewards_rejected] += reward_rejected;
      sums.v[F::accuracies] += reward_chosen > reward_rejected ? 1 : 0;
      sums.v[F::margins] += reward_chosen - reward_rejected;
      sums.v[F::logps_chosen] += s.logp[c];
      sums.v[F::logps_rejected] += s.logp[r];
      sums.v[F::logits_chosen] += s.logit_sum[c];
      sums.v[F::chosen_tokens] += s.tokens[c];
      sums.v[F::logits_rejected] += s.logit_sum[r];
      sums.v[F::rejected_tokens] += s.tokens[r];
    }
    if (backward)
      for (index_t n = 0; n < batch.rows(); ++n) weight[std::size_t(n)] = row_weight[std::size_t(n / batch.T)];
    micro_batches_.push_back(sums);
    return loss;
  }

  // The sums of the micro-batches scored since the last call, in order.
  std::vector<PreferenceSums> take() { return std::exchange(micro_batches_, {}); }

private:
  nn::PreferenceLossOptions options_;
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

}  // namespace ft::train

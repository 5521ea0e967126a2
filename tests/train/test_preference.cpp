// Preference tuning (train.objective = "dpo", "simpo", "orpo") against TRL's
// DPOTrainer, CPOTrainer and ORPOTrainer: the pair losses' derivatives by
// finite differences, the head's weighted gradient, TRL's tokenisations of
// preference rows, and whole runs of ftrun against TRL's logged metrics and
// trained weights (tools/make_dpo_fixtures.py, tools/make_simpo_orpo_fixtures.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/command.hpp"
#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/finite_difference.hpp"
#include "support/tensors.hpp"
#include <ft/data/examples.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/safetensors.hpp>
#include <ft/nn/cross_entropy.hpp>
#include <ft/nn/preference_loss.hpp>
#include <ft/text/model_text.hpp>
#include <ft/train/preference.hpp>

namespace test_preference {

namespace fs = std::filesystem;
using namespace ft;

const fs::path fixtures = fs::path(FT_SOURCE_DIR) / "tests/fixtures";

TEST_CASE("preference: every loss type's derivatives match finite differences in double precision") {
  for (const char* name : {"sigmoid", "hinge", "ipo", "robust", "sigmoid_norm", "simpo"}) {
    CAPTURE(name);
    const auto type = std::string(name) == "simpo" ? nn::PreferenceLoss::simpo : *nn::preference_loss_from_name(name);
    const nn::PreferenceLossOptions o{type, 0.3, 0.2, 0.4};
    const double tokens_c = 7, tokens_r = 4;
    for (const auto& [c, r] : std::vector<std::pair<double, double>>{{0.4, -1.3}, {-2.0, 0.5}, {3.1, 2.9}}) {
      CAPTURE(c);
      const nn::PairLoss at = nn::preference_pair_loss(o, c, r, tokens_c, tokens_r);
      const double eps = 1e-6;
      const double dc = (nn::preference_pair_loss(o, c + eps, r, tokens_c, tokens_r).loss -
                         nn::preference_pair_loss(o, c - eps, r, tokens_c, tokens_r).loss) / (2 * eps);
      const double dr = (nn::preference_pair_loss(o, c, r + eps, tokens_c, tokens_r).loss -
                         nn::preference_pair_loss(o, c, r - eps, tokens_c, tokens_r).loss) / (2 * eps);
      CHECK(at.d_chosen == doctest::Approx(dc).epsilon(1e-7));
      CHECK(at.d_rejected == doctest::Approx(dr).epsilon(1e-7));
    }
  }
  // ORPO's log sigmoid(log odds), on log-probabilities below 0 (sums over 7 and 4 tokens).
  for (const auto& [c, r] : std::vector<std::pair<double, double>>{{-0.4, -1.3}, {-6.0, -0.5}, {-3.1, -2.9}}) {
    CAPTURE(c);
    const nn::OddsRatio at = nn::orpo_odds_ratio(c, r, 7, 4);
    const double eps = 1e-6;
    CHECK(at.d_chosen == doctest::Approx((nn::orpo_odds_ratio(c + eps, r, 7, 4).log_sigmoid -
                                          nn::orpo_odds_ratio(c - eps, r, 7, 4).log_sigmoid) / (2 * eps))
                             .epsilon(1e-7));
    CHECK(at.d_rejected == doctest::Approx((nn::orpo_odds_ratio(c, r + eps, 7, 4).log_sigmoid -
                                            nn::orpo_odds_ratio(c, r - eps, 7, 4).log_sigmoid) / (2 * eps))
                               .epsilon(1e-7));
    const double pw = c / 7, pl = r / 4;
    CHECK(at.log_odds == doctest::Approx(std::log(std::exp(pw) / (1 - std::exp(pw))) -
                                         std::log(std::exp(pl) / (1 - std::exp(pl)))).epsilon(1e-12));
  }
  // With the policy equal to the reference, sigmoid DPO is ln 2 and moves the two apart equally.
  const nn::PairLoss even = nn::preference_pair_loss({}, 0, 0, 3, 5);
  CHECK(even.loss == doctest::Approx(std::log(2.0)).epsilon(1e-15));
  CHECK(even.d_chosen == doctest::Approx(-0.05));
  CHECK(even.d_rejected == doctest::Approx(0.05));
}

TEST_CASE("preference: each objective's position weights are the derivatives of its loss with respect to the "
          "token losses, cross-entropy term included") {
  // Two pairs of rows of 6 positions; -100 marks the prompt and the padding.
  models::Batch batch;
  batch.B = 4;
  batch.T = 6;
  batch.pairs = 2;
  batch.input_ids = {1, 5, 6, 7, 8, 2,  1, 5, 9, 4, 2, 0,  1, 5, 3, 2, 0, 0,  1, 5, 4, 4, 4, 2};
  batch.targets = {-100, 6, 7, 8, 2, -100,  -100, 9, 4, 2, -100, -100,  -100, 3, 2, -100, -100, -100,
                   -100, 4, 4, 4, 2, -100};
  batch.lengths = {6, 5, 4, 6};
  batch.reference_logps = {-3.0, -2.5, -4.0, -1.0};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  auto losses = std::vector<double>(24), means = std::vector<double>(24, 0.25);
  for (double& l : losses) l = u(rng);
  for (const char* objective : {"dpo", "simpo", "orpo"}) {
    CAPTURE(objective);
    recipe::PreferenceSection p;
    p.beta = 0.7;
    p.cpo_alpha = 0.6;
    p.label_smoothing = 0.1;
    p.loss_type = "robust";
    train::PreferenceObjective o(train::preference_kind(objective), p);
    models::Batch b = batch;
    if (o.scores_prompts()) {
      train::score_whole_sequences(b);
      CHECK(b.completion_from == std::vector<index_t>{1, 1, 1, 1});
      CHECK(b.targets[0] == 5);  // the prompt's tokens are targets
      CHECK(b.targets[6] == 5);
      CHECK(b.targets[10] == -100);  // a row's last token predicts nothing, nor does its padding
    }
    const double nll_tokens = o.nll_tokens(b);
    CHECK(nll_tokens == (std::string(objective) == "dpo" ? 0 : std::string(objective) == "simpo" ? 7 : 9));
    o.normalise_nll(2, nll_tokens);
    auto weight = std::vector<double>(24);
    const double loss = o.score(b, losses, means, weight, true);
    for (std::size_t n = 0; n < 24; ++n) {
      CAPTURE(n);
      const double eps = 1e-6;
      auto up = losses, down = losses;
      up[n] += eps;
      down[n] -= eps;
      std::vector<double> none;
      const double numeric = (o.score(b, up, means, none, false) - o.score(b, down, means, none, false)) / (2 * eps);
      CHECK(weight[n] == doctest::Approx(numeric).epsilon(1e-7));
    }
    CHECK(std::isfinite(loss));
    o.take();
  }
}

TEST_CASE("preference: the LM head's gradient with row weights is the gradient of the weighted sum of row losses") {
  std::mt19937 rng(11);
  const index_t N = 5, C = 6, V = 9;
  std::vector<double> h = ft::testing::random_vector(std::size_t(N * C), rng);
  std::vector<double> w = ft::testing::random_vector(std::size_t(V * C), rng, 0.5);
  const std::vector<std::int32_t> targets = {3, -100, 0, 8, 2};
  const std::vector<double> weights = {0.7, 5.0, -1.2, 0.0, 2.5};
  auto weighted = [&] {
    auto rows = std::vector<double>(std::size_t(N));
    nn::CrossEntropyOptions o{.chunk_rows = 2, .backward = false, .softcap = 3.0};
    o.row_loss = rows.data();
    nn::lm_head_cross_entropy<device::Cpu, double>(nullptr, nullptr, h.data(), w.data(), targets.data(), N, C, V, o);
    double s = 0;
    for (index_t n = 0; n < N; ++n) s += weights[std::size_t(n)] * rows[std::size_t(n)];
    return s / 4.0;
  };
  std::vector<double> dh(h.size(), 0.0), dw(w.size(), 0.0);
  auto means = std::vector<double>(std::size_t(N));
  nn::CrossEntropyOptions o{.chunk_rows = 2, .token_count = 4.0, .softcap = 3.0};
  o.row_weights = weights.data();
  nn::lm_head_cross_entropy<device::Cpu, double>(dh.data(), dw.data(), h.data(), w.data(), targets.data(), N, C, V, o);
  ft::testing::expect_gradient("h", h, dh, weighted);
  ft::testing::expect_gradient("weight", w, dw, weighted);
  // The mean logit of each scored row, as TRL's logits/* average them.
  nn::CrossEntropyOptions m{.backward = false, .softcap = 3.0};
  m.row_logit_mean = means.data();
  auto logits = std::vector<double>(std::size_t(N * V));
  nn::lm_head_cross_entropy<device::Cpu, double>(nullptr, nullptr, h.data(), w.data(), targets.data(), N, C, V, m,
                                                 logits.data());
  for (index_t n = 0; n < N; ++n) {
    double mean = 0;
    for (index_t v = 0; v < V; ++v) mean += logits[std::size_t(n * V + v)] / double(V);
    CHECK(means[std::size_t(n)] == doctest::Approx(targets[std::size_t(n)] == -100 ? 0.0 : mean).epsilon(1e-12));
  }
}

TEST_CASE("preference: rows of strings, of messages and with an implicit prompt tokenise as TRL's DPOTrainer does") {
  const text::ModelText text = text::ModelText::load(fixtures / "train/tiny_llama");
  const nlohmann::json trl = io::read_json_file(fixtures / "dpo/tokens.json");
  for (const std::string file : {"pairs", "chat_pairs", "implicit_pairs"}) {
    CAPTURE(file);
    const auto limit = trl[file]["max_length"].get<std::size_t>();
    data::ExampleOptions options;
    options.format = "preference";
    options.max_seq_length = std::int64_t(limit);
    const data::ExampleBuilder builder(text.tokenizer.get(), text.chat.get(), text.special, options);
    std::ifstream in(fixtures / "dpo" / (file + ".jsonl"));
    std::size_t i = 0, cut = 0;
    for (std::string line; std::getline(in, line); ++i) {
      CAPTURE(i);
      const nlohmann::json& want = trl[file]["rows"].at(i);
      const std::vector<data::Example> got = builder.build_all(nlohmann::json::parse(line));
      REQUIRE(got.size() == 2);
      const auto prompt = want["prompt_ids"].get<std::vector<std::int32_t>>();
      for (std::size_t side = 0; side < 2; ++side) {
        std::vector<std::int32_t> ids = prompt;
        for (std::int32_t t : want[side == 0 ? "chosen_ids" : "rejected_ids"]) ids.push_back(t);
        cut += ids.size() > limit;
        ids.resize(std::min(ids.size(), limit));
        CHECK(got[side].input_ids == ids);
        std::vector<std::int32_t> labels = ids;
        std::fill_n(labels.begin(), prompt.size(), data::ignore_label);
        CHECK(got[side].labels == labels);
      }
    }
    CHECK(i == trl[file]["rows"].size());
    CHECK(cut > 0);  // some sequences are cut at max_length, as TRL's collator cuts them
  }
}

TEST_CASE("preference: rows of strings, of messages and with an implicit prompt tokenise as TRL's CPOTrainer and "
          "ORPOTrainer do, for SimPO and ORPO") {
  const nlohmann::json trl = io::read_json_file(fixtures / "dpo/cpo_tokens.json");
  std::size_t cut = 0, rows = 0;
  for (const auto& [key, want] : trl.items()) {
    CAPTURE(key);
    const std::string model = key.substr(0, key.find('/')), file = key.substr(key.find('/') + 1);
    const text::ModelText text = text::ModelText::load(fixtures / "train" / model);
    const auto limit = want["max_length"].get<std::size_t>();
    data::ExampleOptions options;
    options.format = "preference";
    options.pair_tokenisation = "cpo";
    options.max_seq_length = std::int64_t(limit);
    const data::ExampleBuilder builder(text.tokenizer.get(), text.chat.get(), text.special, options);
    std::ifstream in(fixtures / "dpo" / (file + ".jsonl"));
    std::size_t i = 0;
    for (std::string line; std::getline(in, line); ++i) {
      CAPTURE(i);
      const nlohmann::json& row = want["rows"].at(i);
      const std::vector<data::Example> got = builder.build_all(nlohmann::json::parse(line));
      REQUIRE(got.size() == 2);
      for (std::size_t side = 0; side < 2; ++side) {
        const std::string name = side == 0 ? "chosen" : "rejected";
        CHECK(got[side].input_ids == row[name + "_input_ids"].get<std::vector<std::int32_t>>());
        CHECK(got[side].labels == row[name + "_labels"].get<std::vector<std::int32_t>>());
        cut += got[side].input_ids.size() == limit;
      }
    }
    CHECK(i == want["rows"].size());
    rows += i;
  }
  CHECK(rows >= 30);
  CHECK(cut > 0);  // some completions are cut at max_length
}

using Run = ft::testing::CommandResult;

// `ftrun ARGS`, its output kept in `dir`.
Run ftrun(const fs::path& dir, const std::string& args) {
  return ft::testing::run_command("OMP_NUM_THREADS=1 " FTRUN_PATH " " + args, dir, "ftrun");
}

std::vector<nlohmann::json> records(const fs::path& run, const std::string& split) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (auto j = nlohmann::json::parse(line); j["split"] == split) out.push_back(j);
  return out;
}

// A recipe that trains as a case of tools/make_dpo_fixtures.py or
// tools/make_simpo_orpo_fixtures.py trained in TRL.
fs::path dpo_recipe(const fs::path& dir, const nlohmann::json& trl, const std::string& extra = "") {
  const bool lora = trl["lora"].get<bool>();
  const fs::path fixture = fixtures / "dpo" / trl["case"].get<std::string>();
  fs::create_directories(dir);
  std::ofstream f(dir / "recipe.toml");
  f << "output_dir = \"" << (dir / "run").string() << "\"\n"
    << "[model]\npath = \"" << (fixtures / "train" / trl["model"].get<std::string>()).string() << "\"\n"
    << "[strategy]\nadapter = \"" << (lora ? "lora" : "full") << "\"\n";
  if (lora) f << "[lora]\ninit_from = \"" << (fixture / "initial_adapter").string() << "\"\n";
  f << "[data]\ntrain = \"" << (fixtures / "dpo/pairs.jsonl").string() << "\"\nformat = \"preference\"\n"
    << "max_seq_length = " << trl["max_length"] << "\n"
    << "[train]\nobjective = \"" << trl.value("objective", "dpo") << "\"\n"
    << "per_device_train_batch_size = " << trl["pairs"] << "\n"
    << "max_steps = " << trl["steps"] << "\nlogging_steps = 1\nlearning_rate = " << trl["learning_rate"] << "\n"
    << "lr_scheduler_type = \"" << trl["lr_scheduler_type"].get<std::string>() << "\"\n"
    << "max_grad_norm = " << trl["max_grad_norm"] << "\nweight_decay = " << trl["weight_decay"] << "\n"
    << "adam_beta1 = " << trl["adam_beta1"] << "\nadam_beta2 = " << trl["adam_beta2"] << "\n"
    << "adam_epsilon = " << trl["adam_epsilon"] << "\n"
    << "[preference]\nbeta = " << trl["beta"] << "\n";
  if (trl.contains("loss_type")) f << "loss_type = \"" << trl["loss_type"].get<std::string>() << "\"\n";
  for (const char* key : {"label_smoothing", "simpo_gamma", "cpo_alpha"})
    if (trl.contains(key)) f << key << " = " << trl[key] << "\n";
  f << extra;
  return dir / "recipe.toml";
}

// ftrun trains the fixture case `name` as TRL did: every metric TRL logged
// within 1e-5 at every step, the trained weights within 1e-4 of each
// tensor's scale.
void expect_follows_trl(const fs::path& tmp, const std::string& name) {
  CAPTURE(name);
  const fs::path fixture = fixtures / "dpo" / name;
  const nlohmann::json trl = io::read_json_file(fixture / "trl.json");
  const std::string objective = trl.value("objective", "dpo");
  const fs::path dir = tmp / name;
  const Run r = ftrun(dir, "train " + dpo_recipe(dir, trl).string());
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::vector<nlohmann::json> got = records(dir / "run", "train");
  const auto& want = trl["log"];
  REQUIRE(got.size() == want.size());
  double gap = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    for (const auto& [metric, value] : want[i].items()) {
      CAPTURE(metric);
      // At cpo_alpha = 0 TRL logs nll_loss as 0; ft logs the cross-entropy it does not add.
      if (metric == "nll_loss" && trl.value("cpo_alpha", 1.0) == 0) continue;
      REQUIRE(got[i].contains(metric));
      const double a = got[i][metric].get<double>(), b = value.get<double>();
      if (metric == "rewards/accuracies") {
        // A pair whose margin is within float32's rounding of zero may count either way.
        CHECK(std::abs(a - b) <= 1.0 / trl["pairs"].get<double>() + 1e-6);
        continue;
      }
      // Relative to the value's size: log-probabilities are sums of ~100 token terms.
      CHECK(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)));
      gap = std::max(gap, std::abs(a - b) / std::max(1.0, std::abs(b)));
    }
  }
  if (objective == "dpo") {
    // At the first step the policy is the reference: every reward 0.
    CHECK(std::abs(got[0]["rewards/margins"].get<double>()) < 1e-6);
    if (trl["loss_type"] == "sigmoid")
      CHECK(got[0]["loss"].get<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-6));
  }
  // The run moved: the chosen completions gained on the rejected ones (SimPO's
  // margins are of mean log-probabilities, and move less; ORPO's loss is
  // mostly the chosen sequences' cross-entropy, and its margin may not move
  // in 12 small steps, in TRL either).
  if (objective != "orpo")
    CHECK(got.back()["rewards/margins"].get<double>() >
          got[0]["rewards/margins"].get<double>() + (objective == "dpo" ? 1e-4 : 0.0));
  CHECK(got.back()["loss"].get<double>() < got[0]["loss"].get<double>());

  // A sample is a row of the data, a pair, as TRL counts them.
  const std::vector<nlohmann::json> summary = records(dir / "run", "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0]["train_samples_per_second"].get<double>() * summary[0]["train_runtime"].get<double>() ==
        doctest::Approx(trl["pairs"].get<double>() * trl["steps"].get<double>()).epsilon(1e-9));

  const bool lora = trl["lora"].get<bool>();
  auto mine = io::SafetensorsFile::open(dir / "run" / (lora ? "adapter/adapter_model.safetensors" : "model/model.safetensors"));
  auto trained = io::SafetensorsFile::open(fixture / "trained.safetensors");
  double tensor_gap = 0;
  std::size_t compared = 0;
  for (const io::TensorView& t : trained.tensors()) {
    CAPTURE(t.name);
    // PEFT names the adapter's tensors after the wrapped model; HF's files name the model's without "model.".
    std::string key = t.name;
    if (!lora && mine.find(key) == nullptr && key.starts_with("model.")) key = key.substr(6);
    if (!lora && mine.find(key) == nullptr) continue;  // a tied head, written once
    REQUIRE(mine.find(key) != nullptr);
    // Within 1e-4 of the tensor's largest value, and 1e-6 for tensors that
    // start at zero and stay small (biases, LoRA's B): float32's rounding
    // of a weight of 1 is 6e-8 a step.
    const std::vector<float> a = ft::testing::read_tensor<float>(mine, key),
                             b = ft::testing::read_tensor<float>(trained, t.name);
    REQUIRE(a.size() == b.size());
    double diff = 0, scale = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      diff = std::max(diff, std::abs(double(a[k]) - double(b[k])));
      scale = std::max(scale, std::abs(double(b[k])));
    }
    CHECK(diff <= 1e-4 * scale + 1e-6);
    tensor_gap = std::max(tensor_gap, diff / std::max(scale, 1e-2));
    ++compared;
  }
  CHECK(compared >= (lora ? 4u : 10u));
  MESSAGE(name << ": largest metric gap " << gap << ", largest weight gap " << tensor_gap);
}

TEST_CASE("preference: DPO's every loss type, full and LoRA, on Llama and GPT-NeoX follows TRL's DPOTrainer: every "
          "logged metric within 1e-5, the trained weights within 1e-4 of each tensor's scale") {
  ft::testing::TempDir tmp("ft_dpo_trl");
  for (const std::string name : {"llama_full_sigmoid", "llama_lora_sigmoid", "llama_lora_ipo", "llama_lora_hinge",
                                 "llama_lora_robust", "llama_lora_sigmoid_norm", "neox_full_sigmoid",
                                 "neox_lora_sigmoid"})
    expect_follows_trl(tmp.path, name);
}

TEST_CASE("preference: SimPO (with and without CPO's cross-entropy) follows TRL's CPOTrainer and ORPO its "
          "ORPOTrainer, full and LoRA, on Llama and GPT-NeoX: every logged metric within 1e-5, the trained weights "
          "within 1e-4 of each tensor's scale") {
  ft::testing::TempDir tmp("ft_simpo_orpo_trl");
  for (const std::string name : {"llama_full_simpo", "llama_lora_simpo", "llama_lora_cpo_simpo", "neox_lora_simpo",
                                 "llama_full_orpo", "llama_lora_orpo", "neox_full_orpo", "neox_lora_orpo"})
    expect_follows_trl(tmp.path, name);
}

const char* const metric_names[] = {"loss",           "rewards/chosen", "rewards/rejected", "rewards/accuracies",
                                    "rewards/margins", "logps/chosen",  "logps/rejected",   "logits/chosen",
                                    "logits/rejected"};

TEST_CASE("preference: a DPO run killed after a checkpoint resumes bit for bit, the reference read from the "
          "checkpoint") {
  ft::testing::TempDir tmp("ft_dpo_resume");
  const nlohmann::json trl = io::read_json_file(fixtures / "dpo/llama_lora_sigmoid/trl.json");
  const Run whole = ftrun(tmp.path / "whole", "train " + dpo_recipe(tmp.path / "whole", trl,
                                                                    "[checkpoint]\nsave_steps = 5\n").string());
  INFO(whole.err);
  REQUIRE(whole.code == 0);
  const fs::path killed = dpo_recipe(tmp.path / "killed", trl, "[checkpoint]\nsave_steps = 5\nresume = \"auto\"\n");
  // The first part: the same run stopped after its first step, with a checkpoint of it.
  std::string first = ft::testing::read_bytes(killed);
  first.replace(first.find("max_steps = "), std::string("max_steps = 12").size(), "max_steps = 12\nstop_after_seconds = 0");
  std::ofstream(tmp.path / "killed/first.toml") << first;
  REQUIRE(ftrun(tmp.path / "killed", "train " + (tmp.path / "killed/first.toml").string()).code == 0);
  REQUIRE(fs::exists(tmp.path / "killed/run/checkpoint-1/reference_logps.json"));
  const Run resumed = ftrun(tmp.path / "killed", "train " + killed.string());
  INFO(resumed.err);
  REQUIRE(resumed.code == 0);
  const auto a = records(tmp.path / "whole/run", "train"), b = records(tmp.path / "killed/run", "train");
  REQUIRE(a.size() == 12);
  REQUIRE(b.size() == 12);
  for (std::size_t i = 0; i < a.size(); ++i)
    for (const char* metric : metric_names) {
      CAPTURE(i);
      CAPTURE(metric);
      CHECK(a[i][metric].get<double>() == b[i][metric].get<double>());
    }
  CHECK(ft::testing::read_bytes(tmp.path / "whole/run/adapter/adapter_model.safetensors") ==
        ft::testing::read_bytes(tmp.path / "killed/run/adapter/adapter_model.safetensors"));
}

TEST_CASE("preference: bad preference input is one line naming the row or key, exit 2") {
  ft::testing::TempDir tmp("ft_dpo_bad");
  struct Case {
    std::string rows, extra, expected, fixture = "llama_lora_sigmoid";  // the fixture's objective: dpo
  };
  const std::string long_prompt(400, 'x');
  const Case cases[] = {
      {R"({"prompt": "a", "chosen": "b"})", "", "\"rejected\" is missing"},
      {R"({"prompt": "a", "chosen": "", "rejected": "c"})", "", "\"chosen\" is empty"},
      {"{\"prompt\": \"" + long_prompt + "\", \"chosen\": \"b\", \"rejected\": \"c\"}", "",
       "leaves no room for a completion within max_seq_length"},
      {R"({"prompt": "a", "chosen": "b", "rejected": "c"})", "format = \"alpaca\"\n", "data.format = \"preference\""},
      // ORPO tokenises as TRL's ORPOTrainer, with checks of its own.
      {"{\"prompt\": \"" + long_prompt + "\", \"chosen\": \"b\", \"rejected\": \"c\"}", "",
       "leaves no room for a completion within max_seq_length", "llama_lora_orpo"},
      {R"({"prompt": "a", "chosen": "b", "rejected": "c"})", "format = \"alpaca\"\n",
       "train.objective = \"orpo\" trains on preference pairs", "llama_lora_orpo"},
  };
  int i = 0;
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    const fs::path dir = tmp.path / std::to_string(i++);
    const nlohmann::json trl = io::read_json_file(fixtures / "dpo" / c.fixture / "trl.json");
    std::string recipe = ft::testing::read_bytes(dpo_recipe(dir, trl));
    fs::create_directories(dir);
    std::ofstream(dir / "rows.jsonl") << c.rows << "\n" << c.rows << "\n" << c.rows << "\n" << c.rows << "\n"
                                      << c.rows << "\n" << c.rows << "\n";
    recipe.replace(recipe.find((fixtures / "dpo/pairs.jsonl").string()), (fixtures / "dpo/pairs.jsonl").string().size(),
                   (dir / "rows.jsonl").string());
    if (!c.extra.empty()) recipe.replace(recipe.find("format = \"preference\"\n"), 22, c.extra);
    std::ofstream(dir / "recipe.toml") << recipe;
    const Run r = ftrun(dir, "train " + (dir / "recipe.toml").string());
    CHECK(r.code == 2);
    CHECK(r.err.find(c.expected) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    INFO(r.err);
  }
}

}  // namespace test_preference

namespace test_preference {

// 10 DPO steps on the tiny Llama over pairs.jsonl, validated on the same
// pairs; `strategy` and `train` lines added, `nproc` ranks.
fs::path parallel_recipe(const fs::path& dir, const std::string& strategy, const std::string& train, int nproc,
                         double learning_rate = 2e-3, const std::string& objective = "dpo") {
  fs::create_directories(dir);
  std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\nseed = 5\n"
                                     << "[model]\npath = \"" << (fixtures / "train/tiny_llama").string() << "\"\n"
                                     << "[strategy]\n" << strategy << "[data]\ntrain = \""
                                     << (fixtures / "dpo/pairs.jsonl").string() << "\"\nvalidation = \""
                                     << (fixtures / "dpo/pairs.jsonl").string() << "\"\nformat = \"preference\"\n"
                                     << "max_seq_length = 64\n[train]\nobjective = \"" << objective << "\"\nmax_steps = 10\n"
                                     << "learning_rate = " << learning_rate << "\nlogging_steps = 1\n" << train
                                     << "[launch]\nnproc = " << nproc << "\n";
  return dir / "recipe.toml";
}

Run train_ranks(const fs::path& recipe) {
  return ftrun(recipe.parent_path(), "train " + recipe.string());
}

// Every logged training metric of every step, and the final validation's, of
// `b` within 1e-5 of `a`'s (relative to values above 1); every weight within 1e-5.
void expect_same_dpo(const fs::path& a, const fs::path& b, const std::string& weights,
                     const std::vector<std::string>& more_metrics = {}) {
  for (const char* split : {"train", "eval"}) {
    CAPTURE(split);
    const auto x = records(a.parent_path() / "run", split), y = records(b.parent_path() / "run", split);
    REQUIRE(x.size() == y.size());
    REQUIRE(!x.empty());
    std::vector<std::string> metrics(std::begin(metric_names), std::end(metric_names));
    metrics.insert(metrics.end(), more_metrics.begin(), more_metrics.end());
    for (std::size_t i = 0; i < x.size(); ++i)
      for (const std::string& metric : metrics) {
        CAPTURE(i);
        CAPTURE(metric);
        const double a = x[i][metric].get<double>(), b = y[i][metric].get<double>();
        // A pair of the step's four whose margin is within rounding of zero may count either way.
        if (metric == "rewards/accuracies") CHECK(std::abs(a - b) <= 0.25 + 1e-9);
        else CHECK(std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(a)));
      }
  }
  auto fa = io::SafetensorsFile::open(a.parent_path() / "run" / weights),
       fb = io::SafetensorsFile::open(b.parent_path() / "run" / weights);
  REQUIRE(fa.tensors().size() == fb.tensors().size());
  for (const io::TensorView& t : fa.tensors()) {
    CAPTURE(t.name);
    const auto x = ft::testing::read_tensor<double>(fa, t.name), y = ft::testing::read_tensor<double>(fb, t.name);
    REQUIRE(x.size() == y.size());
    double d = 0;
    for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
    CHECK(d < 1e-5);
  }
}

TEST_CASE("preference: DPO under zero3 on 2 ranks and under a 1F1B pipeline on 2 ranks trains what one process "
          "trains: every metric and weight within 1e-5") {
  ft::testing::TempDir tmp("ft_dpo_parallel");
  // mpirun refuses root unless told; CI machines run as root.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  for (const std::string adapter : {"lora", "full"}) {
    CAPTURE(adapter);
    const std::string weights = adapter == "lora" ? "adapter/adapter_model.safetensors" : "model/model.safetensors";
    const std::string a = "adapter = \"" + adapter + "\"\n";
    // AdamW moves every weight by about the rate whatever its gradient, so
    // the summation order of the ranks' gradients shows at a full
    // fine-tune's rate of LoRA's (2e-5 apart at 2e-3); a full fine-tune's own is lower.
    const double rate = adapter == "lora" ? 2e-3 : 2e-4;
    const fs::path single =
        parallel_recipe(tmp.path / adapter / "single", a, "per_device_train_batch_size = 4\n", 1, rate);
    REQUIRE(train_ranks(single).code == 0);
    const fs::path zero3 = parallel_recipe(tmp.path / adapter / "zero3", a + "parallelism = \"zero3\"\n",
                                           "per_device_train_batch_size = 2\n", 2, rate);
    const Run z = train_ranks(zero3);
    INFO(z.err);
    REQUIRE(z.code == 0);
    expect_same_dpo(single, zero3, weights);
  }
  // A pipeline's ranks share each micro-batch: 2 micro-batches of 2 pairs a
  // step, as one process accumulating 2 micro-batches of 2.
  const std::string lora = "adapter = \"lora\"\n";
  const fs::path accumulated = parallel_recipe(tmp.path / "accumulated", lora,
                                               "per_device_train_batch_size = 2\ngradient_accumulation_steps = 2\n", 1);
  REQUIRE(train_ranks(accumulated).code == 0);
  const fs::path pipe = parallel_recipe(tmp.path / "pipeline", lora + "parallelism = \"pipeline\"\n",
                                        "per_device_train_batch_size = 2\ngradient_accumulation_steps = 2\n"
                                        "[pipeline]\nschedule = \"1f1b\"\n",
                                        2);
  const Run p = train_ranks(pipe);
  INFO(p.err);
  REQUIRE(p.code == 0);
  expect_same_dpo(accumulated, pipe, "adapter/adapter_model.safetensors");
}

TEST_CASE("preference: ORPO and SimPO with CPO's cross-entropy under ddp on 2 ranks train what one process trains: "
          "every metric and weight within 1e-5") {
  ft::testing::TempDir tmp("ft_orpo_parallel");
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  for (const std::string objective : {"orpo", "simpo"}) {
    CAPTURE(objective);
    // The chosen sequences' cross-entropy is the mean over the step's tokens on both ranks together.
    const std::string train = objective == "simpo" ? "[preference]\nbeta = 2.0\ncpo_alpha = 1.0\n" : "";
    const std::string lora = "adapter = \"lora\"\n";
    const fs::path single = parallel_recipe(tmp.path / objective / "single", lora,
                                            "per_device_train_batch_size = 4\n" + train, 1, 2e-3, objective);
    const Run one = train_ranks(single);
    INFO(one.err);
    REQUIRE(one.code == 0);
    const fs::path ddp = parallel_recipe(tmp.path / objective / "ddp", lora + "parallelism = \"ddp\"\n",
                                         "per_device_train_batch_size = 2\n" + train, 2, 2e-3, objective);
    const Run two = train_ranks(ddp);
    INFO(two.err);
    REQUIRE(two.code == 0);
    std::vector<std::string> more = {"nll_loss"};
    if (objective == "orpo") more.insert(more.end(), {"log_odds_ratio", "log_odds_chosen"});
    expect_same_dpo(single, ddp, "adapter/adapter_model.safetensors", more);
  }
}

}  // namespace test_preference

namespace test_preference {

TEST_CASE("preference: ftrun estimate of a DPO run is within 5% of the peak each phase measures, full and LoRA") {
  ft::testing::TempDir tmp("ft_dpo_estimate");
  for (const std::string adapter : {"lora", "full"}) {
    CAPTURE(adapter);
    const fs::path dir = tmp.path / adapter;
    fs::create_directories(dir);
    // Every sequence is cut at max_seq_length, so every batch is as long as the estimate assumes.
    std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\n"
                                       << "[model]\npath = \"" << (fixtures / "train/tiny_llama").string() << "\"\n"
                                       << "[strategy]\nadapter = \"" << adapter << "\"\n[data]\ntrain = \""
                                       << (fixtures / "dpo/pairs.jsonl").string() << "\"\nvalidation = \""
                                       << (fixtures / "dpo/pairs.jsonl").string() << "\"\nformat = \"preference\"\n"
                                       << "max_seq_length = 32\n[train]\nobjective = \"dpo\"\nmax_steps = 2\n"
                                       << "per_device_train_batch_size = 2\nlogging_steps = 1\n";
    const Run e = ftrun(dir / "estimate", "estimate " + (dir / "recipe.toml").string() + " --json");
    INFO(e.err);
    REQUIRE(e.code == 0);
    const auto estimate = nlohmann::json::parse(e.out);
    const Run t = ftrun(dir / "train", "train " + (dir / "recipe.toml").string());
    INFO(t.err);
    REQUIRE(t.code == 0);
    std::map<std::string, double> measured;
    for (const char* split : {"setup", "train", "eval", "save"})
      for (const nlohmann::json& j : records(dir / "run", split))
        measured[split] = std::max(measured[split], j.at("peak_memory_bytes").get<double>());
    for (const auto& [split, key] : {std::pair{"setup", "setup_peak_bytes"}, std::pair{"train", "step_peak_bytes"},
                                     std::pair{"eval", "eval_peak_bytes"}, std::pair{"save", "save_peak_bytes"}}) {
      CAPTURE(split);
      const double want = estimate.at(key).get<double>();
      INFO("estimated " << want << ", measured " << measured[split]);
      CHECK(measured[split] > 0);
      CHECK(std::abs(measured[split] / want - 1) <= 0.05);
    }
  }
}

}  // namespace test_preference

namespace test_preference {

TEST_CASE("preference: DPO trains under every precision, with prompt tuning, over a 4-bit base and on the CPU "
          "standing in for a device: ln 2 at the first step, then the margin grows and the loss falls; so do SimPO "
          "and ORPO") {
  ft::testing::TempDir tmp("ft_dpo_everywhere");
  ::setenv("FT_PLUGIN_PATH", FT_TEST_PLUGIN_DIR, 1);
  struct Case {
    std::string name, strategy, extra, objective = "dpo";
  };
  const Case cases[] = {
      {"bf16_mixed", "adapter = \"lora\"\nprecision = \"bf16-mixed\"\n", ""},
      {"simpo_bf16_true", "adapter = \"full\"\nprecision = \"bf16-true\"\n", "[preference]\nbeta = 2.0\n", "simpo"},
      // ORPO scores the prompts too: behind virtual tokens, and in the targets a device uploads.
      {"orpo_prompt_tuning", "adapter = \"prompt\"\n",
       "learning_rate = 3e-2\n[prompt_tuning]\nnum_virtual_tokens = 4\n", "orpo"},
      {"orpo_device", "adapter = \"lora\"\ndevice = \"cpu-as-device\"\n", "", "orpo"},
      {"bf16_true", "adapter = \"full\"\nprecision = \"bf16-true\"\n", ""},
      {"fp16_mixed", "adapter = \"lora\"\nprecision = \"fp16-mixed\"\n", ""},
      {"prompt_tuning", "adapter = \"prompt\"\n", "learning_rate = 3e-2\n[prompt_tuning]\nnum_virtual_tokens = 4\n"},
      {"qlora", "adapter = \"lora\"\n", "[model]\nquantize = \"nf4\"\n"},
      {"device", "adapter = \"lora\"\ndevice = \"cpu-as-device\"\n", ""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const fs::path dir = tmp.path / c.name;
    fs::create_directories(dir);
    // [model] first when the case adds to it.
    const std::string model = "[model]\npath = \"" + (fixtures / "train/tiny_llama").string() + "\"\n" +
                              (c.extra.starts_with("[model]") ? c.extra.substr(8) : "");
    std::ofstream(dir / "recipe.toml") << "output_dir = \"" << (dir / "run").string() << "\"\n" << model
                                       << "[strategy]\n" << c.strategy << "[data]\ntrain = \""
                                       << (fixtures / "dpo/pairs.jsonl").string() << "\"\nformat = \"preference\"\n"
                                       << "max_seq_length = 64\n[train]\nobjective = \"" << c.objective
                                       << "\"\nmax_steps = 8\nper_device_train_batch_size = 6\nlogging_steps = 1\n"
                                       << (c.extra.find("learning_rate") == std::string::npos ? "learning_rate = 5e-3\n" : "")
                                       << (c.extra.starts_with("[model]") ? "" : c.extra);
    const Run r = ftrun(dir, "train " + (dir / "recipe.toml").string());
    INFO(r.err);
    REQUIRE(r.code == 0);
    const std::vector<nlohmann::json> got = records(dir / "run", "train");
    REQUIRE(got.size() == 8);
    // Every step sees all six pairs: the margin on them grows, the loss falls.
    if (c.objective == "dpo") {
      CHECK(got[0]["loss"].get<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-3));
      CHECK(got.back()["rewards/margins"].get<double>() > 0);
    } else {
      CHECK(got.back()["rewards/margins"].get<double>() > got[0]["rewards/margins"].get<double>());
    }
    CHECK(got.back()["loss"].get<double>() < got[0]["loss"].get<double>());
  }
}

}  // namespace test_preference

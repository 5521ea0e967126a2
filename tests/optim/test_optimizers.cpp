// Optimizer updates, learning-rate schedules and gradient clipping against
// their references (torch.optim, transformers' get_scheduler,
// clip_grad_norm_, Lion's paper), from tools/make_optimizer_fixtures.py.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <ft/optim/clip.hpp>
#include <ft/optim/schedule.hpp>
#include <ft/optim/update.hpp>

namespace test_optimizers {

using namespace ft;
using Vec = std::vector<double>;

namespace {
const nlohmann::json& reference() {
  static const nlohmann::json j = nlohmann::json::parse(
      std::ifstream(std::filesystem::path(FT_SOURCE_DIR) / "tests/fixtures/optim/reference.json"));
  return j;
}

optim::Hyperparameters hyperparameters(const nlohmann::json& h) {
  optim::Hyperparameters out;
  out.lr = h.at("lr");
  out.weight_decay = h.value("weight_decay", 0.0);
  out.beta1 = h.value("beta1", 0.9);
  out.beta2 = h.value("beta2", 0.999);
  out.eps = h.value("eps", 1e-8);
  out.momentum = h.value("momentum", 0.0);
  out.dampening = h.value("dampening", 0.0);
  out.nesterov = h.value("nesterov", false);
  return out;
}

double max_difference(const Vec& a, const Vec& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}
}  // namespace

TEST_CASE("SGD, AdamW and Lion follow their references step by step, in double and in float") {
  const auto& ref = reference();
  const Vec initial = ref["initial"];
  for (const auto& [name, c] : ref["optimizers"].items()) {
    CAPTURE(name);
    const optim::Hyperparameters h = hyperparameters(c["hyper"]);
    Vec p = initial, s1(p.size()), s2(p.size());
    std::vector<float> pf(initial.begin(), initial.end()), f1(p.size()), f2(p.size());
    for (std::size_t step = 1; step <= ref["grads"].size(); ++step) {
      const Vec g = ref["grads"][step - 1];
      const std::vector<float> gf(g.begin(), g.end());
      const index_t n = index_t(p.size());
      if (name.rfind("sgd", 0) == 0) {
        optim::sgd_step(p.data(), g.data(), s1.data(), n, h, std::int64_t(step));
        optim::sgd_step(pf.data(), gf.data(), f1.data(), n, h, std::int64_t(step));
      } else if (name == "adamw") {
        optim::adamw_step(p.data(), g.data(), s1.data(), s2.data(), n, h, std::int64_t(step));
        optim::adamw_step(pf.data(), gf.data(), f1.data(), f2.data(), n, h, std::int64_t(step));
      } else {
        optim::lion_step(p.data(), g.data(), s1.data(), n, h);
        optim::lion_step(pf.data(), gf.data(), f1.data(), n, h);
      }
      const Vec want = c["trajectory"][step - 1];
      CAPTURE(step);
      CHECK(max_difference(p, want) < 1e-12);
      CHECK(max_difference(Vec(pf.begin(), pf.end()), want) < 1e-5);
    }
  }
}

TEST_CASE("learning-rate schedules give transformers' rates at every step") {
  for (const auto& s : reference()["schedules"]) {
    optim::Schedule schedule{optim::schedule_from_name(s["kind"]), s["lr"], s["warmup"], s["total"]};
    CAPTURE(s["kind"].get<std::string>());
    for (std::size_t step = 0; step < s["rates"].size(); ++step) {
      CAPTURE(step);
      CHECK(schedule.rate(std::int64_t(step)) == doctest::Approx(s["rates"][step].get<double>()).epsilon(1e-12));
    }
  }
  CHECK(optim::warmup_steps(0, 0.1, 95) == 10);  // a ratio rounds up
  CHECK(optim::warmup_steps(7, 0.1, 95) == 7);   // steps win over a ratio
  CHECK_THROWS_WITH_AS(optim::schedule_from_name("polynomial"),
                       "lr_scheduler_type \"polynomial\" is not supported; allowed: constant, "
                       "constant_with_warmup, linear, cosine",
                       Error);
}

TEST_CASE("global-norm clipping scales every buffer together, as clip_grad_norm_") {
  for (const auto& c : reference()["clip"]) {
    std::vector<Vec> grads;
    for (std::size_t i = 0; i < 3; ++i) grads.push_back(reference()["grads"][i].get<Vec>());
    std::vector<optim::GradientBuffer<double>> buffers;
    for (Vec& g : grads) buffers.push_back({g.data(), index_t(g.size())});
    double norm = optim::clip_grad_norm(std::span<const optim::GradientBuffer<double>>(buffers), c["max_norm"]);
    CHECK(norm == doctest::Approx(c["norm"].get<double>()).epsilon(1e-12));
    for (std::size_t i = 0; i < 3; ++i) CHECK(max_difference(grads[i], c["clipped"][i].get<Vec>()) < 1e-12);
  }
}

}  // namespace test_optimizers

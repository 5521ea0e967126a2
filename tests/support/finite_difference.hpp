#pragma once
// Gradient checks by central finite differences, in double precision.
//
// A kernel's backward is checked through a scalar probe: loss = sum(out * w)
// with fixed random weights w, so d loss / d out = w is what backward gets.
// For every input (or a random sample of its elements when it is large) the
// analytic gradient must match (loss(x + eps) - loss(x - eps)) / (2 eps).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace ft::testing {

inline std::vector<double> random_vector(std::size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct GradientCheck {
  double eps = 1e-6;
  double tolerance = 1e-6;      // on |analytic - numeric| / max(1, |numeric|)
  std::size_t max_samples = 400;  // elements checked per input
};

// `x` is perturbed in place and restored; `loss` recomputes the probe.
inline void expect_gradient(const char* name, std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss, const GradientCheck& check = {}) {
  REQUIRE(x.size() == analytic.size());
  std::vector<std::size_t> indices(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) indices[i] = i;
  if (indices.size() > check.max_samples) {
    std::mt19937 rng(1234);
    std::shuffle(indices.begin(), indices.end(), rng);
    indices.resize(check.max_samples);
  }
  double worst = 0;
  std::size_t worst_index = 0;
  for (std::size_t i : indices) {
    double saved = x[i];
    x[i] = saved + check.eps;
    double up = loss();
    x[i] = saved - check.eps;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2 * check.eps);
    double error = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    if (error > worst) worst = error, worst_index = i;
  }
  INFO("gradient of " << std::string(name) << ": worst relative error " << worst << " at element " << worst_index);
  CHECK(worst <= check.tolerance);
}

}  // namespace ft::testing

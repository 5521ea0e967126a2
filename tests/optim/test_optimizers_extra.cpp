// Adafactor against transformers' own optimizer, and 8-bit AdamW against an
// independent numpy model of its scheme, both from
// tools/make_optimizer_fixtures.py; then the 8-bit map's round trip, the 8-bit
// trajectory next to f32 AdamW's, and the f32 path of small tensors.
#include <doctest/doctest.h>

#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include <ft/optim/adafactor.hpp>
#include <ft/optim/adamw4bit.hpp>
#include <ft/optim/adamw8bit.hpp>

namespace test_optimizers_extra {

using namespace ft;
using Vec = std::vector<double>;

namespace {
nlohmann::json load(const char* name) {
  return nlohmann::json::parse(std::ifstream(std::filesystem::path(FT_SOURCE_DIR) / "tests/fixtures/optim" / name));
}

// Little-endian bytes written by numpy's tobytes().hex().
template <class X>
std::vector<X> from_hex(const std::string& hex) {
  std::vector<unsigned char> bytes(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)std::stoi(hex.substr(2 * i, 2), nullptr, 16);
  std::vector<X> out(bytes.size() / sizeof(X));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <class A, class B>
bool same_bits(const A& a, const B& b) {
  using X = typename A::value_type;
  static_assert(std::is_same_v<X, typename B::value_type>);
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(X)) == 0;
}

double max_abs(const Vec& a) {
  double worst = 0;
  for (double x : a) worst = std::max(worst, std::abs(x));
  return worst;
}

template <class X>
double max_difference(const std::vector<X>& a, const Vec& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

optim::AdafactorOptions adafactor_options(const nlohmann::json& j) {
  optim::AdafactorOptions o;
  if (j.contains("lr") && !j["lr"].is_null()) o.lr = j["lr"].get<double>();
  if (j.contains("beta1") && !j["beta1"].is_null()) o.beta1 = j["beta1"].get<double>();
  o.clip_threshold = j.value("clip_threshold", 1.0);
  o.decay_rate = j.value("decay_rate", -0.8);
  o.weight_decay = j.value("weight_decay", 0.0);
  o.scale_parameter = j.value("scale_parameter", true);
  o.relative_step = j.value("relative_step", true);
  o.warmup_init = j.value("warmup_init", false);
  return o;
}

Shape shape_of(const nlohmann::json& dims) {
  Shape s;
  for (index_t d : dims.get<std::vector<index_t>>()) s[s.rank++] = d;
  return s;
}

// The inputs of the 8-bit fixture, computed exactly as the generator does.
std::vector<float> hashed_values(std::uint64_t salt, index_t n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    std::uint64_t z = (salt << 32) | std::uint64_t(i);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float fraction = float(z >> 40) / 16777216.0f - 0.5f;
    const int exponent = int((z >> 8) & 7) + 3 * int((i / optim::adamw8bit_block) % 5);
    out[std::size_t(i)] = std::ldexp(fraction, -exponent);
  }
  return out;
}
}  // namespace

TEST_CASE("Adafactor follows transformers' Adafactor step by step, factored and not, in double and in float") {
  const nlohmann::json ref = load("adafactor.json");
  for (const auto& [case_name, c] : ref["cases"].items()) {
    const optim::AdafactorOptions o = adafactor_options(c["options"]);
    for (const auto& [name, t] : ref["tensors"].items()) {
      CAPTURE(case_name);
      CAPTURE(name);
      const Shape shape = shape_of(t["shape"]);
      const Vec initial = t["initial"];
      Vec p = initial;
      std::vector<float> pf(initial.begin(), initial.end());
      auto s = optim::adafactor_state<double>(shape, o);
      auto sf = optim::adafactor_state<float>(shape, o);
      for (std::size_t step = 1; step <= t["grads"].size(); ++step) {
        CAPTURE(step);
        const Vec g = t["grads"][step - 1];
        const std::vector<float> gf(g.begin(), g.end());
        optim::adafactor_step(p.data(), g.data(), shape, s, o, std::int64_t(step));
        optim::adafactor_step(pf.data(), gf.data(), shape, sf, o, std::int64_t(step));
        const Vec want = c["trajectories"][name][step - 1];
        // The parameters to 1e-12 of their size, and the distance they moved to 1e-12 of it (the
        // relative-step cases move by about 1e-6 a step, too little for the first check to see).
        // Measured: 5.5e-17 and 7.0e-15; in float 1.4e-7.
        CHECK(max_difference(p, want) <= 1e-12 * max_abs(want));
        Vec moved(p.size()), want_moved(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) {
          moved[i] = p[i] - initial[i];
          want_moved[i] = want[i] - initial[i];
        }
        CHECK(max_difference(moved, want_moved) <= 1e-12 * max_abs(want_moved));
        CHECK(max_difference(pf, want) <= 1e-6 * max_abs(want));
      }
      CHECK(s.momentum.size() == (o.beta1 ? p.size() : 0));  // momentum-free keeps no first moment
    }
  }
}

TEST_CASE("Adafactor keeps R + C numbers for a matrix and gives the same bits with any thread count") {
  optim::AdafactorOptions o;  // relative step, scaled by the parameter's RMS
  const auto s = optim::adafactor_state<float>(Shape{300, 70}, o);
  CHECK(s.row.size() == 300);
  CHECK(s.col.size() == 70);
  CHECK(s.full.empty());
  CHECK(s.momentum.empty());

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const int threads = omp_get_max_threads();
  for (const Shape& shape : {Shape{300, 70}, Shape{10000}, Shape{3, 40, 33}}) {
    CAPTURE(shape.str());
    o.clip_threshold = 0.7;  // and clipping on
    std::vector<float> p0(std::size_t(shape.numel())), g(p0.size());
    for (float& x : p0) x = normal(rng);
    for (float& x : g) x = normal(rng);
    std::vector<std::vector<float>> results;
    std::vector<optim::AdafactorState<float>> states;
    for (int n : {1, 3}) {
      omp_set_num_threads(n);
      std::vector<float> p = p0;
      auto state = optim::adafactor_state<float>(shape, o);
      for (std::int64_t step = 1; step <= 3; ++step) optim::adafactor_step(p.data(), g.data(), shape, state, o, step);
      results.push_back(p);
      states.push_back(std::move(state));
    }
    omp_set_num_threads(threads);
    CHECK(same_bits(results[0], results[1]));
    CHECK(same_bits(states[0].row, states[1].row));
    CHECK(same_bits(states[0].col, states[1].col));
    CHECK(same_bits(states[0].full, states[1].full));
    CHECK(results[0] != p0);
  }
}

TEST_CASE("Adafactor refuses options transformers refuses, and state of another shape") {
  optim::AdafactorOptions o;
  o.lr = 1e-3;
  CHECK_THROWS_WITH_AS(optim::adafactor_state<float>(Shape{4}, o),
                       "adafactor: lr cannot be combined with relative_step = true; unset lr or set "
                       "relative_step = false",
                       Error);
  o.relative_step = false;
  o.warmup_init = true;
  CHECK_THROWS_WITH_AS(optim::adafactor_state<float>(Shape{4}, o),
                       "adafactor: warmup_init = true requires relative_step = true", Error);
  o = {};
  o.relative_step = false;
  CHECK_THROWS_WITH_AS(optim::adafactor_state<float>(Shape{4}, o), "adafactor: relative_step = false needs an lr",
                       Error);
  o = {};
  auto s = optim::adafactor_state<float>(Shape{4, 5}, o);
  std::vector<float> p(20), g(20);
  CHECK_THROWS_WITH_AS(optim::adafactor_step(p.data(), g.data(), Shape{5, 4}, s, o, 1),
                       "adafactor: the state does not fit a parameter of shape [5, 4] with these options", Error);
}

TEST_CASE("the dynamic maps are the generator's, and encoding picks the nearest value within the stated bound") {
  const nlohmann::json ref = load("adamw8bit.json");
  const auto& sm = optim::signed_dynamic_map();
  const auto& um = optim::unsigned_dynamic_map();
  CHECK(same_bits(std::vector<float>(sm.value.begin(), sm.value.end()), from_hex<float>(ref["signed_map"])));
  CHECK(same_bits(std::vector<float>(um.value.begin(), um.value.end()), from_hex<float>(ref["unsigned_map"])));
  CHECK(sm.value[127] == 1.0f);
  CHECK(sm.value[255] == -1.0f);
  CHECK(um.value[255] == 1.0f);
  CHECK(sm.value[1] == doctest::Approx(1e-6).epsilon(1e-6));
  CHECK(um.value[1] == doctest::Approx(1e-7).epsilon(1e-6));

  for (const optim::DynamicMap* map : {&sm, &um}) {
    const int codes = 1 << map->magnitude_bits;
    for (int c = 1; c < codes; ++c) CHECK(map->value[std::size_t(c)] > map->value[std::size_t(c - 1)]);
    // Half the gap between neighbours in the decade of |x|, 10^-E 0.45 / 2^f with f = bits - 1 - E.
    const auto bound = [&](double a) {
      if (a <= map->value[1]) return a;
      const int decade = std::min(map->magnitude_bits - 1, int(std::floor(-std::log10(a) + 1e-12)));
      return std::pow(10.0, -decade) * 0.45 / double(1 << (map->magnitude_bits - 1 - decade));
    };
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(map->is_signed ? -1.0f : 0.0f, 1.0f);
    std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
    double worst = 0, worst_relative = 0;
    for (int i = 0; i < 200000; ++i) {
      float x = i % 2 ? uniform(rng) : std::pow(10.0f, exponent(rng));
      if (map->is_signed && i % 4 == 1) x = -x;
      const std::uint8_t code = map->encode(x);
      const double error = std::abs(double(map->decode(code)) - double(x));
      double nearest = 1e9;
      for (float value : map->value) nearest = std::min(nearest, std::abs(double(value) - double(x)));
      if (error > nearest || error > bound(std::abs(double(x))) * (1 + 1e-6)) {
        CAPTURE(x);
        CAPTURE(int(code));
        CHECK(error <= nearest);
        CHECK(error <= bound(std::abs(double(x))) * (1 + 1e-6));
      }
      worst = std::max(worst, error);
      if (std::abs(x) > 0.1) worst_relative = std::max(worst_relative, error / std::abs(double(x)));
    }
    // Over [-1, 1] the largest error is half the gap of the top decade, 0.45 / 64 (signed) or 0.45 / 128;
    // relative to |x| > 0.1 it is at most ten times that (4.5 / 2^f in decade E, f = bits - 1 - E).
    const double top_gap = 0.45 / double(1 << (map->magnitude_bits - 1));
    CHECK(worst <= top_gap * (1 + 1e-6));
    CHECK(worst > 0.9 * top_gap);
    CHECK(worst_relative <= 10 * top_gap * (1 + 1e-6));
  }
  CHECK(sm.encode(0.0f) == 0);
  CHECK(sm.encode(-0.0f) == 0);
  CHECK(sm.encode(-1.0f) == 0xFF);
  CHECK(sm.encode(-1e-9f) == 0);  // below half the smallest value: zero, never the code of -0
  CHECK(um.encode(1.0f) == 0xFF);
}

TEST_CASE("an 8-bit code's magnitude is the count of the map's midpoints below |x|, at every midpoint and between") {
  for (const optim::DynamicMap* map : {&optim::signed_dynamic_map(), &optim::unsigned_dynamic_map()}) {
    const int codes = 1 << map->magnitude_bits;
    const auto below = [&](double a) {  // midpoint[c - 1] < a <= midpoint[c] names magnitude c
      int count = 0;
      for (int c = 0; c + 1 < codes; ++c) count += map->midpoint[std::size_t(c)] < a;
      return count;
    };
    std::vector<double> xs = {0.0, 1.0, 1.5, 1e-12, std::numeric_limits<double>::infinity()};
    for (int c = 0; c < codes; ++c) {
      const double v = map->value[std::size_t(c)];
      xs.insert(xs.end(), {v, std::nextafter(v, 0.0), std::nextafter(v, 2.0)});
      if (c + 1 < codes) {
        const double m = map->midpoint[std::size_t(c)];
        xs.insert(xs.end(), {m, std::nextafter(m, 0.0), std::nextafter(m, 2.0)});
      }
    }
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> exponent(-10.0, 0.2);
    for (int i = 0; i < 100000; ++i) xs.push_back(std::pow(10.0, exponent(rng)));
    int wrong = 0;
    for (double a : xs) {
      const int magnitude = map->encode(a) & (map->is_signed ? 0x7F : 0xFF);
      if (magnitude != below(a) && ++wrong <= 5) {
        CAPTURE(a);
        CHECK(magnitude == below(a));
      }
      if (map->is_signed && a > 0) {
        const std::uint8_t negative = map->encode(-a);
        CHECK(negative == (below(a) == 0 ? 0 : (0x80 | below(a))));
      }
    }
    CHECK(wrong == 0);
    CHECK(map->encode(std::numeric_limits<double>::quiet_NaN()) == 0);
  }
}

TEST_CASE("8-bit AdamW gives the numpy model's codes, scales and parameters bit for bit") {
  const nlohmann::json ref = load("adamw8bit.json");
  const index_t n = ref["n"];
  const auto& hyper = ref["hyper"];
  optim::Hyperparameters h;
  h.lr = hyper["lr"];
  h.weight_decay = hyper["weight_decay"];
  h.beta1 = hyper["beta1"];
  h.beta2 = hyper["beta2"];
  h.eps = hyper["eps"];
  std::vector<float> p = hashed_values(0, n);
  REQUIRE(same_bits(std::vector<float>(p.begin(), p.begin() + optim::adamw8bit_block),
                    from_hex<float>(ref["initial_head"])));
  const std::vector<float> g1 = hashed_values(1, n);
  REQUIRE(same_bits(std::vector<float>(g1.begin(), g1.begin() + optim::adamw8bit_block),
                    from_hex<float>(ref["grad_head"])));
  auto s = optim::adamw8bit_state(n);
  REQUIRE(s.quantized());
  CHECK(s.m_absmax.size() == std::size_t((n + 255) / 256));
  for (std::size_t step = 1; step <= ref["states"].size(); ++step) {
    CAPTURE(step);
    const std::vector<float> g = hashed_values(step, n);
    optim::adamw8bit_step(p.data(), g.data(), n, s, h, std::int64_t(step));
    const auto& want = ref["states"][step - 1];
    CHECK(same_bits(s.m_q, from_hex<std::uint8_t>(want["m_q"])));
    CHECK(same_bits(s.v_q, from_hex<std::uint8_t>(want["v_q"])));
    const std::vector<double> m_absmax = want["m_absmax"], v_absmax = want["v_absmax"];
    CHECK(same_bits(s.m_absmax, std::vector<float>(m_absmax.begin(), m_absmax.end())));
    CHECK(same_bits(s.v_absmax, std::vector<float>(v_absmax.begin(), v_absmax.end())));
  }
  CHECK(same_bits(p, from_hex<float>(ref["final"])));
}

namespace {
struct QuadraticRun {
  double worst_parameter = 0;  // the largest |p8 - p32| over all steps
  double worst_loss = 0;       // the largest |loss8 - loss32| over all steps, relative to the first loss
  double first_loss = 0, last_loss = 0;  // f32 AdamW's
};

// 200 steps of f32 and 8-bit AdamW on loss = mean_i a_i (p_i - c_i)^2 / 2 over 10000 parameters
// (40 blocks, the last partial), lr 1e-2. Curvatures a are 10^U(-2, 1): per block, varying by
// 10^U(-0.3, 0.3) inside it as gradients of neighbouring weights do (`mixed` false), or per element.
QuadraticRun quadratic_run(bool mixed) {
  const index_t n = 10000;
  const auto size = static_cast<std::size_t>(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> decade(-2.0f, 1.0f), spread(-0.3f, 0.3f);
  std::vector<float> block_curvature(size / 256 + 1), a(size), c(size), p0(size);
  for (float& x : block_curvature) x = std::pow(10.0f, decade(rng));
  for (std::size_t i = 0; i < size; ++i) {
    a[i] = mixed ? std::pow(10.0f, decade(rng)) : block_curvature[i / 256] * std::pow(10.0f, spread(rng));
    c[i] = normal(rng);
    p0[i] = normal(rng);
  }
  const auto loss = [&](const std::vector<float>& p) {
    double sum = 0;
    for (std::size_t i = 0; i < size; ++i) sum += 0.5 * a[i] * double(p[i] - c[i]) * double(p[i] - c[i]);
    return sum / double(size);
  };
  optim::Hyperparameters h;
  h.lr = 1e-2;
  h.weight_decay = 0.01;
  std::vector<float> p32 = p0, p8 = p0, m(size), v(size), g32(size), g8(size);
  auto s = optim::adamw8bit_state(n);
  QuadraticRun r;
  r.first_loss = loss(p0);
  for (std::int64_t step = 1; step <= 200; ++step) {
    for (std::size_t i = 0; i < size; ++i) {
      g32[i] = a[i] * (p32[i] - c[i]);
      g8[i] = a[i] * (p8[i] - c[i]);
    }
    optim::adamw_step(p32.data(), g32.data(), m.data(), v.data(), n, h, step);
    optim::adamw8bit_step(p8.data(), g8.data(), n, s, h, step);
    for (std::size_t i = 0; i < size; ++i)
      r.worst_parameter = std::max(r.worst_parameter, double(std::abs(p8[i] - p32[i])));
    r.worst_loss = std::max(r.worst_loss, std::abs(loss(p8) - loss(p32)) / r.first_loss);
  }
  r.last_loss = loss(p32);
  return r;
}
}  // namespace

TEST_CASE("over 200 steps on random quadratics, 8-bit AdamW stays close to f32 AdamW") {
  // Measured: the largest parameter difference is 0.197 (each step moves a parameter by about 0.01 of
  // its O(1) distance), the losses differ by at most 0.90% of the first, while f32 AdamW takes the
  // loss down to 11% of it.
  const QuadraticRun smooth = quadratic_run(false);
  CHECK(smooth.last_loss < 0.15 * smooth.first_loss);
  CHECK(smooth.worst_parameter < 0.3);
  CHECK(smooth.worst_loss < 0.015);
  // Measured: 1.20 and 0.58%. The parameters that drift are those of the smallest curvatures, which
  // the loss hardly sees. With a positive v allowed to round to zero they moved by up to 629.
  const QuadraticRun mixed = quadratic_run(true);
  CHECK(mixed.last_loss < 0.15 * mixed.first_loss);
  CHECK(mixed.worst_parameter < 2.0);
  CHECK(mixed.worst_loss < 0.01);
}

TEST_CASE("tensors under 4096 elements keep f32 moments and step exactly as AdamW") {
  optim::Hyperparameters h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (index_t n : {index_t(1), index_t(1000), optim::adamw8bit_min_size - 1}) {
    CAPTURE(n);
    std::vector<float> p(static_cast<std::size_t>(n)), m(p.size()), v(p.size()), g(p.size());
    for (float& x : p) x = normal(rng);
    std::vector<float> p8 = p;
    auto s = optim::adamw8bit_state(n);
    CHECK(!s.quantized());
    for (std::int64_t step = 1; step <= 5; ++step) {
      for (float& x : g) x = normal(rng);
      optim::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h, step);
      optim::adamw8bit_step(p8.data(), g.data(), n, s, h, step);
    }
    CHECK(same_bits(p8, p));
    CHECK(same_bits(s.m, m));
    CHECK(same_bits(s.v, v));
  }
  CHECK(optim::adamw8bit_state(optim::adamw8bit_min_size).quantized());
  auto s = optim::adamw8bit_state(100);
  std::vector<float> p(5000), g(5000);
  CHECK_THROWS_WITH_AS(optim::adamw8bit_step(p.data(), g.data(), 5000, s, h, 1),
                       "adamw8bit: the optimizer state does not fit a parameter of 5000 elements; make it with "
                       "adamw8bit_state(5000)",
                       Error);
}


namespace {
// torchao's gradient of the fixture's case `c` at `step` (tools/make_adamw4bit_fixtures.py).
std::vector<float> four_bit_gradient(int c, int step, index_t n) {
  std::vector<float> g = hashed_values(std::uint64_t(1000 * c + step), n);
  for (index_t i = 0; i < n; ++i) g[std::size_t(i)] = i >= 256 && i < 384 ? 0.0f : g[std::size_t(i)] * (0.5f + float(step));
  return g;
}

// The state ft keeps against torchao's record of it.
template <class S>
void check_four_bit_state(const optim::QuantizedMoments<S>& s, const nlohmann::json& want) {
  if (want.contains("exp_avg_codes")) {
    REQUIRE(s.quantized());
    CHECK(same_bits(s.m_q, from_hex<std::uint8_t>(want["exp_avg_codes"])));
    CHECK(same_bits(s.v_q, from_hex<std::uint8_t>(want["exp_avg_sq_codes"])));
    CHECK(same_bits(s.m_absmax, from_hex<float>(want["exp_avg_scale"])));
    CHECK(same_bits(s.v_absmax, from_hex<float>(want["exp_avg_sq_scale"])));
  } else {
    REQUIRE_FALSE(s.quantized());
    CHECK(same_bits(s.m, from_hex<S>(want["exp_avg"])));
    CHECK(same_bits(s.v, from_hex<S>(want["exp_avg_sq"])));
  }
}

template <class T>
void check_four_bit_case(const nlohmann::json& c, const optim::Hyperparameters& h) {
  const int id = c["case"];
  const index_t n = c["n"];
  const std::vector<float> start = hashed_values(std::uint64_t(100 + id), n);
  std::vector<T> p(start.begin(), start.end());
  using S = std::conditional_t<std::is_same_v<T, bf16>, bf16, float>;  // torchao keeps plain moments in the parameter's dtype
  auto s = optim::adamw4bit_state<S>(n);
  CHECK(s.quantized() == optim::adamw4bit_quantizes(n));
  for (int step = 1; step <= 6; ++step) {
    const std::vector<float> g32 = four_bit_gradient(id, step, n);
    const std::vector<T> g(g32.begin(), g32.end());
    optim::adamw4bit_step(p.data(), g.data(), n, s, h, std::int64_t(step));
    if (step == 1) check_four_bit_state(s, c["first_state"]);
  }
  check_four_bit_state(s, c["final_state"]);
  // torch's CPU sqrt is MKL's vector math, not correctly rounded in about one
  // element of 200; ft's is IEEE's, so an update (about lr) may differ in its
  // last bits, and the parameter by that and its own rounding.
  const std::vector<T> want = from_hex<T>(c["final"]);
  REQUIRE(want.size() == p.size());
  const double unit = std::is_same_v<T, bf16> ? 0x1p-7 : 0x1p-23;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double a = double(float(p[i])), b = double(float(want[i]));
    differ += a != b;
    if (std::abs(a - b) > 2 * unit * (std::abs(b) + 6 * h.lr)) {
      CAPTURE(i);
      CHECK(a == b);
    }
  }
  CHECK(double(differ) < 0.02 * double(p.size()));
}
}  // namespace

TEST_CASE("4-bit AdamW gives torchao's AdamW4bit codes, scales and moments bit for bit, and its parameters") {
  const nlohmann::json ref = load("adamw4bit.json");
  const optim::FourBitMap* maps = optim::host_four_bit_maps();
  CHECK(same_bits(std::vector<float>(maps[0].value.begin(), maps[0].value.end()), from_hex<float>(ref["signed_map"])));
  optim::Hyperparameters h;
  h.lr = ref["hyper"]["lr"];
  h.weight_decay = ref["hyper"]["weight_decay"];
  h.beta1 = ref["hyper"]["beta1"];
  h.beta2 = ref["hyper"]["beta2"];
  h.eps = ref["hyper"]["eps"];
  for (const auto& c : ref["cases"]) {
    CAPTURE(c["name"].get<std::string>());
    if (c["dtype"] == "bfloat16") check_four_bit_case<bf16>(c, h);
    else check_four_bit_case<float>(c, h);
  }
}

TEST_CASE("4-bit codes: the largest map value at most x, one up from halfway, two to a byte high nibble first") {
  for (const optim::FourBitMap* map : {optim::host_four_bit_maps(), optim::host_four_bit_maps() + 1}) {
    for (int c = 0; c < 16; ++c) {
      const float v = map->value[std::size_t(c)];
      CHECK(map->encode(v) == c);
      if (c + 1 < 16) {
        const float next = map->value[std::size_t(c + 1)];
        // The first float at least halfway (in float32, as torchao measures it) goes up.
        const float gap = (next - v) * 0.5f;
        float half = v + gap;
        while (half - v < gap) half = std::nextafter(half, next);
        while (std::nextafter(half, v) - v >= gap) half = std::nextafter(half, v);
        CHECK(map->encode(half) == c + 1);
        CHECK(map->encode(std::nextafter(half, v)) == c);
      }
    }
    CHECK(map->encode(-2.0f) == 0);
    CHECK(map->encode(2.0f) == 15);
  }
  CHECK(optim::host_four_bit_maps()[1].decode(optim::host_four_bit_maps()[1].encode(0.0f)) == 1.0f / 16);  // no zero
  // Block of 128: the element 2k is byte k's high nibble.
  const index_t n = 4096;
  auto s = optim::adamw4bit_state(n);
  std::vector<float> p(std::size_t(n), 0.0f), g(std::size_t(n), 0.0f);
  g[0] = 1.0f;  // the first element's moment is the block's largest: code 15, the second's 0 (signed code 7)
  optim::adamw4bit_step(p.data(), g.data(), n, s, optim::Hyperparameters{}, 1);
  CHECK(s.m_q.data()[0] == 0xF7);
  CHECK(s.m_q.data()[1] == 0x77);
  CHECK(optim::adamw4bit_quantizes(4096));
  CHECK_FALSE(optim::adamw4bit_quantizes(4100));
  CHECK_FALSE(optim::adamw4bit_quantizes(3968));
  auto small = optim::adamw4bit_state(100);
  CHECK_THROWS_WITH_AS(optim::adamw4bit_step(p.data(), g.data(), 4096, small, optim::Hyperparameters{}, 1),
                       "adamw4bit: the optimizer state does not fit a parameter of 4096 elements; make it with "
                       "adamw4bit_state(4096)",
                       Error);
}

}  // namespace test_optimizers_extra

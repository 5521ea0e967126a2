// Kernel benchmarks at the shapes of a 135M-parameter model (SmolLM2-135M:
// C=576, 30 layers, H=9, G=3, D=64, F=1536, V=49152) with B*T = 4*512 rows.
//
//   build/release/bin/bench_kernels --benchmark_counters_tabular=true
//
// GFLOP/s is the counter to read. `peak/*` measures this machine's f32 GEMM
// peak with OpenBLAS (what ft calls) and with Eigen's own GEMM, the two
// candidates for the CPU's matrix products.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include <Eigen/Core>

#include <ft/device/cpu/gemm.hpp>
#include <ft/device/cpu/attention.hpp>
#include <ft/nn/cross_entropy.hpp>

namespace {

std::vector<float> random_floats(std::size_t n, float scale = 1.0f) {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_iteration * 1e-9 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

void peak_openblas(benchmark::State& state) {
  const ft::index_t n = state.range(0);
  auto a = random_floats(std::size_t(n * n)), b = random_floats(std::size_t(n * n)), c = random_floats(std::size_t(n * n));
  for (auto _ : state) {
    ft::gemm<float>(ft::Op::none, ft::Op::none, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(peak_openblas)->Name("peak/openblas_sgemm")->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

void peak_eigen(benchmark::State& state) {
  const Eigen::Index n = state.range(0);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(peak_eigen)->Name("peak/eigen_gemm")->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// One linear layer's three GEMMs (forward, d input, d weight) at N = 2048 rows.
struct LinearShape {
  const char* name;
  ft::index_t in, out;
};
constexpr ft::index_t rows = 4 * 512;
constexpr LinearShape linear_shapes[] = {
    {"qkv 576->960", 576, 960},           {"o 576->576", 576, 576},
    {"gate_up 576->3072", 576, 3072},     {"down 1536->576", 1536, 576},
    {"lm_head chunk 576->49152", 576, 49152},
};

void linear_gemms(benchmark::State& state) {
  const LinearShape& s = linear_shapes[state.range(0)];
  const int pass = int(state.range(1));  // 0 forward, 1 d input, 2 d weight
  const ft::index_t N = s.out == 49152 ? 256 : rows;  // the LM head runs in chunks of 256 rows
  auto x = random_floats(std::size_t(N * s.in)), w = random_floats(std::size_t(s.out * s.in));
  auto y = random_floats(std::size_t(N * s.out)), dx = random_floats(std::size_t(N * s.in));
  auto dw = random_floats(std::size_t(s.out * s.in));
  for (auto _ : state) {
    if (pass == 0) ft::gemm<float>(ft::Op::none, ft::Op::transpose, N, s.out, s.in, 1, x.data(), s.in, w.data(), s.in, 0, y.data(), s.out);
    if (pass == 1) ft::gemm<float>(ft::Op::none, ft::Op::none, N, s.in, s.out, 1, y.data(), s.out, w.data(), s.in, 1, dx.data(), s.in);
    if (pass == 2) ft::gemm<float>(ft::Op::transpose, ft::Op::none, s.out, s.in, N, 1, y.data(), s.out, x.data(), s.in, 1, dw.data(), s.in);
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(s.name) + (pass == 0 ? " forward" : pass == 1 ? " d_input" : " d_weight"));
  set_flops(state, 2.0 * double(N) * double(s.in) * double(s.out));
}
BENCHMARK(linear_gemms)->Name("gemm/linear")->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The same forward products at decode sizes (M = rows = sequences in the
// batch): row-invariant as inference runs them (device/cpu/row_invariant_gemm.hpp),
// and through BLAS for comparison.
void decode_gemms(benchmark::State& state) {
  const LinearShape& s = linear_shapes[state.range(0)];
  const ft::index_t M = state.range(1);
  const bool row_invariant = state.range(2) != 0;
  auto x = random_floats(std::size_t(M * s.in)), w = random_floats(std::size_t(s.out * s.in));
  auto y = random_floats(std::size_t(M * s.out));
  for (auto _ : state) {
    if (row_invariant) {
      const ft::RowInvariantGemm scope;
      ft::gemm<float>(ft::Op::none, ft::Op::transpose, M, s.out, s.in, 1, x.data(), s.in, w.data(), s.in, 0, y.data(), s.out);
    } else {
      ft::gemm<float>(ft::Op::none, ft::Op::transpose, M, s.out, s.in, 1, x.data(), s.in, w.data(), s.in, 0, y.data(), s.out);
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(s.name) + (row_invariant ? " row-invariant" : " blas"));
  set_flops(state, 2.0 * double(M) * double(s.in) * double(s.out));
}
BENCHMARK(decode_gemms)->Name("gemm/decode")->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 16, 64}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Causal attention, one micro-batch of 4 x 512 or 1 x 2048 tokens.
void attention(benchmark::State& state) {
  const ft::index_t T = state.range(0), B = 2048 / T;
  const bool backward = state.range(1) != 0;
  ft::nn::AttentionShape s{B, T, 9, 3, 64, 0};
  const ft::index_t N = B * T;
  auto qkv = random_floats(std::size_t(N * 15 * 64)), out = random_floats(std::size_t(N * 9 * 64));
  auto dout = random_floats(out.size()), dqkv = random_floats(qkv.size());
  std::vector<float> lse(std::size_t(B * 9 * T));
  ft::cpu::attention_forward(out.data(), lse.data(), qkv.data(), nullptr, s);
  for (auto _ : state) {
    if (backward) ft::cpu::attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), nullptr, s);
    else ft::cpu::attention_forward(out.data(), lse.data(), qkv.data(), nullptr, s);
    benchmark::ClobberMemory();
  }
  // Causal: half of the T x T scores. Forward: QK^T and PV; backward: QK^T
  // twice (both passes recompute it), dP twice, dV, dK, dQ.
  double pair_flops = 2.0 * double(B) * 9 * double(T) * double(T) / 2 * 64;
  set_flops(state, pair_flops * (backward ? 7 : 2));
  state.SetLabel(std::string(backward ? "backward" : "forward") + " B=" + std::to_string(B) + " T=" + std::to_string(T));
}
BENCHMARK(attention)->Name("attention")->ArgsProduct({{512, 2048}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

// LM head + cross-entropy over 2048 rows, chunked, forward and backward.
void lm_head_loss(benchmark::State& state) {
  const ft::index_t N = rows, C = 576, V = 49152;
  auto h = random_floats(std::size_t(N * C)), w = random_floats(std::size_t(V * C), 0.02f);
  auto dh = random_floats(h.size()), dw = random_floats(w.size());
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (ft::index_t n = 0; n < N; ++n) targets[std::size_t(n)] = std::int32_t((n * 7919) % V);
  ft::nn::CrossEntropyOptions options{.chunk_rows = state.range(0), .token_count = double(N)};
  for (auto _ : state) {
    benchmark::DoNotOptimize(ft::nn::lm_head_cross_entropy(dh.data(), dw.data(), h.data(), w.data(), targets.data(), N, C, V, options));
  }
  set_flops(state, 3 * 2.0 * double(N) * double(C) * double(V));
}
BENCHMARK(lm_head_loss)->Name("lm_head_cross_entropy")->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

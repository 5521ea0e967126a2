// The numerical core's layers and updates, run on device::Cpu and on
// device::Cuda over the same inputs (the same nn:: calls, the same
// functors), forward and backward, in f32, bf16 and f16, and cuBLASLt against
// BLAS: one line per op x shape x dtype with the largest difference
// against its tolerance. The device rounds transcendental functions and
// contracts multiply-adds differently from the host, so results agree to a
// few units in the last place of the accumulation, not bit for bit.
// Buffers live in the caching allocator's device memory. Exits 77 (ctest:
// skipped) where there is no GPU.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <ft/device/cuda.cuh>
#include <ft/device/cuda/gemm.hpp>
#include <ft/nn/attention_rows.hpp>
#include <ft/nn/cross_entropy.hpp>
#include <ft/nn/embedding.hpp>
#include <ft/nn/linear.hpp>
#include <ft/nn/mlp.hpp>
#include <ft/nn/norm.hpp>
#include <ft/nn/rope.hpp>
#include <ft/optim/adafactor.hpp>
#include <ft/optim/adamw8bit.hpp>
#include <ft/optim/update.hpp>
#include <ft/device/cuda/memory.hpp>

#include "support/gpu_check.hpp"

namespace {

using ft::index_t;

// The same values on the host and on the device.
template <class T>
class Buffer {
public:
  explicit Buffer(std::vector<T> values) : host_(std::move(values)) {
    device_ = static_cast<T*>(ft::memory::CudaDevice::allocate(bytes()));
    FT_CUDA_CHECK(cudaMemcpy(device_, host_.data(), bytes(), cudaMemcpyHostToDevice));
  }
  ~Buffer() { ft::memory::CudaDevice::deallocate(device_, bytes()); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* at(bool device) { return device ? device_ : host_.data(); }
  const std::vector<T>& host() const { return host_; }
  std::vector<T> device() const {
    std::vector<T> out(host_.size());
    FT_CUDA_CHECK(cudaMemcpy(out.data(), device_, bytes(), cudaMemcpyDeviceToHost));
    return out;
  }

private:
  std::size_t bytes() const { return host_.size() * sizeof(T); }
  std::vector<T> host_;
  T* device_ = nullptr;
};

template <class T>
std::vector<T> random_values(std::size_t n, float scale, unsigned seed, float shift = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(shift, scale);
  std::vector<T> v(n);
  for (T& x : v) x = T(normal(rng));
  return v;
}

template <class T>
std::vector<T> zeros(index_t n) {
  return std::vector<T>(std::size_t(n), T{});
}

template <class T>
const char* dtype() {
  return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, ft::bf16> ? "bf16" : "f16";
}
// Relative to 1 + |host value|; a 16-bit type: two units in the last place.
template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : std::is_same_v<T, ft::bf16> ? 1.6e-2 : 2e-3;
}

int failures = 0;

// Runs the same nn:: call on the CPU (call(Cpu, false)) and on the device (call(Cuda, true)).
template <class Call>
void on_both(Call call) {
  call(ft::device::Cpu{}, false);
  call(ft::device::Cuda{}, true);
  FT_CUDA_CHECK(cudaDeviceSynchronize());
}

// One line of the table: the largest relative difference of a result
// against its tolerance; scale widens the tolerance for results that sum
// many products (sqrt(K) for a GEMM).
template <class T>
void report(const std::string& op, const std::string& shape, double worst, double scale = 1) {
  const double allowed = tolerance<T>() * scale;
  const bool ok = worst <= allowed;
  failures += ok ? 0 : 1;
  std::printf("| %-28s | %-14s | %-4s | %9.2e | %7.1e | %s |\n", op.c_str(), shape.c_str(), dtype<T>(), worst, allowed,
              ok ? "ok" : "FAILED");
}

template <class T>
void compare(const std::string& op, const std::string& shape, const Buffer<T>& b, double scale = 1) {
  const std::vector<T> device = b.device();
  double worst = 0;
  for (std::size_t i = 0; i < device.size(); ++i) {
    const double h = double(b.host()[i]), d = double(device[i]);
    worst = std::max(worst, std::isfinite(d) ? std::abs(h - d) / (1 + std::abs(h)) : INFINITY);
  }
  report<T>(op, shape, worst, scale);
}

template <class T>
void norms(index_t N, index_t C) {
  using A = ft::acc_t<T>;
  const std::string shape = std::to_string(N) + "x" + std::to_string(C);
  for (const auto kind : {ft::nn::NormKind::rms, ft::nn::NormKind::layer}) {
    const std::string name = kind == ft::nn::NormKind::layer ? "layer_norm" : "rms_norm";
    Buffer<T> out(zeros<T>(N * C)), in(random_values<T>(std::size_t(N * C), 1.0f, 1, 0.3f));
    Buffer<T> weight(random_values<T>(std::size_t(C), 0.2f, 2, 1.0f)), bias(random_values<T>(std::size_t(C), 0.1f, 3));
    Buffer<A> mean(zeros<A>(N)), rstd(zeros<A>(N));
    on_both([&](auto device, bool d) {
      ft::nn::norm_forward<decltype(device)>(kind, out.at(d), mean.at(d), rstd.at(d), in.at(d), weight.at(d),
                                             bias.at(d), N, C, A(1e-5));
    });
    compare(name + " forward", shape, out);
    compare(name + " forward rstd", shape, rstd);
    Buffer<T> dout(random_values<T>(std::size_t(N * C), 1.0f, 4)), din(random_values<T>(std::size_t(N * C), 0.1f, 5));
    Buffer<T> dweight(zeros<T>(C)), dbias(zeros<T>(C));
    on_both([&](auto device, bool d) {
      ft::nn::norm_backward<decltype(device)>(kind, din.at(d), dweight.at(d), dbias.at(d), dout.at(d), in.at(d),
                                              weight.at(d), mean.at(d), rstd.at(d), N, C);
    });
    compare(name + " backward input", shape, din);
    compare(name + " backward weight", shape, dweight, std::sqrt(double(N)));
    if (kind == ft::nn::NormKind::layer) compare(name + " backward bias", shape, dbias, std::sqrt(double(N)));
  }
}

template <class T>
void mlps(index_t N, index_t F) {
  const std::string shape = std::to_string(N) + "x" + std::to_string(F);
  for (const auto act : {ft::nn::Activation::silu, ft::nn::Activation::gelu, ft::nn::Activation::gelu_tanh})
    for (const bool gated : {true, false}) {
      const std::string name = std::string(act == ft::nn::Activation::silu ? "silu" : act == ft::nn::Activation::gelu ? "gelu" : "gelu_tanh") +
                               (gated ? " gated" : "");
      const std::size_t width = std::size_t(gated ? 2 * F : F);
      Buffer<T> h(zeros<T>(N * F)), in(random_values<T>(std::size_t(N) * width, 2.0f, 6));
      on_both([&](auto device, bool d) { ft::nn::mlp_forward<decltype(device)>(h.at(d), in.at(d), N, F, gated, act); });
      compare(name + " forward", shape, h);
      Buffer<T> dh(random_values<T>(std::size_t(N * F), 1.0f, 7)), din(random_values<T>(std::size_t(N) * width, 0.1f, 8));
      on_both([&](auto device, bool d) {
        ft::nn::mlp_backward<decltype(device)>(din.at(d), dh.at(d), in.at(d), N, F, gated, act);
      });
      compare(name + " backward", shape, din);
    }
}

template <class T>
void ropes(index_t N, index_t H, index_t G, index_t D) {
  const std::string shape = std::to_string(N) + "x" + std::to_string(H) + "/" + std::to_string(G) + "x" + std::to_string(D);
  std::vector<std::int32_t> positions = zeros<std::int32_t>(N);
  for (index_t n = 0; n < N; ++n) positions[std::size_t(n)] = std::int32_t((n * 37) % 4096);
  Buffer<std::int32_t> pos(positions);
  ft::nn::RopeConfig rope;
  rope.rotary_dim = D;
  Buffer<float> inv_freq(ft::nn::rope_inverse_frequencies(rope));
  const std::size_t half = std::size_t(D / 2);
  Buffer<T> qkv(random_values<T>(std::size_t(N * (H + 2 * G) * D), 1.0f, 9));
  on_both([&](auto device, bool d) {
    ft::nn::rope_forward<decltype(device)>(qkv.at(d), pos.at(d), ft::nn::RopeTables{{inv_freq.at(d), half}}, N, H, G, D);
  });
  compare("rope forward", shape, qkv);
  on_both([&](auto device, bool d) {
    ft::nn::rope_backward<decltype(device)>(qkv.at(d), pos.at(d), ft::nn::RopeTables{{inv_freq.at(d), half}}, N, H, G, D);
  });
  compare("rope backward", shape, qkv);
}

template <class T>
void linears(index_t N, index_t I, index_t O) {
  const std::string shape = std::to_string(N) + "x" + std::to_string(I) + "->" + std::to_string(O);
  Buffer<T> in(random_values<T>(std::size_t(N * I), 1.0f, 19)), weight(random_values<T>(std::size_t(O * I), 0.05f, 20));
  Buffer<T> bias(random_values<T>(std::size_t(O), 0.1f, 21)), out(zeros<T>(N * O));
  on_both([&](auto device, bool d) {
    ft::nn::linear_forward<decltype(device)>(out.at(d), in.at(d), weight.at(d), bias.at(d), N, I, O);
  });
  compare("linear forward", shape, out, std::sqrt(double(I)));
  Buffer<T> dout(random_values<T>(std::size_t(N * O), 1.0f, 22)), din(zeros<T>(N * I));
  Buffer<T> dweight(zeros<T>(O * I)), dbias(zeros<T>(O));
  on_both([&](auto device, bool d) {
    ft::nn::linear_backward<decltype(device)>(din.at(d), dweight.at(d), dbias.at(d), dout.at(d), in.at(d),
                                              weight.at(d), N, I, O);
  });
  compare("linear backward input", shape, din, std::sqrt(double(O)));
  compare("linear backward weight", shape, dweight, std::sqrt(double(N)));
  compare("linear backward bias", shape, dbias, std::sqrt(double(N)));
}

// The device's attention against the CPU's tiled attention: causal,
// grouped-query, documents packed in a row, a sliding window. bf16 or f16 with
// head dimension 64 or 128 runs the tensor-core kernels
// (device/cuda/flash_attention.cuh), everything else the row functors.
template <class T>
void attentions(ft::nn::AttentionShape s, bool packed) {
  using A = ft::acc_t<T>;
  const index_t N = s.B * s.T;
  const bool flash = sizeof(T) == 2 && (s.D == 64 || s.D == 128);
  const std::string path = flash ? "flash attention" : "row attention";
  const std::string shape = std::to_string(s.B) + "x" + std::to_string(s.T) + " " + std::to_string(s.H) + "/" +
                            std::to_string(s.G) + "x" + std::to_string(s.D) + (packed ? " docs" : "") +
                            (s.window > 0 ? " w" + std::to_string(s.window) : "");
  // Documents of uneven lengths: a third of the row, then the rest.
  std::vector<std::int32_t> docs = zeros<std::int32_t>(N);
  for (index_t n = 0; n < N; ++n) docs[std::size_t(n)] = std::int32_t(n % s.T < s.T / 3 ? 0 : 1);
  Buffer<std::int32_t> documents(docs);
  Buffer<T> qkv(random_values<T>(std::size_t(N * (s.H + 2 * s.G) * s.D), 1.0f, 23));
  // Outputs start as noise: every element must be written (forward) or added to (backward).
  Buffer<T> out(random_values<T>(std::size_t(N * s.H * s.D), 1.0f, 27));
  Buffer<A> lse(random_values<A>(std::size_t(s.B * s.H * s.T), 1.0f, 28));
  on_both([&](auto device, bool d) {
    ft::nn::attention_forward_on<decltype(device)>(out.at(d), lse.at(d), qkv.at(d),
                                                   packed ? documents.at(d) : nullptr, s);
  });
  compare(path + " forward", shape, out);
  compare(path + " forward lse", shape, lse);
  Buffer<T> dout(random_values<T>(std::size_t(N * s.H * s.D), 1.0f, 24));
  Buffer<T> dqkv(random_values<T>(std::size_t(N * (s.H + 2 * s.G) * s.D), 1.0f, 29));
  on_both([&](auto device, bool d) {
    ft::nn::attention_backward_on<decltype(device)>(dqkv.at(d), dout.at(d), out.at(d), lse.at(d), qkv.at(d),
                                                    packed ? documents.at(d) : nullptr, s);
  });
  compare(path + " backward", shape, dqkv, std::sqrt(double(s.T)));
}

// The LM head with cross-entropy in chunks: the summed loss, dh and dW, with
// ignored rows and a last chunk shorter than the others.
template <class T>
void lm_heads(index_t N, index_t C, index_t V) {
  const std::string shape = std::to_string(N) + "x" + std::to_string(C) + "->" + std::to_string(V);
  std::vector<std::int32_t> labels = zeros<std::int32_t>(N);
  for (index_t n = 0; n < N; ++n) labels[std::size_t(n)] = n % 7 == 3 ? ft::nn::ignore_index : std::int32_t((n * 131) % V);
  Buffer<std::int32_t> targets(labels);
  Buffer<T> h(random_values<T>(std::size_t(N * C), 1.0f, 25)), weight(random_values<T>(std::size_t(V * C), 0.05f, 26));
  Buffer<T> dh(zeros<T>(N * C)), dweight(zeros<T>(V * C));
  ft::nn::CrossEntropyOptions options;
  options.chunk_rows = 48;
  options.token_count = double(N);
  double loss[2] = {};
  on_both([&](auto device, bool d) {
    loss[d] = ft::nn::lm_head_cross_entropy<decltype(device)>(dh.at(d), dweight.at(d), h.at(d), weight.at(d),
                                                              targets.at(d), N, C, V, options);
  });
  report<T>("lm head loss", shape, std::abs(loss[0] - loss[1]) / (1 + std::abs(loss[0])), std::sqrt(double(C)));
  compare("lm head d hidden", shape, dh, std::sqrt(double(V)));
  compare("lm head d weight", shape, dweight, std::sqrt(double(N)));
}

template <class T>
void embeddings(index_t N, index_t C, index_t V) {
  const std::string shape = std::to_string(N) + "x" + std::to_string(C) + " of " + std::to_string(V);
  std::vector<std::int32_t> tokens = zeros<std::int32_t>(N);
  for (index_t n = 0; n < N; ++n) tokens[std::size_t(n)] = std::int32_t((n * 7919) % V);  // ids repeat
  Buffer<std::int32_t> ids(tokens);
  Buffer<T> table(random_values<T>(std::size_t(V * C), 1.0f, 17)), out(zeros<T>(N * C));
  on_both([&](auto device, bool d) {
    ft::nn::embedding_forward<decltype(device)>(out.at(d), ids.at(d), table.at(d), N, C);
  });
  compare("embedding forward", shape, out);
  Buffer<T> dout(random_values<T>(std::size_t(N * C), 1.0f, 18)), dtable(zeros<T>(V * C));
  on_both([&](auto device, bool d) {
    ft::nn::embedding_backward<decltype(device)>(dtable.at(d), ids.host().data(), dout.at(d), N, C);
  });
  compare("embedding backward", shape, dtable, 4);
}

template <class T>
void optimizers(index_t n) {
  const std::string shape = std::to_string(n);
  using A = ft::acc_t<T>;
  Buffer<T> p(random_values<T>(std::size_t(n), 1.0f, 10)), g(random_values<T>(std::size_t(n), 0.1f, 11));
  // A second moment is never negative: sqrt of one would be NaN on both devices.
  std::vector<A> second = random_values<A>(std::size_t(n), 0.001f, 13, 0.002f);
  for (A& x : second) x = A(std::abs(float(x)));
  Buffer<A> m(random_values<A>(std::size_t(n), 0.01f, 12)), v(second);
  ft::optim::Hyperparameters h;
  h.weight_decay = 0.01;
  on_both([&](auto device, bool d) { ft::optim::adamw_step<decltype(device)>(p.at(d), g.at(d), m.at(d), v.at(d), n, h, 3); });
  compare("adamw step", shape, p);
  compare("adamw exp_avg_sq", shape, v);
  h.beta2 = 0.99;
  on_both([&](auto device, bool d) { ft::optim::lion_step<decltype(device)>(p.at(d), g.at(d), m.at(d), n, h); });
  compare("lion step", shape, p);
  h.momentum = 0.9;
  h.nesterov = true;
  on_both([&](auto device, bool d) { ft::optim::sgd_step<decltype(device)>(p.at(d), g.at(d), m.at(d), n, h, 2); });
  compare("sgd nesterov step", shape, p);
}

// Adafactor's steps with every scalar path on (relative step scaled by the
// parameter's RMS, clipping, momentum, weight decay): factored second
// moments summed down columns in spans of rows on the GPU, whole on the CPU.
template <class T>
void adafactors(const ft::Shape& shape, bool momentum) {
  using A = ft::acc_t<T>;
  const auto n = std::size_t(shape.numel());
  Buffer<T> p(random_values<T>(n, 1.0f, 20)), g(random_values<T>(n, 0.1f, 21));
  ft::optim::AdafactorOptions o;
  o.clip_threshold = 0.5;
  o.weight_decay = 0.01;
  if (momentum) o.beta1 = 0.9;
  auto host = ft::optim::adafactor_state<A>(shape, o);
  auto device = ft::optim::adafactor_state<A, ft::memory::CudaDevice>(shape, o);
  for (std::int64_t step = 1; step <= 3; ++step) {
    ft::optim::adafactor_step<ft::device::Cpu>(p.at(false), g.at(false), shape, host, o, step);
    ft::optim::adafactor_step<ft::device::Cuda>(p.at(true), g.at(true), shape, device, o, step);
  }
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  compare(std::string("adafactor step") + (momentum ? " beta1" : ""), shape.str(), p);
}

// 8-bit AdamW over quantised blocks (and the plain moments of a small
// tensor): the parameters, and how many of the codes differ from the CPU's.
template <class T>
void adamw8bits(index_t n) {
  using A = ft::acc_t<T>;
  Buffer<T> p(random_values<T>(std::size_t(n), 1.0f, 22)), g(random_values<T>(std::size_t(n), 0.1f, 23));
  ft::optim::Hyperparameters h;
  h.weight_decay = 0.01;
  auto host = ft::optim::adamw8bit_state<A>(n);
  auto device = ft::optim::adamw8bit_state<A, ft::memory::CudaDevice>(n);
  ft::memory::Array<ft::optim::DynamicMap, ft::memory::CudaDevice> maps(2);
  FT_CUDA_CHECK(cudaMemcpy(maps.data(), ft::optim::host_dynamic_maps(), maps.bytes(), cudaMemcpyHostToDevice));
  for (std::int64_t step = 1; step <= 3; ++step) {
    ft::optim::adamw8bit_step<ft::device::Cpu>(p.at(false), g.at(false), n, host, ft::optim::host_dynamic_maps(), h,
                                               step);
    ft::optim::adamw8bit_step<ft::device::Cuda>(p.at(true), g.at(true), n, device, maps.data(), h, step);
  }
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  compare("adamw8bit step", std::to_string(n), p);
  if (!host.quantized()) return;
  std::vector<std::uint8_t> codes(host.v_q.size());
  FT_CUDA_CHECK(cudaMemcpy(codes.data(), device.v_q.data(), codes.size(), cudaMemcpyDeviceToHost));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) differ += codes[i] != host.v_q.data()[i];
  report<T>("adamw8bit exp_avg_sq codes", std::to_string(n), double(differ) / double(codes.size()),
            1e-3 / tolerance<T>());  // a fraction of codes, allowed 0.1%
}

// cuBLASLt against BLAS, every transpose pair, with leading dimensions wider
// than the rows (a view into a larger matrix) and beta != 0.
template <class T>
void gemms(ft::cuda::Blas& blas, index_t M, index_t N, index_t K) {
  using ft::Op;
  for (const Op op_a : {Op::none, Op::transpose})
    for (const Op op_b : {Op::none, Op::transpose}) {
      const index_t a_rows = op_a == Op::none ? M : K, a_cols = op_a == Op::none ? K : M;
      const index_t b_rows = op_b == Op::none ? K : N, b_cols = op_b == Op::none ? N : K;
      const index_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 1;
      Buffer<T> a(random_values<T>(std::size_t(a_rows * lda), 1.0f, 14)), b(random_values<T>(std::size_t(b_rows * ldb), 1.0f, 15));
      Buffer<T> c(random_values<T>(std::size_t(M * ldc), 1.0f, 16));
      using A = ft::acc_t<T>;
      ft::gemm<T>(op_a, op_b, M, N, K, A(0.5), a.at(false), lda, b.at(false), ldb, A(0.25), c.at(false), ldc);
      blas.gemm<T>(op_a, op_b, M, N, K, A(0.5), a.at(true), lda, b.at(true), ldb, A(0.25), c.at(true), ldc);
      FT_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
      compare(std::string("gemm ") + (op_a == Op::none ? "N" : "T") + (op_b == Op::none ? "N" : "T"), shape, c,
              std::sqrt(double(K)));
    }
}

template <class T>
void every_op() {
  norms<T>(7, 64);
  norms<T>(33, 576);
  norms<T>(9, 2048);  // a block of threads per row on a GPU
  mlps<T>(5, 1536);
  ropes<T>(9, 9, 3, 64);
  ropes<T>(4, 32, 8, 128);
  embeddings<T>(300, 576, 1000);
  linears<T>(37, 576, 960);
  lm_heads<T>(100, 576, 4099);
  attentions<T>({2, 130, 9, 3, 64, 0}, false);
  attentions<T>({1, 200, 4, 1, 128, 0}, true);
  attentions<T>({2, 100, 8, 8, 64, 17}, true);
  attentions<T>({3, 64, 6, 2, 64, 0}, false);
  attentions<T>({2, 1000, 8, 2, 128, 0}, true);
  attentions<T>({1, 777, 4, 4, 64, 300}, false);
  attentions<T>({1, 150, 4, 2, 96, 0}, true);
  optimizers<T>(100003);
  adafactors<T>(ft::Shape{300, 577}, false);
  adafactors<T>(ft::Shape{3, 40, 33}, true);
  adafactors<T>(ft::Shape{10000}, true);
  adamw8bits<T>(100003);
  adamw8bits<T>(1000);
  ft::cuda::Blas blas;
  gemms<T>(blas, 64, 48, 96);
  gemms<T>(blas, 333, 1536, 576);
}

}  // namespace

int main() {
  ft::testing::skip_without_gpu();
  try {
    std::printf("| %-28s | %-14s | %-4s | %9s | %7s |    |\n|---|---|---|---|---|---|\n", "op", "shape", "type",
                "max diff", "tol");
    every_op<float>();
    every_op<ft::bf16>();
    every_op<ft::f16>();  // fp16-mixed's storage
  } catch (const ft::Error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  // Every buffer was freed into the cache: nothing is allocated but the
  // device's cuBLASLt workspace (kept for the process), the blocks stay reserved.
  const ft::memory::Stats &allocated = ft::memory::CudaDevice::stats(), &reserved = ft::memory::CudaDevice::reserved();
  const std::size_t workspace = ft::device::Cuda::blas().workspace_bytes();
  std::printf("device memory: peak allocated %zu bytes, reserved %zu (peak %zu), allocated now %zu (cuBLASLt workspace %zu)\n",
              allocated.peak(), reserved.current(), reserved.peak(), allocated.current(), workspace);
  failures += allocated.current() == workspace && reserved.current() > 0 ? 0 : 1;
  std::printf("%s\n", failures == 0 ? "every op agrees with the CPU" : "some ops differ from the CPU");
  return failures == 0 ? 0 : 1;
}

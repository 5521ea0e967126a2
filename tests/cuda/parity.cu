// HF parity on the device: the parity fixtures (tools/make_parity_fixtures.py,
// HF in float64) run through Transformer<T, device::Cuda> (weights, every
// activation and gradient in device memory; cuBLASLt products, the
// tensor-core attention in bf16, the row functors in f32), compared with the
// same tolerances as the CPU's parity test (tests/models/test_parity.cpp):
// loss, logits and every parameter gradient. One line per fixture and type;
// exits 77 (ctest: skipped) where there is no GPU.
//
//   cuda_parity [FIXTURES_DIR]   (default: the source tree's tests/fixtures/parity)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ft/device/cuda.cuh>
#include <ft/io/safetensors.hpp>
#include <ft/models/load.hpp>

namespace {

using ft::index_t;
namespace fs = std::filesystem;

const char* const cases[] = {"llama_gqa",       "smollm2_tied",  "llama3_rope_scaling", "qwen2_bias",
                             "mistral_sliding", "neox_parallel", "neox_sequential"};

template <class T>
std::vector<T> read(const ft::io::SafetensorsFile& file, const std::string& name) {
  const ft::io::TensorView& t = file.at(name);
  std::vector<T> out(std::size_t(t.numel()));
  ft::io::copy_elements(file, t, out.data(), t.numel());
  return out;
}

// max |got - want| / max |want|, as the CPU's parity test measures.
template <class A>
double relative_error(const std::vector<A>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(want[i]));
    diff = std::isfinite(d) ? std::max(diff, d) : INFINITY;
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

struct Tolerance {
  double loss, logits, gradient;
};

template <class T>
bool check_case(const fs::path& dir, const char* name, Tolerance tol) {
  auto expected = ft::io::SafetensorsFile::open(dir / name / "expected.safetensors");
  auto model = ft::models::load_pretrained<T, ft::device::Cuda>(dir / name);
  const ft::io::TensorView& ids_view = expected.at("input_ids");
  const index_t B = ids_view.shape[0], T_ = ids_view.shape[1], V = model->config().vocab_size;
  auto ids = read<std::int64_t>(expected, "input_ids");
  auto labels = read<std::int64_t>(expected, "labels");
  ft::models::Batch batch = ft::models::causal_lm_batch(B, T_, std::vector<std::int32_t>(ids.begin(), ids.end()),
                                                        std::vector<std::int32_t>(labels.begin(), labels.end()));
  ft::memory::Scratch<T, ft::memory::CudaDevice> logits(B * T_ * V);
  model->zero_grads();
  const double count = double(batch.scored_tokens());
  const double loss = model->forward_backward(batch, {.token_count = count}, logits.data()) / count;
  std::vector<T> host_logits(std::size_t(B * T_ * V));
  ft::device::Cuda::to_host(host_logits.data(), logits.data(), host_logits.size() * sizeof(T));

  const double want_loss = read<float>(expected, "loss")[0];
  const double loss_error = std::abs(loss - want_loss) / want_loss;
  const double logits_error = relative_error(host_logits, read<float>(expected, "logits"));
  double gradient_error = 0;
  std::string worst;
  std::size_t compared = 0;
  for (const ft::io::TensorView& t : expected.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    const double e = relative_error(model->hf_gradient(t.name.substr(5)), read<float>(expected, t.name));
    if (!(e <= gradient_error)) {
      gradient_error = e;
      worst = t.name.substr(5);
    }
    ++compared;
  }
  const bool ok = loss_error <= tol.loss && logits_error <= tol.logits && gradient_error <= tol.gradient &&
                  compared == model->spec().weights.size();
  std::printf("| %-20s | %-4s | %8.1e | %8.1e | %8.1e (%s) | %zu | %s |\n", name, sizeof(T) == 4 ? "f32" : "bf16",
              loss_error, logits_error, gradient_error, worst.c_str(), compared, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: skipped");
    return 77;
  }
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::path(FT_SOURCE_DIR) / "tests/fixtures/parity";
  int failures = 0;
  try {
    std::printf("| fixture | type | loss | logits | worst gradient | tensors | |\n|---|---|---|---|---|---|---|\n");
    // The CPU parity test's tolerances (tests/models/test_parity.cpp).
    for (const char* name : cases) failures += check_case<float>(dir, name, {1e-5, 1e-5, 1e-4}) ? 0 : 1;
    for (const char* name : cases) failures += check_case<ft::bf16>(dir, name, {2e-3, 3e-2, 6e-2}) ? 0 : 1;
  } catch (const ft::Error& e) {
    std::printf("%s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures == 0 ? "every fixture matches HF on the device" : "some fixtures differ from HF");
  return failures == 0 ? 0 : 1;
}

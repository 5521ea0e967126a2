#include <ft/models/initialise.hpp>

#include <algorithm>
#include <string>

#include <ft/core/fingerprint.hpp>
#include <ft/core/random.hpp>
#include <ft/models/save.hpp>
#include <ft/models/transformer.hpp>

namespace ft::models {
namespace {

// Norm weights start where the norm scales by one: 1, or 0 for Gemma's 1 + w.
void initialise(ParameterBuffer<float>& params, std::uint64_t seed, double std, float unit_norm) {
  for (const auto& e : params.entries()) {
    float* v = params.value(e.name);
    const bool norm = e.name.find("norm") != std::string::npos, bias = e.name.ends_with(".bias");
    Rng rng(derive_key(seed, fnv1a(e.name)));
    for (index_t i = 0; i < e.shape.numel(); ++i) v[i] = bias ? 0.0f : norm ? unit_norm : float(std * rng.normal());
  }
}

}  // namespace

index_t save_initialised(const ModelSpec& spec, const std::filesystem::path& source, const std::filesystem::path& dir,
                         std::uint64_t seed, double std) {
  Transformer<float> model(spec);
  for (index_t s = -1; s <= model.config().num_layers; ++s)
    initialise(model.stage_parameters(s), seed + std::uint64_t(s + 1) * 0x9e3779b97f4a7c15ull, std,
               model.config().norm == nn::NormKind::rms_unit_offset ? 0.0f : 1.0f);
  // As HF's _init_weights: the padding token's row starts at zero (and takes no gradient after).
  if (const index_t pad = model.config().padding_idx; pad >= 0) {
    const index_t C = model.config().hidden_size;
    std::fill_n(model.stage_parameters(-1).value("weight") + pad * C, C, 0.0f);
  }
  save_pretrained(model, source, dir, "F32");
  return model.parameter_count();
}

}  // namespace ft::models

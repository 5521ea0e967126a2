// ftrun init SOURCE [DESTINATION]: a randomly initialised model in HF layout
// from a config.json, with ft's own deterministic draws, for pre-training
// from scratch and for ft's tiny models (models/ft-tiny-*), whose weights
// the build makes this way instead of committing them.
//
// As HF Transformers initialises Llama and GPT-NeoX: every matrix and the
// embedding from N(0, initializer_range) (0.02 when the config has none),
// norm weights 1, biases 0. Each tensor draws from a stream keyed by the
// seed and its name, so a tensor's values do not depend on the others. The
// other files of SOURCE (tokenizer, chat template) are copied beside the
// weights; DESTINATION (SOURCE by default) is written atomically.
#include <filesystem>
#include <iostream>
#include <string>

#include <ft/core/fingerprint.hpp>
#include <ft/core/random.hpp>
#include <ft/io/hf_config.hpp>
#include <ft/io/staged_directory.hpp>
#include <ft/models/load.hpp>
#include <ft/models/save.hpp>

#include "commands.hpp"
#include "exit_code.hpp"
#include "model_reading.hpp"

namespace ftrun {
namespace {

template <ft::element T>
void initialise(ft::models::ParameterBuffer<T>& params, std::uint64_t seed, double std) {
  for (const auto& e : params.entries()) {
    T* v = params.value(e.name);
    const bool norm = e.name.find("norm") != std::string::npos, bias = e.name.ends_with(".bias");
    ft::Rng rng(ft::derive_key(seed, ft::fnv1a(e.name)));
    for (ft::index_t i = 0; i < e.shape.numel(); ++i)
      v[i] = bias ? T(0.0f) : norm ? T(1.0f) : T(float(std * rng.normal()));
  }
}

}  // namespace

int run_init(const InitOptions& options) {
  namespace fs = std::filesystem;
  try {
    const fs::path source = options.source;
    const fs::path destination = options.destination.empty() ? source : fs::path(options.destination);
    if (!fs::is_regular_file(source / "config.json"))
      throw ft::Error(source.string() + ": has no config.json to initialise a model from");
    if (fs::exists(destination / "model.safetensors") && !options.force)
      throw ft::Error(destination.string() + ": already holds model.safetensors (--force replaces it)");
    ft::models::Transformer<float> model(read_model(source, options.plugins).spec);
    const double std = ft::io::read_json_file(source / "config.json").value("initializer_range", 0.02);
    for (ft::index_t s = -1; s <= model.config().num_layers; ++s)
      initialise(model.stage_parameters(s), std::uint64_t(options.seed) + std::uint64_t(s + 1) * 0x9e3779b97f4a7c15ull,
                 std);
    ft::io::write_directory_atomically(
        destination, [&](const fs::path& dir) { ft::models::save_pretrained(model, source, dir, "F32"); }, true);
    std::cout << "initialised " << model.parameter_count() << " parameters (seed " << options.seed << ") in "
              << destination.string() << "\n";
    return ok;
  } catch (const ft::Error& e) {
    std::cerr << "ftrun: " << e.what() << "\n";
    return bad_input;
  }
}

}  // namespace ftrun

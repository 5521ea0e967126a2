#pragma once
// A model loaded to be served: its weights, its Engine and an EngineDecoder
// with the key/value caches, owned together. What a plugin's inference entry
// points hold for ftrun generate, chat and serve.
//
// Opening one is a function, not inline, so that the dtypes ft compiles once
// (train/compiled.hpp) reach the inference engine through that copy instead
// of generating it again in every plugin.
#include <filesystem>
#include <memory>
#include <utility>

#include "ft/infer/decoder.hpp"
#include "ft/infer/engine.hpp"
#include "ft/infer/engine_decoder.hpp"
#include "ft/infer/load_options.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/models/transformer.hpp"

namespace ft::infer {

class Served {
public:
  virtual ~Served() = default;
  virtual Decoder& decoder() = 0;
};

template <element T, class Device>
class ServedModel final : public Served {
public:
  explicit ServedModel(std::unique_ptr<models::Transformer<T, Device>> model)
      : model_(std::move(model)), engine_(*model_), decoder_(engine_) {}
  Decoder& decoder() override { return decoder_; }

private:
  std::unique_ptr<models::Transformer<T, Device>> model_;
  Engine<T, Device> engine_;
  EngineDecoder<T, Device> decoder_;
};

// The model of `spec` with the weights in `dir`, loaded as `options` say.
// Served models only run forward: no gradient buffers beside the weights.
template <element T, class Device>
std::unique_ptr<Served> open_served(models::ModelSpec spec, const std::filesystem::path& dir,
                                    const LoadOptions& options) {
  // Each stage's values made as it loads: a 4-bit base holds one layer whole at a time.
  auto model = std::make_unique<models::Transformer<T, Device>>(std::move(spec), /*trainable=*/false, models::unallocated);
  if (options.quantize) model->quantize_on_load(*options.quantize);
  model->load(io::ModelWeights::open(dir));
  return std::make_unique<ServedModel<T, Device>>(std::move(model));
}

}  // namespace ft::infer

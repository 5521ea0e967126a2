#pragma once
// Full fine-tuning at run time: every stage of the model trains, and the
// model itself is what checkpoints hold and the run leaves (HF layout).
#include <filesystem>
#include <string>
#include <vector>

#include "ft/adapters/runtime.hpp"
#include "ft/io/model_files.hpp"
#include "ft/io/model_weights.hpp"
#include "ft/io/staged_directory.hpp"
#include "ft/models/save.hpp"

namespace ft::adapters {

template <element T, class Device>
class FullRuntime final : public Runtime<T, Device> {
public:
  explicit FullRuntime(const recipe::Recipe& r) : source_(r.model.path) {}

  std::vector<Trainable<T, Device>> attach(models::Transformer<T, Device>& model, const text::ModelText&) override {
    model_ = &model;
    std::vector<Trainable<T, Device>> out{{"embed", -1, &model.embedding().parameters()}};
    for (auto& b : model.blocks()) out.push_back({"layers." + std::to_string(b.layer()), b.layer(), &b.parameters()});
    if (model.head().parameters().size() > 0)
      out.push_back({"head", model.config().num_layers, &model.head().parameters()});
    return out;
  }

  void save(const std::filesystem::path& dir) override {
    models::save_pretrained(*model_, source_, dir, io::safetensors_dtype_of<T>());
  }
  void load(const std::filesystem::path& dir) override { model_->load(io::ModelWeights::open(dir)); }

  std::vector<std::string> save_final(const std::filesystem::path& output_dir) override {
    const auto dir = output_dir / "model";
    io::write_directory_atomically(dir, [&](const auto& staging) { save(staging); }, true);
    return {"model (HF) in " + dir.string()};
  }

private:
  std::filesystem::path source_;
  models::Transformer<T, Device>* model_ = nullptr;
};

}  // namespace ft::adapters

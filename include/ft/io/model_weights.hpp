#pragma once
// A model's weights: <dir>/model.safetensors, or the shards that
// <dir>/model.safetensors.index.json lists; failing both, the legacy
// pytorch_model.bin or the shards of pytorch_model.bin.index.json (read-only).
// A single file wins over an index, and safetensors over torch files, as in
// transformers.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/io/safetensors.hpp"
#include "ft/io/torch_checkpoint.hpp"

namespace ft::io {

class ModelWeights {
public:
  // One weight file, by its extension.
  static SafetensorsFile open_weight_file(const std::filesystem::path& file) {
    if (file.extension() == ".bin") return SafetensorsFile::from_views(file, read_torch_checkpoint(file));
    return SafetensorsFile::open(file);
  }

  static ModelWeights open(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw Error(dir.string() + ": is not a directory (expected a model directory holding model.safetensors)");
    ModelWeights w;
    for (const char* stem : {"model.safetensors", "pytorch_model.bin"}) {
      fs::path single = dir / stem;
      fs::path index = dir / (std::string(stem) + ".index.json");
      if (fs::exists(single, ec)) {
        w.source_ = single;
        w.files_.push_back(open_weight_file(single));
        const auto& tensors = w.files_[0].tensors();
        for (std::size_t i = 0; i < tensors.size(); ++i) w.entries_.emplace(tensors[i].name, Entry{0, i});
        return w;
      }
      if (fs::exists(index, ec)) {
        w.source_ = index;
        w.open_shards(dir);
        return w;
      }
    }
    throw Error(dir.string() + ": has no weights (model.safetensors, model.safetensors.index.json, "
                               "pytorch_model.bin or pytorch_model.bin.index.json)");
  }

  const TensorView* find(std::string_view name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &files_[it->second.file].tensors()[it->second.tensor];
  }

  const TensorView& at(std::string_view name) const {
    if (const TensorView* t = find(name)) return *t;
    throw Error(source_.string() + ": no tensor " + detail::quoted(name));
  }

  // The file that holds a tensor, which copy_elements names in its errors.
  const SafetensorsFile& file_of(std::string_view name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) throw Error(source_.string() + ": no tensor " + detail::quoted(name));
    return files_[it->second.file];
  }

  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> result;
    result.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) result.push_back(name);
    return result;
  }

  // model.safetensors, or the index of a sharded model.
  const std::filesystem::path& source() const { return source_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

private:
  struct Entry {
    std::size_t file;
    std::size_t tensor;
  };
  std::filesystem::path source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry, std::less<>> entries_;  // indices, so that a copy points into itself

  void open_shards(const std::filesystem::path& dir) {
    const std::string where = source_.string() + ": ";
    nlohmann::json index;
    {
      std::ifstream in(source_);
      if (!in) throw Error(where + "cannot be opened");
      try {
        index = nlohmann::json::parse(in);
      } catch (const nlohmann::json::parse_error& e) {
        throw Error(where + "not valid JSON (byte " + std::to_string(e.byte) + ")");
      } catch (const nlohmann::json::exception&) {
        throw Error(where + "not valid JSON");
      }
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw Error(where + "has no \"weight_map\" object mapping tensor names to shard files");

    std::map<std::string, std::size_t> shard_file;  // shard name -> index in files_
    for (auto& [name, shard_json] : index["weight_map"].items()) {
      if (!shard_json.is_string())
        throw Error(where + "\"weight_map\" entry " + detail::quoted(name) + " must name a shard file");
      const std::string shard = shard_json.get<std::string>();
      // A shard is a file beside the index; anything else would let an index
      // reach outside the model directory.
      if (shard.empty() || std::filesystem::path(shard).filename() != shard || shard == "." || shard == "..")
        throw Error(where + "shard " + detail::quoted(shard) + " for " + detail::quoted(name) +
                    " must be a file name in the same directory");
      auto it = shard_file.find(shard);
      if (it == shard_file.end()) {
        std::filesystem::path p = dir / shard;
        std::error_code ec;
        if (!std::filesystem::exists(p, ec))
          throw Error(where + "shard " + detail::quoted(shard) + " (holding " + detail::quoted(name) +
                      ") does not exist");
        files_.push_back(open_weight_file(p));
        it = shard_file.emplace(shard, files_.size() - 1).first;
      }
      const SafetensorsFile& file = files_[it->second];
      const TensorView* t = file.find(name);
      if (!t)
        throw Error(file.path().string() + ": no tensor " + detail::quoted(name) + ", which " +
                    source_.filename().string() + " says this shard holds");
      entries_.emplace(name, Entry{it->second, static_cast<std::size_t>(t - file.tensors().data())});
    }
  }
};

template <class T>
  requires element<T> || std::same_as<T, std::int64_t> || std::same_as<T, std::int32_t>
void copy_elements(const ModelWeights& weights, std::string_view name, T* out, std::int64_t count) {
  copy_elements(weights.file_of(name), weights.at(name), out, count);
}

}  // namespace ft::io

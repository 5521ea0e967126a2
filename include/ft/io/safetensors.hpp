#pragma once
// Reading and writing safetensors, the format HF stores model weights in.
//
//   bytes [0, 8)        N, the header length: a little-endian u64
//   bytes [8, 8 + N)    the header: UTF-8 JSON, possibly padded with trailing spaces
//   bytes [8 + N, end)  the data: every tensor's elements, row-major, little-endian
//
// The header is one JSON object. Each key but one names a tensor:
//   "model.norm.weight": {"dtype": "F32", "shape": [64], "data_offsets": [begin, end]}
// where [begin, end) is a byte range relative to the start of the data, and
// end - begin = product(shape) * size of dtype (a scalar has shape [], product 1).
// The one other key, "__metadata__", is optional and maps strings to strings.
// dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2, I64 I32 I16 I8, U64 U32 U16 U8, BOOL.
// A sharded model is several such files plus model.safetensors.index.json, whose
// "weight_map" names the shard file that holds each tensor.
//
// Why it is built this way: weights are gigabytes, so files are mapped read-only
// and tensors are views into the mapping; nothing is copied until a caller asks
// for elements in its own type (copy_elements). Every view keeps the mapping
// alive through a shared_ptr, so no view can outlive the bytes it points at.
// Everything in a file is checked on open, once, so that later reads can trust
// it; a file truncated by another process while mapped can still fault (SIGBUS),
// which no reader of a mapping can prevent. Writes go to a temporary file that is
// renamed into place, so a crash never leaves half a file under the final name
// and readers holding the old file keep reading the old bytes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"
#include "ft/core/numeric.hpp"
#include "ft/io/mapped_file.hpp"

namespace ft::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is read in place");

struct TensorView {  // one tensor in a mapped file
  std::string name;
  std::string dtype;  // as the file spells it: "F32", "BF16", ...
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> mapping;  // keeps `bytes` valid for as long as this view lives

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
};

// Where a producer puts a tensor's bytes, in order, in as many pieces as it likes.
using ByteSink = std::function<void(std::span<const std::byte>)>;

// A tensor for write_safetensors: its bytes, or a function that puts them
// when the writer reaches the tensor. A producer that puts a run of rows at
// a time lets writing a model hold a few rows beside the weights, not a
// tensor, nor a second copy of the model.
struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;                 // used when `produce` is empty
  std::function<void(const ByteSink&)> produce;     // must put the bytes that shape and dtype need
};

// A producer that puts one whole vector of bytes (`make` returns it).
template <class Make>
std::function<void(const ByteSink&)> whole_bytes(Make make) {
  return [make = std::move(make)](const ByteSink& put) {
    const std::vector<std::byte> bytes = make();
    put(bytes);
  };
}

// Everything a producer puts, in one vector (for a producer that rewrites another's bytes).
inline std::vector<std::byte> collect_bytes(const std::function<void(const ByteSink&)>& produce) {
  std::vector<std::byte> out;
  produce([&out](std::span<const std::byte> piece) { out.insert(out.end(), piece.begin(), piece.end()); });
  return out;
}

namespace detail {

// 0 for a dtype this reader does not know.
inline std::size_t dtype_size(std::string_view dtype) {
  static const std::map<std::string_view, std::size_t> sizes = {
      {"F64", 8}, {"F32", 4},     {"F16", 2},     {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I64", 8}, {"I32", 4},     {"I16", 2},     {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},      {"BOOL", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

inline constexpr std::string_view known_dtypes =
    "F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL";

// Names come from files and callers; quoting them as JSON keeps a message on one
// line whatever they contain.
inline std::string quoted(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

inline std::string range_string(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Product of the dimensions times the element size, or false if it overflows.
inline bool byte_size(const std::vector<std::int64_t>& shape, std::size_t element_size, std::uint64_t& out) {
  std::uint64_t n = element_size;
  for (std::int64_t d : shape)
    if (d == 0) n = 0;
  if (n == 0) {
    out = 0;
    return true;
  }
  for (std::int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return false;
  if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
  out = n;
  return true;
}

// The bytes a tensor's shape and dtype need (0 for an unknown dtype or a shape
// too large to address; the writer refuses both before writing).
inline std::uint64_t tensor_bytes(const TensorToWrite& t) {
  std::uint64_t n = 0;
  return byte_size(t.shape, dtype_size(t.dtype), n) ? n : 0;
}

template <class T> constexpr std::string_view type_name() {
  if constexpr (std::same_as<T, float>) return "float";
  else if constexpr (std::same_as<T, double>) return "double";
  else if constexpr (std::same_as<T, bf16>) return "bf16";
  else if constexpr (std::same_as<T, f16>) return "f16";
  else if constexpr (std::same_as<T, std::int64_t>) return "int64";
  else return "int32";
}

}  // namespace detail

class SafetensorsFile {
public:
  static SafetensorsFile open(const std::filesystem::path& file) {
    SafetensorsFile result;
    result.path_ = file;
    result.map_file();
    result.parse_header();
    return result;
  }

  // A file of named tensors that another reader parsed (torch checkpoints),
  // so that every weight source answers the same calls.
  static SafetensorsFile from_views(const std::filesystem::path& file, std::vector<TensorView> tensors) {
    SafetensorsFile result;
    result.path_ = file;
    result.tensors_ = std::move(tensors);
    for (std::size_t i = 0; i < result.tensors_.size(); ++i) {
      if (!result.index_.emplace(result.tensors_[i].name, i).second)
        throw Error(file.string() + ": tensor " + detail::quoted(result.tensors_[i].name) + " appears twice");
    }
    return result;
  }

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in file order of offsets
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const TensorView* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

  const TensorView& at(std::string_view name) const {
    if (const TensorView* t = find(name)) return *t;
    throw Error(path_.string() + ": no tensor " + detail::quoted(name));
  }

  // A tensor read once and done with: its pages leave memory (MappedFile::release).
  void release(const TensorView& t) const {
    if (mapping_) mapping_->release(t.bytes);
  }

private:
  std::filesystem::path path_;
  std::shared_ptr<const MappedFile> mapping_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;

  [[noreturn]] void fail(const std::string& what) const { throw Error(path_.string() + ": " + what); }

  void map_file() {
    mapping_ = map_file_readonly(path_, "a safetensors file", 8, "the 8-byte header length of a safetensors file");
  }

  void parse_header() {
    const std::byte* base = mapping_->bytes().data();
    const std::size_t size = mapping_->bytes().size();
    std::uint64_t header_size = 0;
    std::memcpy(&header_size, base, 8);
    constexpr std::uint64_t max_header = 100'000'000;  // the limit HF's own reader sets
    if (header_size > max_header)
      fail("header length " + std::to_string(header_size) + " is absurd (more than " +
           std::to_string(max_header) + " bytes); this is not a safetensors file");
    if (header_size > size - 8)
      fail("header length " + std::to_string(header_size) + " runs past the end of the file (" +
           std::to_string(size) + " bytes); the file is truncated or not safetensors");

    const char* text = reinterpret_cast<const char*>(base + 8);
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text, text + header_size);
    } catch (const nlohmann::json::parse_error& e) {
      fail("header is not valid JSON (byte " + std::to_string(e.byte) + " of " + std::to_string(header_size) + ")");
    } catch (const nlohmann::json::exception&) {
      fail("header is not valid JSON");
    }
    if (!header.is_object()) fail("header is not a JSON object mapping tensor names to tensors");

    const std::byte* data = base + 8 + header_size;
    const std::uint64_t data_size = size - 8 - header_size;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // parallel to tensors_ until sorted
    for (auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        read_metadata(value);
        continue;
      }
      auto [begin, end] = read_entry(key, value, data_size);
      TensorView& t = tensors_.back();
      t.bytes = std::span<const std::byte>(data + begin, end - begin);
      t.mapping = mapping_;
      ranges.emplace_back(begin, end);
    }

    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return ranges[a] != ranges[b] ? ranges[a] < ranges[b] : tensors_[a].name < tensors_[b].name;
    });
    // Sorted by begin, a tensor overlaps an earlier one exactly when it begins
    // before the furthest end seen so far; empty tensors occupy no bytes.
    std::size_t furthest = order.size();
    for (std::size_t i : order) {
      auto [begin, end] = ranges[i];
      if (begin == end) continue;
      if (furthest != order.size() && begin < ranges[furthest].second)
        fail("tensors " + detail::quoted(tensors_[furthest].name) + " " +
             detail::range_string(ranges[furthest].first, ranges[furthest].second) + " and " +
             detail::quoted(tensors_[i].name) + " " + detail::range_string(begin, end) + " overlap");
      if (furthest == order.size() || end > ranges[furthest].second) furthest = i;
    }

    std::vector<TensorView> sorted;
    sorted.reserve(order.size());
    for (std::size_t i : order) sorted.push_back(std::move(tensors_[i]));
    tensors_ = std::move(sorted);
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }

  void read_metadata(const nlohmann::json& value) {
    if (!value.is_object()) fail("\"__metadata__\" must be an object mapping strings to strings");
    for (auto& [k, v] : value.items()) {
      if (!v.is_string())
        fail("\"__metadata__\" entry " + detail::quoted(k) + " must be a string, not " + v.type_name());
      metadata_[k] = v.get<std::string>();
    }
  }

  // Appends the tensor to tensors_ (bytes not yet set) and returns its data range.
  std::pair<std::uint64_t, std::uint64_t> read_entry(const std::string& name, const nlohmann::json& entry,
                                                     std::uint64_t data_size) {
    const std::string who = "tensor " + detail::quoted(name);
    if (!entry.is_object())
      fail(who + " must be an object with \"dtype\", \"shape\" and \"data_offsets\", not " + entry.type_name());
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) fail(who + " has no \"" + field + "\"");

    const nlohmann::json& dtype = entry["dtype"];
    if (!dtype.is_string()) fail(who + " has a \"dtype\" that is not a string");
    const std::string dtype_name = dtype.get<std::string>();
    const std::size_t element_size = detail::dtype_size(dtype_name);
    if (element_size == 0)
      fail(who + " has unknown dtype " + detail::quoted(dtype_name) + " (known: " +
           std::string(detail::known_dtypes) + ")");

    const nlohmann::json& shape_json = entry["shape"];
    if (!shape_json.is_array()) fail(who + " has a \"shape\" that is not a list of integers");
    std::vector<std::int64_t> shape;
    for (const nlohmann::json& d : shape_json) {
      if (d.is_number_unsigned()) {
        if (d.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          fail(who + " has a dimension too large: " + d.dump());
        shape.push_back(static_cast<std::int64_t>(d.get<std::uint64_t>()));
      } else if (d.is_number_integer()) {
        shape.push_back(d.get<std::int64_t>());
      } else {
        fail(who + " has a \"shape\" that is not a list of integers");
      }
    }
    for (std::int64_t d : shape)
      if (d < 0) fail(who + " has negative dimension " + std::to_string(d) + " in shape " + detail::shape_string(shape));

    const nlohmann::json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(who + " has \"data_offsets\" that are not a pair of non-negative integers [begin, end]");
    const auto begin = offsets[0].get<std::uint64_t>();
    const auto end = offsets[1].get<std::uint64_t>();
    if (end < begin) fail(who + " data " + detail::range_string(begin, end) + " ends before it begins");
    if (end > data_size)
      fail(who + " data " + detail::range_string(begin, end) + " runs past the end of the data (" +
           std::to_string(data_size) + " bytes)");

    std::uint64_t expected = 0;
    if (!detail::byte_size(shape, element_size, expected))
      fail(who + " has shape " + detail::shape_string(shape) + ", too large to address");
    if (end - begin != expected)
      fail(who + " data " + detail::range_string(begin, end) + " is " + std::to_string(end - begin) +
           " bytes, but shape " + detail::shape_string(shape) + " of " + dtype_name + " needs " +
           std::to_string(expected));

    TensorView t;
    t.name = name;
    t.dtype = dtype_name;
    t.shape = std::move(shape);
    tensors_.push_back(std::move(t));
    return {begin, end};
  }
};

// Converting copy of a tensor's elements into T. Floating destinations accept any
// floating source (F64, F32, F16, BF16) and round to T; integer destinations
// accept I64 and I32 and refuse a value that does not fit.
template <class T>
  requires element<T> || std::same_as<T, std::int64_t> || std::same_as<T, std::int32_t>
void copy_elements(const SafetensorsFile& file, const TensorView& t, T* out, std::int64_t count) {
  auto fail = [&](const std::string& what) {
    throw Error(file.path().string() + ": tensor " + detail::quoted(t.name) + " " + what);
  };
  if (t.numel() != count)
    fail("has " + std::to_string(t.numel()) + " elements (shape " + detail::shape_string(t.shape) + "), but " +
         std::to_string(count) + " were asked for");

  // The mapping has no alignment guarantee for a 2- or 8-byte element, so each
  // element is read with memcpy, which compiles to a plain load.
  auto convert = [&]<class Source>() {
    const std::byte* src = t.bytes.data();
    for (std::int64_t i = 0; i < count; ++i) {
      Source s;
      std::memcpy(&s, src + i * std::int64_t(sizeof(Source)), sizeof(Source));
      if constexpr (std::same_as<Source, T>) {
        out[i] = s;
      } else if constexpr (std::integral<T>) {
        if (!std::in_range<T>(s))
          fail("has value " + std::to_string(s) + " at element " + std::to_string(i) + ", which does not fit in " +
               std::string(detail::type_name<T>()));
        out[i] = static_cast<T>(s);
      } else if constexpr (std::same_as<Source, double>) {
        out[i] = T(s);
      } else {
        out[i] = T(static_cast<float>(s));  // f16 and bf16 widen to float exactly
      }
    }
  };

  const std::string& d = t.dtype;
  if constexpr (std::integral<T>) {
    if (d == "I64") return convert.template operator()<std::int64_t>();
    if (d == "I32") return convert.template operator()<std::int32_t>();
  } else {
    if (d == "F32") return convert.template operator()<float>();
    if (d == "F64") return convert.template operator()<double>();
    if (d == "BF16") return convert.template operator()<bf16>();
    if (d == "F16") return convert.template operator()<f16>();
  }
  fail("has dtype " + d + ", which cannot be copied into " + std::string(detail::type_name<T>()));
}



// Writes the tensors in the order given, each starting at an 8-byte-aligned
// offset (as HF aligns them) so that a reader can use the mapped data in place.
// `wrote(bytes)` is called after each tensor.
inline void write_safetensors(const std::filesystem::path& file, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              const std::function<void(std::uint64_t)>& wrote = {}) {
  const std::string where = file.string() + ": ";
  auto align = [](std::uint64_t n) { return (n + 7) / 8 * 8; };
  // The format allows no gap between tensors' bytes. Written in order of
  // element size, largest first (as safetensors' own writer sorts them),
  // each tensor starts aligned to its element without padding; otherwise
  // the given order is kept (stage after stage, for a model read from ranks).
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return detail::dtype_size(tensors[a].dtype) > detail::dtype_size(tensors[b].dtype);
  });

  // ordered_json keeps "__metadata__" first and the tensors in data order, for a reader's eye.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  std::set<std::string_view> seen;
  for (const std::size_t i : order) {
    const TensorToWrite& t = tensors[i];
    const std::string who = "cannot write tensor " + detail::quoted(t.name) + ": ";
    if (t.name == "__metadata__") throw Error(where + who + "the name is reserved for metadata");
    if (!seen.insert(t.name).second) throw Error(where + who + "the name is given twice");
    const std::size_t element_size = detail::dtype_size(t.dtype);
    if (element_size == 0)
      throw Error(where + who + "unknown dtype " + detail::quoted(t.dtype) + " (known: " +
                  std::string(detail::known_dtypes) + ")");
    for (std::int64_t d : t.shape)
      if (d < 0) throw Error(where + who + "negative dimension in shape " + detail::shape_string(t.shape));
    std::uint64_t expected = 0;
    if (!detail::byte_size(t.shape, element_size, expected))
      throw Error(where + who + "shape " + detail::shape_string(t.shape) + " is too large to address");
    if (!t.produce && expected != t.bytes.size())
      throw Error(where + who + "it has " + std::to_string(t.bytes.size()) + " bytes, but shape " +
                  detail::shape_string(t.shape) + " of " + t.dtype + " needs " + std::to_string(expected));
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = t.dtype;
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + expected};
    header[t.name] = std::move(entry);
    offset += expected;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(where + "cannot be written: tensor names and metadata must be valid UTF-8");
  }
  text.resize(align(text.size()), ' ');  // 8 + header keeps the data 8-byte aligned in the file

  std::filesystem::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  auto fail = [&](const std::string& what) {
    std::string why = what + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(where + "cannot be written (" + why + ")");
  };
  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.fd < 0) fail("creating " + tmp.filename().string());
  struct RemoveUnlessRenamed {  // a producer that throws leaves no temporary behind
    const std::filesystem::path& path;
    bool renamed = false;
    ~RemoveUnlessRenamed() {
      if (!renamed) ::unlink(path.c_str());
    }
  } staged{tmp};
  auto put = [&](const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd.fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("writing " + tmp.filename().string());
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  };
  const std::uint64_t header_size = text.size();
  put(&header_size, 8);
  put(text.data(), text.size());
  for (const std::size_t i : order) {
    const TensorToWrite& t = tensors[i];
    const std::uint64_t expected = detail::tensor_bytes(t);
    std::uint64_t given = 0;
    auto wrong_size = [&](std::uint64_t bytes) {
      return Error(where + "cannot write tensor " + detail::quoted(t.name) + ": it has " + std::to_string(bytes) +
                   " bytes, but shape " + detail::shape_string(t.shape) + " of " + t.dtype + " needs " +
                   std::to_string(expected));
    };
    if (t.produce) {
      bool over = false;  // past its size, a producer's bytes are not written; its total is told after
      t.produce([&](std::span<const std::byte> piece) {
        given += piece.size();
        over = over || given > expected;
        if (!over) put(piece.data(), piece.size());
      });
    } else {
      given = t.bytes.size();
      put(t.bytes.data(), t.bytes.size());
    }
    if (given != expected) throw wrong_size(given);
    if (wrote) wrote(given);
  }
  // Without fsync the rename could reach the disk before the data, and a crash
  // would leave a complete-looking name over missing bytes.
  if (::fsync(fd.fd) != 0) fail("syncing " + tmp.filename().string());
  if (::close(std::exchange(fd.fd, -1)) != 0) fail("closing " + tmp.filename().string());
  if (::rename(tmp.c_str(), file.c_str()) != 0) fail("renaming " + tmp.filename().string());
  staged.renamed = true;
}

}  // namespace ft::io

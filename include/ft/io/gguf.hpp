#pragma once
// Reading GGUF, the file format of llama.cpp and ggml (versions 2 and 3).
//
// Everything is little-endian; a "string" is a u64 byte length and that many
// bytes of UTF-8 (no terminating NUL).
//
//   u8[4]   magic "GGUF"
//   u32     version (3; 2 has the same layout; 1, with 32-bit counts, is refused)
//   u64     tensor_count
//   u64     metadata_kv_count
//   metadata_kv_count times:   string key, u32 value_type, value
//   tensor_count times:        string name, u32 n_dims (<= 4), u64 ne[n_dims],
//                              u32 ggml_type, u64 offset
//   padding to `alignment`, then the data section; tensor t's bytes start at
//   data_start + offset (a multiple of `alignment`).
//
// value_type: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (one byte, 0 or
// 1), 8 string, 9 array, 10 u64, 11 i64, 12 f64. An array is u32 item_type, u64
// count, then count items of that type; items may themselves be arrays.
// `alignment` is the metadata value "general.alignment" (a u32 power of two), 32
// when absent.
//
// Shapes: ne lists dimensions fastest-varying first, so ne[0] is the row length
// and a GGUF tensor with ne = [576, 1536] is the row-major (HF, PyTorch) tensor of
// shape [1536, 576]; GgufTensor::shape() gives that reversed order. A quantised
// type packs each row into blocks (ggml_quants.hpp), so ne[0] must be a multiple
// of its block size.
//
// Why it is built this way: a GGUF file is an untrusted file of gigabytes. It is
// mapped read-only and every length, count, type and byte range is checked on
// open, before anything is allocated from it or read through it, so that a later
// read (metadata access, dequantize) can trust what it is given: a count is
// refused when even the smallest possible entries could not fit in the bytes that
// are left, and tensors must lie inside the data section without overlapping.
// Metadata is copied out (it is small); tensor data stays in the mapping, and
// every tensor view keeps the mapping alive. Errors are one line naming the file
// and the key, tensor or byte offset concerned.
#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ft/core/error.hpp"
#include "ft/core/half.hpp"
#include "ft/io/ggml_quants.hpp"
#include "ft/io/mapped_file.hpp"
#include "ft/io/safetensors.hpp"  // detail::quoted, detail::range_string

namespace ft::io {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian and is read in place");

enum class GgufType : std::uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

inline std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<std::uint32_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

// One metadata value. Integers are held widened (unsigned in `std::uint64_t`,
// signed in `std::int64_t`), floats as double (an f32 widens exactly); `type`
// keeps what the file said.
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType item_type = GgufType::U8;  // of an array's items
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, std::vector<GgufValue>> value;

  bool is_integer() const {
    return std::holds_alternative<std::uint64_t>(value) || std::holds_alternative<std::int64_t>(value);
  }
  const std::vector<GgufValue>& items() const { return std::get<std::vector<GgufValue>>(value); }
  // "array of string", "u32", ...: for messages.
  std::string type_string() const {
    std::string s(gguf_type_name(type));
    if (type == GgufType::Array) s += " of " + std::string(gguf_type_name(item_type));
    return s;
  }
};

// The key/value metadata of one file, with typed access whose errors name the
// file and the key. Integer getters accept any integer type whose value fits (the
// converters that write GGUF disagree on signedness); float getters accept f32
// and f64.
class GgufMetadata {
public:
  GgufMetadata() = default;
  explicit GgufMetadata(std::filesystem::path file) : file_(std::move(file)) {}

  const std::map<std::string, GgufValue, std::less<>>& entries() const { return entries_; }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }
  const GgufValue& at(std::string_view key) const {
    if (const GgufValue* v = find(key)) return *v;
    throw Error(file_.string() + ": metadata key " + detail::quoted(key) + " is missing");
  }

  std::string get_string(std::string_view key) const {
    const GgufValue& v = at(key);
    if (v.type != GgufType::String) wrong_type(key, v, "string");
    return std::get<std::string>(v.value);
  }
  bool get_bool(std::string_view key) const {
    const GgufValue& v = at(key);
    if (v.type != GgufType::Bool) wrong_type(key, v, "bool");
    return std::get<bool>(v.value);
  }
  std::uint32_t get_u32(std::string_view key) const { return integer<std::uint32_t>(key, at(key), "u32"); }
  std::uint64_t get_u64(std::string_view key) const { return integer<std::uint64_t>(key, at(key), "u64"); }
  std::int64_t get_i64(std::string_view key) const { return integer<std::int64_t>(key, at(key), "i64"); }
  float get_f32(std::string_view key) const { return number(key, at(key)); }

  const GgufValue& get_array(std::string_view key) const {
    const GgufValue& v = at(key);
    if (v.type != GgufType::Array) wrong_type(key, v, "array");
    return v;
  }
  std::vector<std::string> get_strings(std::string_view key) const {
    const GgufValue& v = get_array(key);
    if (v.item_type != GgufType::String) wrong_type(key, v, "array of string");
    std::vector<std::string> out;
    out.reserve(v.items().size());
    for (const GgufValue& item : v.items()) out.push_back(std::get<std::string>(item.value));
    return out;
  }
  std::vector<std::int64_t> get_integers(std::string_view key) const {
    const GgufValue& v = get_array(key);
    if (!v.items().empty() && !v.items()[0].is_integer()) wrong_type(key, v, "array of integers");
    std::vector<std::int64_t> out;
    out.reserve(v.items().size());
    for (const GgufValue& item : v.items()) out.push_back(integer<std::int64_t>(key, item, "i64"));
    return out;
  }
  std::vector<float> get_floats(std::string_view key) const {
    const GgufValue& v = get_array(key);
    if (v.item_type != GgufType::F32 && v.item_type != GgufType::F64) wrong_type(key, v, "array of f32 or f64");
    std::vector<float> out;
    out.reserve(v.items().size());
    for (const GgufValue& item : v.items()) out.push_back(number(key, item));
    return out;
  }

private:
  friend class GgufFile;
  std::filesystem::path file_;
  std::map<std::string, GgufValue, std::less<>> entries_;

  [[noreturn]] void wrong_type(std::string_view key, const GgufValue& v, std::string_view expected) const {
    throw Error(file_.string() + ": metadata key " + detail::quoted(key) + " has type " + v.type_string() +
                ", expected " + std::string(expected));
  }

  template <std::integral T>
  T integer(std::string_view key, const GgufValue& v, std::string_view expected) const {
    if (const auto* u = std::get_if<std::uint64_t>(&v.value)) {
      if (std::in_range<T>(*u)) return static_cast<T>(*u);
      throw Error(file_.string() + ": metadata key " + detail::quoted(key) + " has value " + std::to_string(*u) +
                  ", which does not fit in " + std::string(expected));
    }
    if (const auto* i = std::get_if<std::int64_t>(&v.value)) {
      if (std::in_range<T>(*i)) return static_cast<T>(*i);
      throw Error(file_.string() + ": metadata key " + detail::quoted(key) + " has value " + std::to_string(*i) +
                  ", which does not fit in " + std::string(expected));
    }
    wrong_type(key, v, expected);
  }

  float number(std::string_view key, const GgufValue& v) const {
    if (const auto* d = std::get_if<double>(&v.value)) return static_cast<float>(*d);
    wrong_type(key, v, "f32 or f64");
  }
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<std::int64_t> ne;  // fastest-varying first: ne[0] is the row length
  std::uint64_t offset = 0;      // from the start of the data section
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> mapping;  // keeps `bytes` valid for as long as this view lives

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : ne) n *= d;
    return n;
  }
  // Row-major order, slowest first: the shape HF and PyTorch give the same tensor.
  std::vector<std::int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  std::string_view type_name() const { return ggml_type_info(std::uint32_t(type))->name; }
};

class GgufFile {
public:
  static GgufFile open(const std::filesystem::path& file) {
    GgufFile result;
    result.path_ = file;
    result.metadata_ = GgufMetadata(file);
    result.mapping_ = map_file_readonly(file, "a GGUF file", 24, "the 24-byte header of a GGUF file");
    result.parse();
    return result;
  }

  const std::filesystem::path& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_start() const { return data_start_; }  // byte offset of the data section
  const GgufMetadata& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order

  const GgufTensor* find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  const GgufTensor& at(std::string_view name) const {
    if (const GgufTensor* t = find(name)) return *t;
    throw Error(path_.string() + ": no tensor " + detail::quoted(name));
  }

  // A tensor read once and done with: its pages leave memory (MappedFile::release).
  void release(const GgufTensor& t) const { mapping_->release(t.bytes); }

private:
  // Nested arrays deeper than this are refused rather than recursed into: real
  // files nest at most twice, and a crafted file must not exhaust the stack.
  static constexpr int max_array_depth = 8;
  // Each array item costs a GgufValue (48 bytes) however small it is in the file,
  // so the items of all arrays together are capped; the largest vocabularies
  // (256k tokens, with scores, types and merges) need about a million.
  static constexpr std::uint64_t max_array_items = std::uint64_t(1) << 24;

  std::filesystem::path path_;
  std::shared_ptr<const MappedFile> mapping_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  GgufMetadata metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;

  // Reading position in the mapping; every read checks the bytes left first.
  std::size_t pos_ = 0;
  std::uint64_t array_items_ = 0;

  [[noreturn]] void fail(const std::string& what) const { throw Error(path_.string() + ": " + what); }

  const std::byte* base() const { return mapping_->bytes().data(); }
  std::size_t size() const { return mapping_->bytes().size(); }
  std::size_t left() const { return size() - pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > left())
      fail("truncated at byte " + std::to_string(pos_) + ": " + what + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(left()) + " left");
  }

  template <class T> T read(const std::string& what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, base() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& what) {
    const std::size_t at = pos_;
    const auto length = read<std::uint64_t>("the length of " + what);
    if (length > left())
      fail(what + " at byte " + std::to_string(at) + " has length " + std::to_string(length) +
           ", past the end of the file (" + std::to_string(left()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(base() + pos_), std::size_t(length));
    pos_ += std::size_t(length);
    return s;
  }

  void parse() {
    if (std::memcmp(base(), "GGUF", 4) != 0) {
      std::string magic(reinterpret_cast<const char*>(base()), 4);
      fail("is not a GGUF file (it starts with " + detail::quoted(magic) + ", not \"GGUF\")");
    }
    pos_ = 4;
    version_ = read<std::uint32_t>("the version");
    if (version_ == 1) fail("is GGUF version 1, which is not supported (versions 2 and 3 are); re-convert it");
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
      fail("is a big-endian GGUF file, which is not supported (ft reads little-endian GGUF)");
    if (version_ != 2 && version_ != 3)
      fail("has GGUF version " + std::to_string(version_) + ", which is not supported (versions 2 and 3 are)");
    const auto tensor_count = read<std::uint64_t>("the tensor count");
    const auto kv_count = read<std::uint64_t>("the metadata count");
    // Smallest possible entries: a key/value is an empty key (8), a type (4) and
    // a one-byte value; a tensor info is an empty name (8), n_dims, type, offset.
    constexpr std::uint64_t min_kv = 8 + 4 + 1, min_tensor = 8 + 4 + 4 + 8;
    if (kv_count > left() / min_kv)
      fail("metadata count " + std::to_string(kv_count) + " is absurd: " + std::to_string(left()) +
           " bytes left cannot hold that many entries");
    if (tensor_count > left() / min_tensor)
      fail("tensor count " + std::to_string(tensor_count) + " is absurd: " + std::to_string(left()) +
           " bytes left cannot hold that many tensor infos");

    for (std::uint64_t i = 0; i < kv_count; ++i) read_kv(i);
    read_alignment();
    tensors_.reserve(std::size_t(tensor_count));
    for (std::uint64_t i = 0; i < tensor_count; ++i) read_tensor_info(i);
    place_tensors();
  }

  void read_kv(std::uint64_t i) {
    const std::size_t at = pos_;
    std::string key = read_string("metadata key " + std::to_string(i));
    const std::string who = "metadata key " + detail::quoted(key);
    if (metadata_.entries_.count(key)) fail(who + " at byte " + std::to_string(at) + " appears twice");
    const auto type = read<std::uint32_t>("the value type of " + who);
    GgufValue value = read_value(type, who, 0);
    metadata_.entries_.emplace(std::move(key), std::move(value));
  }

  // Bytes the smallest value of a type takes, or 0 for an unknown type.
  static std::uint64_t min_value_size(std::uint32_t type) {
    switch (static_cast<GgufType>(type)) {
      case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
      case GgufType::U16: case GgufType::I16: return 2;
      case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
      case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::String: return 8;
      case GgufType::Array: return 12;
    }
    return 0;
  }

  GgufValue read_value(std::uint32_t type, const std::string& who, int depth) {
    if (min_value_size(type) == 0)
      fail(who + " has unknown value type " + std::to_string(type) + " (known: 0 to 12)");
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    const std::string what = "the value of " + who;
    switch (v.type) {
      case GgufType::U8: v.value = std::uint64_t(read<std::uint8_t>(what)); break;
      case GgufType::U16: v.value = std::uint64_t(read<std::uint16_t>(what)); break;
      case GgufType::U32: v.value = std::uint64_t(read<std::uint32_t>(what)); break;
      case GgufType::U64: v.value = read<std::uint64_t>(what); break;
      case GgufType::I8: v.value = std::int64_t(read<std::int8_t>(what)); break;
      case GgufType::I16: v.value = std::int64_t(read<std::int16_t>(what)); break;
      case GgufType::I32: v.value = std::int64_t(read<std::int32_t>(what)); break;
      case GgufType::I64: v.value = read<std::int64_t>(what); break;
      case GgufType::F32: v.value = double(read<float>(what)); break;
      case GgufType::F64: v.value = read<double>(what); break;
      case GgufType::String: v.value = read_string(what); break;
      case GgufType::Bool: {
        const auto b = read<std::uint8_t>(what);
        if (b > 1) fail(who + " is a bool of value " + std::to_string(b) + " at byte " + std::to_string(pos_ - 1) +
                        " (a bool is 0 or 1)");
        v.value = b == 1;
        break;
      }
      case GgufType::Array: {
        const auto item_type = read<std::uint32_t>("the item type of " + who);
        const auto count = read<std::uint64_t>("the item count of " + who);
        const std::uint64_t item_size = min_value_size(item_type);
        if (item_size == 0)
          fail(who + " is an array of unknown value type " + std::to_string(item_type) + " (known: 0 to 12)");
        if (item_type == std::uint32_t(GgufType::Array) && depth + 1 >= max_array_depth)
          fail(who + " nests arrays more than " + std::to_string(max_array_depth) + " deep");
        if (count > left() / item_size)
          fail(who + " is an array of " + std::to_string(count) + " " +
               std::string(gguf_type_name(GgufType(item_type))) + " items, which cannot fit in the " +
               std::to_string(left()) + " bytes left");
        if (count > max_array_items - array_items_)
          fail(who + " is an array of " + std::to_string(count) + " items; with the " +
               std::to_string(array_items_) + " before it, that passes the limit of " +
               std::to_string(max_array_items) + " array items in one file");
        array_items_ += count;
        v.item_type = static_cast<GgufType>(item_type);
        std::vector<GgufValue> items;
        items.reserve(std::size_t(count));
        for (std::uint64_t j = 0; j < count; ++j) items.push_back(read_value(item_type, who, depth + 1));
        v.value = std::move(items);
        break;
      }
    }
    return v;
  }

  void read_alignment() {
    if (!metadata_.contains("general.alignment")) return;
    const GgufValue& v = metadata_.at("general.alignment");
    if (v.type != GgufType::U32)
      fail("metadata key \"general.alignment\" is " + v.type_string() + ", expected u32");
    alignment_ = std::get<std::uint64_t>(v.value);
    if (alignment_ == 0 || !std::has_single_bit(alignment_))
      fail("metadata key \"general.alignment\" is " + std::to_string(alignment_) + ", not a power of two");
  }

  void read_tensor_info(std::uint64_t i) {
    const std::size_t at = pos_;
    GgufTensor t;
    t.name = read_string("the name of tensor " + std::to_string(i));
    const std::string who = "tensor " + detail::quoted(t.name);
    if (t.name.empty()) fail("tensor " + std::to_string(i) + " at byte " + std::to_string(at) + " has an empty name");
    if (index_.count(t.name)) fail(who + " at byte " + std::to_string(at) + " appears twice");
    const auto n_dims = read<std::uint32_t>("the dimension count of " + who);
    if (n_dims > 4) fail(who + " has " + std::to_string(n_dims) + " dimensions (ggml allows at most 4)");
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto n = read<std::uint64_t>("dimension " + std::to_string(d) + " of " + who);
      if (n > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        fail(who + " has dimension " + std::to_string(d) + " of size " + std::to_string(n) + ", too large");
      t.ne.push_back(std::int64_t(n));
    }
    const auto type = read<std::uint32_t>("the ggml type of " + who);
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info) fail(who + " has unknown ggml type id " + std::to_string(type));
    t.type = static_cast<GgmlType>(type);
    t.offset = read<std::uint64_t>("the data offset of " + who);
    if (row_length(t) % info->block_size != 0)
      fail(who + " of type " + std::string(info->name) + " has row length " + std::to_string(row_length(t)) +
           ", not a multiple of its block size " + std::to_string(info->block_size));
    if (t.offset % alignment_ != 0)
      fail(who + " has data offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
           std::to_string(alignment_));
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // A scalar (no dimensions) is one row of length 1.
  static std::int64_t row_length(const GgufTensor& t) { return t.ne.empty() ? 1 : t.ne[0]; }

  // Bytes of a tensor's data, or false if they overflow.
  static bool byte_size(const GgufTensor& t, std::uint64_t& out) {
    const GgmlTypeInfo* info = ggml_type_info(std::uint32_t(t.type));
    std::uint64_t n = 0;
    if (__builtin_mul_overflow(std::uint64_t(row_length(t) / info->block_size), std::uint64_t(info->block_bytes), &n))
      return false;
    for (std::size_t d = 1; d < t.ne.size(); ++d)
      if (__builtin_mul_overflow(n, std::uint64_t(t.ne[d]), &n)) return false;
    if (n > std::uint64_t(std::numeric_limits<std::int64_t>::max())) return false;
    out = n;
    return true;
  }

  void place_tensors() {
    data_start_ = (std::uint64_t(pos_) + alignment_ - 1) / alignment_ * alignment_;
    if (tensors_.empty()) return;
    if (data_start_ > size())
      fail("the data section would start at byte " + std::to_string(data_start_) + ", past the end of the file (" +
           std::to_string(size()) + " bytes)");
    const std::uint64_t data_size = size() - data_start_;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    for (GgufTensor& t : tensors_) {
      const std::string who = "tensor " + detail::quoted(t.name);
      std::uint64_t bytes = 0;
      if (!byte_size(t, bytes)) fail(who + " is too large to address");
      if (t.offset > data_size || bytes > data_size - t.offset)
        fail(who + " data [" + std::to_string(t.offset) + ", " + std::to_string(t.offset) + " + " +
             std::to_string(bytes) + ") runs past the end of the data section (" + std::to_string(data_size) +
             " bytes)");
      t.bytes = std::span<const std::byte>(base() + data_start_ + t.offset, std::size_t(bytes));
      t.mapping = mapping_;
      ranges.emplace_back(t.offset, t.offset + bytes);
    }
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ranges[a] < ranges[b]; });
    // Sorted by start, a tensor overlaps an earlier one exactly when it starts
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
  }
};

// The elements of a tensor as float or bf16, in GGUF order (ne[0] fastest, which
// is row-major order for shape()). count must be the tensor's element count.
template <class T>
  requires std::same_as<T, float> || std::same_as<T, bf16>
void dequantize(const GgufFile& file, const GgufTensor& t, T* out, std::int64_t count) {
  auto fail = [&](const std::string& what) {
    throw Error(file.path().string() + ": tensor " + detail::quoted(t.name) + " " + what);
  };
  if (!can_dequantize(t.type))
    fail("has ggml type " + std::string(t.type_name()) + ", which ft cannot dequantize (supported: " +
         std::string(dequantizable_types) + ")");
  if (t.numel() != count)
    fail("has " + std::to_string(t.numel()) + " elements, but " + std::to_string(count) + " were asked for");
  if (count == 0) return;
  const std::int64_t row = t.ne.empty() ? 1 : t.ne[0];
  const GgmlTypeInfo* info = ggml_type_info(std::uint32_t(t.type));
  const std::int64_t row_bytes = row / info->block_size * info->block_bytes;
  std::vector<float> buffer(std::same_as<T, float> ? 0 : std::size_t(row));
  for (std::int64_t r = 0; r < count / row; ++r) {
    const std::byte* src = t.bytes.data() + r * row_bytes;
    if constexpr (std::same_as<T, float>) {
      dequantize_row(t.type, src, out + r * row, row);
    } else {
      dequantize_row(t.type, src, buffer.data(), row);
      for (std::int64_t i = 0; i < row; ++i) out[r * row + i] = bf16(buffer[std::size_t(i)]);
    }
  }
}

}  // namespace ft::io

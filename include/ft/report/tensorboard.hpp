#pragma once
// TensorBoardWriter: scalar curves (loss, learning rate, ...) written as a
// TensorBoard event file, with no protobuf library and no TensorFlow.
//
// The file is a TFRecord file: a sequence of records, each laid out as
//
//   u64  length of the data, little-endian
//   u32  masked CRC-32C of those 8 length bytes, little-endian
//   u8   data[length]
//   u32  masked CRC-32C of the data, little-endian
//
// where CRC-32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, initial
// value and final xor 0xFFFFFFFF) and "masked" means rotated right by 15 bits
// and then offset: ((crc >> 15) | (crc << 17)) + 0xa282ead8, modulo 2^32.
//
// Each record's data is one serialized tensorflow.Event protobuf message. Only
// the fields ft needs are written (field number, protobuf wire type):
//
//   Event    wall_time     1, fixed64 (an IEEE double: seconds since the Unix epoch)
//            step          2, varint  (int64)
//            file_version  3, length-delimited (string, "brain.Event:2")
//            summary       5, length-delimited (a Summary message)
//   Summary  value         1, length-delimited, repeated (a Value message)
//   Value    tag           1, length-delimited (string)
//            simple_value  2, fixed32 (an IEEE float)
//
// A field is written as its key, varint((number << 3) | wire type), then its
// payload: a varint, 8 or 4 little-endian bytes, or varint(length) and bytes.
// The first record of every file is an Event carrying only wall_time, step 0
// and file_version; every add_scalar() appends one Event with one Value.
//
// Why it is built this way: the format needs four field kinds and one checksum,
// so a dozen lines of encoder replace a dependency on protobuf, and the bytes
// are written explicitly little-endian, so the file is the same on any host.
// The file is named as TensorFlow names its own event files,
// events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>, so that
// `tensorboard --logdir` finds it; the counter keeps two writers of one process
// apart. Records are buffered by stdio; flush() makes them visible to a reader.
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "ft/core/error.hpp"

namespace ft::report {

namespace detail {
// Byte-at-a-time table of the reflected Castagnoli polynomial, built at compile time.
inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();
}  // namespace detail

// CRC-32C of n bytes. `crc` is the CRC of what came before, so that
// crc32c(b, nb, crc32c(a, na)) is the CRC of a followed by b.
inline std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = detail::crc32c_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

// TFRecord's masking of a stored CRC (so that a CRC of data holding CRCs stays strong).
constexpr std::uint32_t mask_crc32c(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline std::uint32_t masked_crc32c(const void* data, std::size_t n) { return mask_crc32c(crc32c(data, n)); }

// The tiny protobuf encoder: each function appends one field to `out`.
namespace proto {
enum class Wire : std::uint32_t { varint = 0, fixed64 = 1, bytes = 2, fixed32 = 5 };

inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
inline void put_key(std::string& out, std::uint32_t field, Wire wire) {
  put_varint(out, (std::uint64_t{field} << 3) | static_cast<std::uint32_t>(wire));
}
inline void put_int64(std::string& out, std::uint32_t field, std::int64_t v) {
  put_key(out, field, Wire::varint);
  put_varint(out, static_cast<std::uint64_t>(v));  // negatives take ten bytes, as in protobuf
}
inline void put_double(std::string& out, std::uint32_t field, double v) {
  put_key(out, field, Wire::fixed64);
  put_le(out, std::bit_cast<std::uint64_t>(v), 8);
}
inline void put_float(std::string& out, std::uint32_t field, float v) {
  put_key(out, field, Wire::fixed32);
  put_le(out, std::bit_cast<std::uint32_t>(v), 4);
}
inline void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, Wire::bytes);
  put_varint(out, bytes.size());
  out += bytes;
}
}  // namespace proto

class TensorBoardWriter {
public:
  explicit TensorBoardWriter(const std::filesystem::path& log_dir) {
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    if (ec) throw Error(log_dir.string() + ": cannot create the TensorBoard log directory (" + ec.message() + ")");
    path_ = log_dir / file_name();
    file_.reset(std::fopen(path_.c_str(), "wbx"));  // "x": never clobber another writer's file
    if (!file_) throw Error(path_.string() + ": cannot create the TensorBoard event file (" + std::strerror(errno) + ")");
    std::string event;
    proto::put_double(event, 1, now());
    proto::put_int64(event, 2, 0);
    proto::put_bytes(event, 3, "brain.Event:2");
    write_record(event);
    flush();
  }

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept = default;
  ~TensorBoardWriter() = default;  // fclose flushes what is buffered

  // One point of the curve `tag`, stamped with the current wall time. TensorBoard
  // stores scalars as float, so `value` is rounded to float here.
  void add_scalar(std::string_view tag, double value, std::int64_t step) {
    std::string value_msg;
    proto::put_bytes(value_msg, 1, tag);
    proto::put_float(value_msg, 2, static_cast<float>(value));
    std::string summary;
    proto::put_bytes(summary, 1, value_msg);
    std::string event;
    proto::put_double(event, 1, now());
    proto::put_int64(event, 2, step);
    proto::put_bytes(event, 5, summary);
    write_record(event);
  }

  // Hands buffered records to the OS, where a reader of the file sees them.
  void flush() {
    if (file_ && std::fflush(file_.get()) != 0)
      throw Error(path_.string() + ": cannot flush the TensorBoard event file (" + std::strerror(errno) + ")");
  }

  const std::filesystem::path& path() const { return path_; }

private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  static double now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  static std::string file_name() {
    static std::atomic<std::uint64_t> counter{0};
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) != 0 || host[0] == '\0') std::strcpy(host.data(), "localhost");
    return "events.out.tfevents." + std::to_string(seconds) + "." + host.data() + "." + std::to_string(::getpid()) +
           "." + std::to_string(counter.fetch_add(1));
  }

  void write_record(const std::string& data) {
    if (!file_) throw Error("TensorBoardWriter: this writer was moved from; write through the one it was moved to");
    std::string record;
    record.reserve(data.size() + 16);
    proto::put_le(record, data.size(), 8);
    proto::put_le(record, masked_crc32c(record.data(), 8), 4);
    record += data;
    proto::put_le(record, masked_crc32c(data.data(), data.size()), 4);
    if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size())
      throw Error(path_.string() + ": cannot write to the TensorBoard event file (" + std::strerror(errno) + ")");
  }

  std::filesystem::path path_;
  std::unique_ptr<std::FILE, Close> file_;
};

}  // namespace ft::report

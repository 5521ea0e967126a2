#include "ft/data/compressed.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ft/core/error.hpp"

namespace ft::data {

namespace {

constexpr std::size_t chunk = 1 << 20;

// An unlinked file in TMPDIR (or /tmp) that the decompressed bytes are appended to.
class Spill {
public:
  explicit Spill(const std::filesystem::path& source) : source_(source) {
    const char* dir = std::getenv("TMPDIR");
    const std::string where = dir && *dir ? dir : "/tmp";
    fd_ = ::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
      // A file system (or kernel) without unnamed files: a named one, unlinked at once, is as private.
      std::string name = where + "/ft-decompressed-XXXXXX";
      fd_ = ::mkostemp(name.data(), O_CLOEXEC);
      if (fd_ >= 0) ::unlink(name.c_str());
    }
    if (fd_ < 0)
      throw Error(source.string() + ": cannot make a temporary file in " + where + " to decompress into (" +
                  std::strerror(errno) + "); set TMPDIR to a writable directory");
  }
  ~Spill() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const char* data, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw Error(source_.string() + ": decompressing it into a temporary file failed after " +
                    std::to_string(size_) + " bytes (" + std::strerror(errno) + "); set TMPDIR to a disk with room");
      data += w;
      n -= std::size_t(w);
      size_ += std::size_t(w);
    }
  }
  std::shared_ptr<const io::MappedFile> map() const {
    if (size_ == 0) return std::make_shared<const io::MappedFile>(nullptr, 0);
    void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (address == MAP_FAILED)
      throw Error(source_.string() + ": its decompressed rows cannot be mapped (" + std::strerror(errno) + ")");
    return std::make_shared<const io::MappedFile>(address, size_);
  }

private:
  std::filesystem::path source_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

[[noreturn]] void bad_stream(const std::filesystem::path& file, const char* format, std::size_t offset,
                             const std::string& why) {
  throw Error(file.string() + ": " + format + " data " + why + " at compressed byte " + std::to_string(offset) +
              "; allowed: a whole " + format + " file of JSON Lines rows");
}

void gunzip(std::ifstream& in, const std::filesystem::path& file, Spill& out) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw Error(file.string() + ": zlib cannot start");  // 32: gzip header
  std::vector<char> input(chunk), output(chunk);
  std::size_t consumed = 0;  // compressed bytes before z.next_in
  int rc = Z_OK;
  bool ended = false;  // the last member ended
  try {
    for (;;) {
      if (z.avail_in == 0) {
        in.read(input.data(), std::streamsize(input.size()));
        z.avail_in = uInt(in.gcount());
        z.next_in = reinterpret_cast<Bytef*>(input.data());
        if (z.avail_in == 0) break;
      }
      do {
        z.avail_out = uInt(output.size());
        z.next_out = reinterpret_cast<Bytef*>(output.data());
        const uInt before = z.avail_in;
        rc = inflate(&z, Z_NO_FLUSH);
        consumed += before - z.avail_in;
        if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
          bad_stream(file, "gzip", consumed, std::string("is corrupt (") + (z.msg ? z.msg : "zlib error") + ")");
        out.write(output.data(), output.size() - z.avail_out);
        ended = rc == Z_STREAM_END;
        if (ended) inflateReset(&z);  // another member may follow
      } while (z.avail_out == 0 || (rc == Z_STREAM_END && z.avail_in > 0));
    }
  } catch (...) {
    inflateEnd(&z);
    throw;
  }
  inflateEnd(&z);
  if (!ended) bad_stream(file, "gzip", consumed, "ends early (the file is truncated)");
}

void unzstd(std::ifstream& in, const std::filesystem::path& file, Spill& out) {
  ZSTD_DStream* z = ZSTD_createDStream();
  std::vector<char> input(ZSTD_DStreamInSize()), output(ZSTD_DStreamOutSize());
  std::size_t consumed = 0, hint = 1;
  try {
    for (;;) {
      in.read(input.data(), std::streamsize(input.size()));
      ZSTD_inBuffer buffer{input.data(), std::size_t(in.gcount()), 0};
      if (buffer.size == 0) break;
      // Until the input is used and the decoder holds nothing back (it filled less than the buffer).
      for (;;) {
        ZSTD_outBuffer produced{output.data(), output.size(), 0};
        const std::size_t before = buffer.pos;
        hint = ZSTD_decompressStream(z, &produced, &buffer);
        if (ZSTD_isError(hint))
          bad_stream(file, "zstd", consumed + before, std::string("is corrupt (") + ZSTD_getErrorName(hint) + ")");
        out.write(output.data(), produced.pos);
        if (buffer.pos == buffer.size && produced.pos < produced.size) break;
      }
      consumed += buffer.size;
    }
  } catch (...) {
    ZSTD_freeDStream(z);
    throw;
  }
  ZSTD_freeDStream(z);
  if (hint != 0) bad_stream(file, "zstd", consumed, "ends early (the file is truncated)");
}

}  // namespace

Compression compression_of(std::string_view first) {
  if (first.size() >= 2 && first[0] == '\x1f' && first[1] == '\x8b') return Compression::gzip;
  if (first.size() >= 4 && first.substr(0, 4) == std::string_view("\x28\xb5\x2f\xfd", 4)) return Compression::zstd;
  return Compression::none;
}

std::shared_ptr<const io::MappedFile> map_decompressed(const std::filesystem::path& file, Compression compression) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file.string() + ": cannot be opened (" + std::strerror(errno) + ")");
  Spill out(file);
  if (compression == Compression::gzip) gunzip(in, file, out);
  else if (compression == Compression::zstd) unzstd(in, file, out);
  return out.map();
}

}  // namespace ft::data

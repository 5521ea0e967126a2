#pragma once
// A whole file mapped read-only into memory. Weight files are read through
// mappings: the kernel pages in what is used, nothing is copied, and a view
// into the mapping stays valid for as long as someone holds the shared_ptr.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "ft/core/error.hpp"

namespace ft::io {

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
  int fd = -1;
  explicit FileDescriptor(int f) : fd(f) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

class MappedFile {
public:
  MappedFile(void* address, std::size_t size) : address_(address), size_(size) {}
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (address_) ::munmap(address_, size_);
  }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(address_), size_}; }

  // Drops the whole pages inside `bytes`, a part of this mapping, from this
  // process's memory; reading them again pages them back in from the file. A
  // reader that goes through a large file once calls it behind itself, so
  // that what it has read does not stay resident. Bytes that are not inside
  // the mapping are left alone.
  void release(std::span<const std::byte> bytes) const {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto base = reinterpret_cast<std::uintptr_t>(address_);
    const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data()), end = begin + bytes.size();
    if (begin < base || end > base + size_) return;
    const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }

private:
  void* address_;
  std::size_t size_;
};

// Maps `file`; `kind` names what the file should be ("a safetensors file") in
// errors. A file shorter than `min_size` bytes is refused before mapping, as
// "too short for <short_of>".
inline std::shared_ptr<const MappedFile> map_file_readonly(const std::filesystem::path& file, const std::string& kind,
                                                  std::size_t min_size, const std::string& short_of) {
  auto fail = [&](const std::string& what) -> void { throw Error(file.string() + ": " + what); };
  FileDescriptor d(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (d.fd < 0) fail(std::string("cannot be opened (") + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(d.fd, &st) != 0) fail(std::string("cannot be read (") + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) fail("is a directory, not " + kind);
  if (!S_ISREG(st.st_mode)) fail("is not a regular file");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < min_size || size == 0)
    fail("is " + std::to_string(size) + " bytes, too short for " + short_of);
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, d.fd, 0);
  if (address == MAP_FAILED) fail(std::string("cannot be mapped (") + std::strerror(errno) + ")");
  try {
    return std::make_shared<const MappedFile>(address, size);
  } catch (...) {
    ::munmap(address, size);
    throw;
  }
}

}  // namespace ft::io

#pragma once
// A look at a shared library's ELF headers before dlopen sees it. glibc maps
// the segments a header promises without checking them against the file's
// size, so a truncated library kills the process with SIGBUS inside dlopen
// instead of failing. Checking the headers first turns that into an error.
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace ft::plugin {

// Says what is wrong with a file as a shared library for this machine, or nothing.
inline std::optional<std::string> elf_problem(const std::filesystem::path& file) {
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) return "cannot be read: " + ec.message();
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr eh{};
  if (size < sizeof eh || !in.read(reinterpret_cast<char*>(&eh), sizeof eh))
    return "not a shared library: only " + std::to_string(size) + " bytes";
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "not a shared library: no ELF header";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF library";
  if (eh.e_type != ET_DYN) return "not a shared library: ELF type " + std::to_string(eh.e_type);
#if defined(__x86_64__)
  constexpr int machine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr int machine = EM_AARCH64;
#else
  constexpr int machine = -1;
#endif
  if (machine != -1 && eh.e_machine != machine)
    return "built for another processor (ELF machine " + std::to_string(eh.e_machine) + ")";
  auto truncated = [&](std::uint64_t end) {
    return "truncated: its headers reach byte " + std::to_string(end) + " but the file has " +
           std::to_string(size) + " bytes";
  };
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) return "corrupt program header table";
  const std::uint64_t ph_end = eh.e_phoff + std::uint64_t(eh.e_phnum) * eh.e_phentsize;
  if (eh.e_phoff > size || ph_end > size) return truncated(ph_end);
  if (eh.e_shnum) {
    const std::uint64_t sh_end = eh.e_shoff + std::uint64_t(eh.e_shnum) * eh.e_shentsize;
    if (eh.e_shoff > size || sh_end > size) return truncated(sh_end);
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  in.seekg(static_cast<std::streamoff>(eh.e_phoff));
  if (!in.read(reinterpret_cast<char*>(ph.data()), static_cast<std::streamsize>(ph.size() * sizeof(Elf64_Phdr))))
    return truncated(ph_end);
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
    const std::uint64_t end = p.p_offset + p.p_filesz;
    if (p.p_offset > size || end > size || end < p.p_offset) return truncated(end);
  }
  return std::nullopt;
}

// The libraries a shared library names as needed (its DT_NEEDED entries),
// read from its dynamic section without loading it; empty when the file
// has none or is not a library elf_problem accepts, or when what its
// headers say does not fit in the file.
inline std::vector<std::string> needed_libraries(const std::filesystem::path& file) {
  if (elf_problem(file)) return {};
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(file, ec);
  if (ec) return {};
  std::ifstream in(file, std::ios::binary);
  auto read_at = [&](std::uint64_t offset, void* to, std::uint64_t bytes) {
    if (offset > size || bytes > size - offset) return false;
    in.seekg(static_cast<std::streamoff>(offset));
    return bool(in.read(static_cast<char*>(to), static_cast<std::streamsize>(bytes)));
  };
  Elf64_Ehdr eh{};
  if (!read_at(0, &eh, sizeof eh)) return {};
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read_at(eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr))) return {};
  // The dynamic section gives the string table by address; a loaded segment maps it to the file.
  auto file_offset = [&](std::uint64_t address) -> std::optional<std::uint64_t> {
    for (const Elf64_Phdr& p : ph)
      if (p.p_type == PT_LOAD && address >= p.p_vaddr && address - p.p_vaddr < p.p_filesz)
        return address - p.p_vaddr + p.p_offset;
    return std::nullopt;
  };
  std::vector<std::string> out;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_DYNAMIC || p.p_filesz > size) continue;
    std::vector<Elf64_Dyn> dynamic(p.p_filesz / sizeof(Elf64_Dyn));
    if (!read_at(p.p_offset, dynamic.data(), dynamic.size() * sizeof(Elf64_Dyn))) return {};
    std::uint64_t strtab = 0, strsz = 0;
    for (const Elf64_Dyn& d : dynamic) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
      if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    }
    const auto strings_at = file_offset(strtab);
    if (!strings_at || strsz == 0 || *strings_at > size || strsz > size - *strings_at) return {};
    std::string strings(strsz, '\0');
    if (!read_at(*strings_at, strings.data(), strings.size())) return {};
    for (const Elf64_Dyn& d : dynamic) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED && d.d_un.d_val < strings.size()) out.emplace_back(strings.c_str() + d.d_un.d_val);
    }
  }
  return out;
}

// Whether a library needs CUDA's runtime or libraries (cudart, cuBLAS,
// NCCL, cuDNN): loading one maps hundreds of MiB, which a run on the CPU
// need not pay.
inline bool needs_cuda(const std::filesystem::path& file) {
  for (const std::string& name : needed_libraries(file))
    for (const char* prefix : {"libcudart.", "libcuda.", "libcublas", "libnccl.", "libcudnn"})
      if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace ft::plugin

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

}  // namespace ft::plugin

#include "control/appended_lines.hpp"

#include <algorithm>
#include <fstream>
#include <system_error>

namespace ftrun::control {

AppendedLines::AppendedLines(std::filesystem::path file, std::uintmax_t offset)
    : file_(std::move(file)), offset_(offset) {}

AppendedLines AppendedLines::at_end(std::filesystem::path file) {
  std::error_code ec;
  std::uintmax_t end = std::filesystem::file_size(file, ec);
  if (ec) return AppendedLines(std::move(file), 0);  // no file yet: it is all new
  // After the last complete line: a line torn by a kill is cut off by the run
  // that resumes, which then writes from there.
  std::ifstream in(file, std::ios::binary);
  char block[4096];
  while (end > 0) {
    const std::uintmax_t begin = end > sizeof block ? end - sizeof block : 0;
    in.seekg(std::streamoff(begin));
    in.read(block, std::streamsize(end - begin));
    if (in.gcount() != std::streamsize(end - begin)) break;
    const std::string_view text(block, std::size_t(end - begin));
    if (const auto newline = text.rfind('\n'); newline != std::string_view::npos) return AppendedLines(std::move(file), begin + newline + 1);
    end = begin;
  }
  return AppendedLines(std::move(file), 0);
}

void AppendedLines::read(const std::function<void(std::string_view)>& line, const std::function<void()>& restarted,
                         std::uintmax_t most) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(file_, ec);
  if (ec) return;
  if (size < offset_) {
    offset_ = 0;
    partial_.clear();
    if (restarted) restarted();
  }
  if (size == offset_) return;
  std::string chunk(std::size_t(std::min(size - offset_, most)), '\0');
  std::ifstream in(file_, std::ios::binary);
  in.seekg(std::streamoff(offset_));
  in.read(chunk.data(), std::streamsize(chunk.size()));
  chunk.resize(std::size_t(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  std::size_t begin = 0;
  for (std::size_t end; (end = partial_.find('\n', begin)) != std::string::npos; begin = end + 1)
    line(std::string_view(partial_.data() + begin, end - begin));
  partial_.erase(0, begin);
}

}  // namespace ftrun::control

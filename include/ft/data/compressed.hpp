#pragma once
// Dataset files compressed with gzip (.jsonl.gz) or zstd (.jsonl.zst, as The
// Pile ships), known by their first bytes. Their rows are decompressed as a
// stream, a buffer at a time, into an unlinked temporary file (in TMPDIR) that
// is then mapped as a plain file is: memory stays that of a plain file
// whatever the size, the rows are read by the one reader of plain files, and
// the temporary file's disk space is returned when the mapping goes. Several
// concatenated gzip members or zstd frames read as one stream (what pigz
// and zstd -T write). Compiled once, in ft::data, with zlib and libzstd.
#include <filesystem>
#include <memory>
#include <string_view>

#include "ft/io/mapped_file.hpp"

namespace ft::data {

enum class Compression { none, gzip, zstd };

// By the file's first bytes, not its name.
Compression compression_of(std::string_view first_bytes);

// `file` decompressed and mapped. A stream that ends early, or bytes that are
// not the format's, are an ft::Error naming the file and the compressed byte
// offset where reading stopped.
std::shared_ptr<const io::MappedFile> map_decompressed(const std::filesystem::path& file, Compression compression);

}  // namespace ft::data

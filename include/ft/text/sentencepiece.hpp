#pragma once
// Models that ship SentencePiece's tokenizer.model and no tokenizer.json
// (OpenLLaMA, early Llama conversions, many Llama 2 fine-tunes).
// transformers 5 has no slow tokenizer: it reads the model's protobuf and
// builds a `tokenizers` pipeline from it as its LlamaTokenizer does. ft builds
// the same pipeline, as tokenizer.json would state it, so that the
// Tokenizer reading it gives transformers' ids:
//   model          BPE over the pieces in their order (id = index), with byte
//                  fallback and fused unknowns; the merges are every split of
//                  a piece into two pieces, in the order of the piece's id
//                  and then of the split (transformers' generate_merges)
//   pre_tokenizer  Metaspace without splitting; "▁" is prepended to the
//                  first stretch (to every stretch between added tokens
//                  under `legacy`; to none without add_prefix_space)
//   decoder        ▁ to space, byte fallback, fuse, and the prefix space
//                  stripped when one was added
//   post_processor BOS and EOS as add_bos_token / add_eos_token say
//   added tokens   unk, bos, eos (and pad) tokens and added_tokens_decoder
//                  from tokenizer_config.json, SentencePiece's control
//                  pieces (special) and user-defined ones (not special)
// Only BPE models are read: a Unigram model (T5, ALBERT, XLNet) is refused
// in one line, as is a tokenizer_config.json naming a tokenizer class other
// than Llama's, whose pipeline would differ.
#include <filesystem>

#include <nlohmann/json_fwd.hpp>

#include "ft/core/error.hpp"

namespace ft::text {

// tokenizer.json's content for `model_file` read with `tokenizer_config`
// (tokenizer_config.json's object; empty for none). Throws ft::Error naming
// the file for a file that is not a SentencePiece model, or one ft cannot read.
nlohmann::json tokenizer_json_from_sentencepiece(const std::filesystem::path& model_file,
                                                 const nlohmann::json& tokenizer_config);

}  // namespace ft::text

#pragma once
// A tokenised training example and the options that make one from a dataset
// row (examples.hpp reads the rows). Apart from the readers, so that what
// holds examples (token corpora, batch plans, the training engine) does not
// pull the readers' range library into every translation unit.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ft/core/error.hpp"

namespace ft::data {

inline constexpr std::int32_t ignore_label = -100;

struct Example {
  std::vector<std::int32_t> input_ids, labels;  // same length; labels: ignore_label = not scored
  std::int64_t line = 0;                        // where the row starts in its file (1-based)
};

// The row keys each format reads.
struct FieldNames {
  std::string instruction = "instruction", input = "input", output = "output";  // alpaca
  std::string messages = "messages";                                            // chat (role, content inside)
  std::string text = "text";                                                    // text, guanaco
  std::string input_ids = "input_ids", labels = "labels";                       // tokens
  std::string prompt = "prompt", chosen = "chosen", rejected = "rejected";      // preference
};

struct ExampleOptions {
  std::string format = "alpaca";      // alpaca | chat | text | guanaco | tokens | preference
  FieldNames fields;
  std::string response_template;      // text: score only what follows it ("" scores everything)
  std::string instruction_template;   // text, with response_template: where a scored part ends
  std::int64_t max_seq_length = 512;  // longer examples are truncated
  std::string on_bad_row = "fail";    // fail: the first bad row is an error; skip: count and go on
  // preference: whose tokenisation of a pair to follow, TRL's DPOTrainer's
  // (dpo) or its CPOTrainer's and ORPOTrainer's (cpo; ExampleBuilder::cpo_pair)
  std::string pair_tokenisation = "dpo";
  // tokens: the ids a row may hold, the model's embedding rows (config.json's
  // vocab_size), which may exceed the tokenizer's size; 0: the tokenizer's size.
  std::int64_t token_id_limit = 0;
};

struct Examples {
  std::vector<Example> rows;
  std::int64_t skipped = 0;
  std::vector<std::string> first_skips;  // the messages of the first few skipped rows
};

// A row that on_bad_row = "skip" may skip. Its message has no location;
// read_examples() prefixes "<file>:<line>: ".
class BadRow : public Error {
public:
  using Error::Error;
};

// Stanford Alpaca's prompt (its train.py): the response follows "### Response:"
// directly.
inline std::string alpaca_prompt(std::string_view instruction, std::string_view input) {
  std::string p;
  if (input.empty()) {
    p = "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n";
  } else {
    p = "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
        "response that appropriately completes the request.\n\n";
  }
  p.append("### Instruction:\n").append(instruction).append("\n\n");
  if (!input.empty()) p.append("### Input:\n").append(input).append("\n\n");
  p.append("### Response:");
  return p;
}

}  // namespace ft::data

// ft::text::Tokenizer: the public face of HF's tokenizer pipeline, compiled once here.
#include "ft/text/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "ft/text/tokenizer/pipeline.hpp"

namespace ft::text {

using tokenization::Pipeline;

Tokenizer::Tokenizer(std::unique_ptr<Pipeline> pipeline) : pipeline_(std::move(pipeline)) {}
Tokenizer::Tokenizer(const Tokenizer& other) : pipeline_(std::make_unique<Pipeline>(*other.pipeline_)) {}
Tokenizer& Tokenizer::operator=(const Tokenizer& other) {
  if (this != &other) pipeline_ = std::make_unique<Pipeline>(*other.pipeline_);
  return *this;
}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return Tokenizer(std::make_unique<Pipeline>(Pipeline::from_file(tokenizer_json)));
}
Tokenizer Tokenizer::from_json(const nlohmann::json& tokenizer_json, const std::string& origin) {
  return Tokenizer(std::make_unique<Pipeline>(Pipeline::from_json(tokenizer_json, origin)));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return pipeline_->encode(text, add_special_tokens);
}
std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  return pipeline_->decode(ids, skip_special_tokens);
}
std::int32_t Tokenizer::vocab_size() const { return pipeline_->vocab_size(); }
std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const { return pipeline_->token_to_id(token); }
std::string Tokenizer::id_to_token(std::int32_t id) const { return pipeline_->id_to_token(id); }
bool Tokenizer::is_special(std::int32_t id) const { return pipeline_->is_special(id); }
std::vector<std::pair<std::int32_t, AddedToken>> Tokenizer::added_tokens() const { return pipeline_->added_tokens(); }
int Tokenizer::add_tokens(std::span<const AddedToken> tokens) { return pipeline_->add_tokens(tokens); }
int Tokenizer::add_tokens(std::span<const std::string> contents, bool special) {
  return pipeline_->add_tokens(contents, special);
}

}  // namespace ft::text

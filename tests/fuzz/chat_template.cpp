// Fuzz target: chat templates from arbitrary bytes, parsed and rendered against
// a fixed conversation (system, user, assistant with tool calls and reasoning,
// a tool result, multimodal content) with tools and extra variables. The only
// accepted failure is ft::Error: a syntax error, a template error, or one of
// the rendering limits (kept small here, so runaway loops, recursion and
// growth end fast).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <ft/text/chat_template.hpp>

namespace {

const nlohmann::ordered_json& messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Héllo \"wörld\" {{ x }} 🎉\n"},
    {"role": "assistant", "content": "<think>hm</think>ok", "reasoning_content": "hm",
     "tool_calls": [{"id": "call12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 22.5}"},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and this?"}]}
  ])");
  return m;
}

const ft::text::ChatOptions& options() {
  static const ft::text::ChatOptions o = [] {
    ft::text::ChatOptions opts;
    opts.add_generation_prompt = true;
    opts.bos_token = "<s>";
    opts.eos_token = "</s>";
    opts.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather.", "parameters": {"type": "object", "properties": {"location": {"type": "string"},
      "days": {"type": ["integer", "null"]}}, "required": ["location"]}}}])");
    opts.variables = {{"date_string", "01 Jan 2025"}, {"enable_thinking", false}};
    opts.limits.max_output_bytes = 1 << 20;
    opts.limits.max_steps = 2'000'000;
    opts.limits.max_call_depth = 50;
    return opts;
  }();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto t = ft::text::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    ft::text::render_chat(t, messages(), options());
  } catch (const ft::Error&) {
  }
  return 0;
}

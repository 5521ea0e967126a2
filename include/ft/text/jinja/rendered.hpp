#pragma once
// What a chat template's caller sets and gets back: the limits a rendering
// keeps to, and the rendered text (public, as ft/text/chat_template.hpp's
// API; the engine itself is compiled into the ft_text library).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft::text::jinja {

struct Limits {
  // The rendered text, and every string or list built along the way.
  std::size_t max_output_bytes = std::size_t(64) << 20;
  // Steps of work (jinja/budget.hpp): a second or two of rendering at most.
  std::uint64_t max_steps = 20'000'000;
  // Macro calls in progress at once (recursion).
  std::size_t max_call_depth = 100;
};

struct Rendered {
  std::string text;
  // [begin, end) byte offsets in `text` of what {% generation %} blocks produced.
  std::vector<std::pair<std::size_t, std::size_t>> generation_spans;
};

}  // namespace ft::text::jinja

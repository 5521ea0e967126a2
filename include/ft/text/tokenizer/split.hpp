#pragma once
// Splitting a piece on the matches of a pattern, with HF's five behaviours for
// what happens to a match ("delimiter"): Removed, Isolated (its own piece),
// MergedWithPrevious, MergedWithNext, Contiguous (runs of matches, and runs of
// non-matches, become one piece each). The text is first cut into alternating
// match / non-match spans exactly as HF does it, empty matches included,
// because the merging rules look at neighbouring spans; empty pieces are
// dropped at the end, as HF drops them.
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ft/text/tokenizer/json_node.hpp"
#include "ft/text/tokenizer/regex.hpp"

namespace ft::text::tokenization {

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

inline SplitBehavior parse_split_behavior(const JsonNode& node) {
  const std::string name = node.string();
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  node.fail("unknown split behavior " + quote(name) +
            " (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

// Calls emit(start, end) for each non-empty piece of `text`.
template <class Emit>
void split_on(const Regex& pattern, std::string_view text, SplitBehavior behavior, bool invert, Emit&& emit) {
  if (behavior == SplitBehavior::isolated) {  // every span is a piece: no need to collect them
    std::size_t previous = 0;
    pattern.for_each_match(text, [&](std::size_t start, std::size_t end) {
      if (previous < start) emit(previous, start);
      if (start < end) emit(start, end);
      previous = end;
    });
    if (previous < text.size()) emit(previous, text.size());
    return;
  }
  struct Span {
    std::size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  std::size_t previous = 0;
  pattern.for_each_match(text, [&](std::size_t start, std::size_t end) {
    if (previous != start) spans.push_back({previous, start, invert});
    spans.push_back({start, end, !invert});
    previous = end;
  });
  if (previous != text.size()) spans.push_back({previous, text.size(), invert});

  std::vector<Span> pieces;  // is_match now means "remove"
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::removed: pieces = std::move(spans); break;
    case SplitBehavior::contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !pieces.empty()) pieces.back().end = s.end;
        else pieces.push_back({s.start, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) pieces.back().end = s.end;
        else pieces.push_back({s.start, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) pieces.back().start = it->start;
        else pieces.push_back({it->start, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::isolated: break;
  }
  for (const Span& p : pieces)
    if (!p.is_match && p.start < p.end) emit(p.start, p.end);
}

}  // namespace ft::text::tokenization

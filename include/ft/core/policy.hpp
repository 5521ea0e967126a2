#pragma once
// Every policy tag (model family, precision, parallelism, optimizer, adapter)
// names itself twice: `name` is how a recipe spells it, `type_name` is how C++
// spells it. The plugin registry keys trainers by the first; error messages
// that show users how to build a missing combination use the second.
#include <concepts>
#include <string_view>

namespace ft {

template <class P>
concept named_policy = requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::type_name } -> std::convertible_to<std::string_view>;
};

}  // namespace ft

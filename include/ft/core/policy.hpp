#pragma once
// Every policy tag (model family, precision, parallelism, optimizer, adapter)
// names itself twice: `name` is how a recipe spells it, `type_name` is how C++
// spells it. The plugin registry keys trainers by the first; error messages
// that show users how to build a missing combination use the second.
#include <concepts>
#include <string_view>

namespace ft {

/// What every policy of a Trainer has: `name`, the word a recipe selects it
/// by, and `type_name`, the C++ type that error messages show.
/// @snippet third_party_plugin/my_plugin.cpp optimizer
template <class P>
concept named_policy = requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::type_name } -> std::convertible_to<std::string_view>;
};

}  // namespace ft

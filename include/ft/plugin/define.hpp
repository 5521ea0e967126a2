#pragma once
// Writing a plugin: list the Trainer types it offers and name it.
//
//     #include <ft/plugin/define.hpp>
//     FT_PLUGIN("my-plugin", "1.0.0",
//               ft::Trainer<ft::models::Llama, ft::precision::BF16Mixed, ft::parallel::Single,
//                           ft::optim::AdamW, ft::adapters::LoRA>)
//
// Arguments after the version are Trainer types or ft::plugin::trainers<...>
// lists (ft::plugin::product<...> builds the cross product of policy lists,
// and of devices when a sixth list names them). A plugin whose Trainers run
// on device::Cuda is a CUDA source: nvcc compiles it (plugins/cuda/).
// FT_PLUGIN defines the one exported entry point; build the library with
// ft_add_plugin() from the installed package so everything else stays hidden.
#include <array>
#include <exception>
#include <string>
#include <tuple>
#include <type_traits>

#include <boost/dll/alias.hpp>

#include "ft/core/error.hpp"
#include "ft/plugin/abi.h"
#include "ft/plugin/toolchain.hpp"
#include "ft/recipe/resolved.hpp"
#include "ft/train/trainer.hpp"
#include "ft/version.hpp"

namespace ft::plugin {

template <class... Trainers>
struct trainers {};

namespace detail {

template <class... Lists>
struct concat;
template <class... A>
struct concat<trainers<A...>> {
  using type = trainers<A...>;
};
template <class... A, class... B, class... Rest>
struct concat<trainers<A...>, trainers<B...>, Rest...> {
  using type = typename concat<trainers<A..., B...>, Rest...>::type;
};

// A Trainer type is a list of one; a list stays a list.
template <class T>
struct as_list {
  using type = trainers<T>;
};
template <class... T>
struct as_list<trainers<T...>> {
  using type = trainers<T...>;
};

template <class M, class P, class Par, class O, class A, class D>
using trainer_t = Trainer<M, P, Par, O, A, D>;

}  // namespace detail

// Flattens Trainer types and trainers<...> lists into one list.
template <class... Ts>
using flatten = typename detail::concat<typename detail::as_list<Ts>::type...>::type;

// Every Trainer<M, P, Par, O, A, D> with M from Models, P from Precisions, and so on.
template <class Models, class Precisions, class Parallelisms, class Optimizers, class Adapters, class Devices>
struct product_of;
template <class... M, class... P, class... Par, class... O, class... A, class... D>
struct product_of<std::tuple<M...>, std::tuple<P...>, std::tuple<Par...>, std::tuple<O...>,
                  std::tuple<A...>, std::tuple<D...>> {
  template <class m, class p, class par, class o, class a>
  using over_devices = trainers<detail::trainer_t<m, p, par, o, a, D>...>;
  template <class m, class p, class par, class o>
  using over_adapters = flatten<over_devices<m, p, par, o, A>...>;
  template <class m, class p, class par>
  using over_optimizers = flatten<over_adapters<m, p, par, O>...>;
  template <class m, class p>
  using over_parallelisms = flatten<over_optimizers<m, p, Par>...>;
  template <class m>
  using over_precisions = flatten<over_parallelisms<m, P>...>;
  using type = flatten<over_precisions<M>...>;
};
template <class Models, class Precisions, class Parallelisms, class Optimizers, class Adapters,
          class Devices = std::tuple<device::Cpu>>
using product = typename product_of<Models, Precisions, Parallelisms, Optimizers, Adapters, Devices>::type;

namespace detail {

template <class Model>
struct architectures {
  static constexpr auto c_strings = [] {
    std::array<const char*, Model::hf_architectures.size()> out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = Model::hf_architectures[i].data();
    return out;
  }();
};

// Runs `act` for the host and reports what it throws: no exception may cross
// into the host. With `classify`, a run tells bad input (2) and out of memory
// (3) from other failures (1); a plan reports every failure as 1. Compiled
// once per plugin.
using EntryAction = void (*)(const char* recipe_toml, ft_write_fn write, void* context);

inline int guarded(EntryAction act, bool classify, const char* recipe_toml, ft_write_fn write,
                   void* context) noexcept {
  try {
    act(recipe_toml, write, context);
    return 0;
  } catch (const ft::train::TrainingStopped& e) {
    write(context, e.what());
  } catch (const ft::OutOfMemory& e) {
    write(context, e.what());
    if (classify) return 3;
  } catch (const ft::Error& e) {  // bad input: recipe, model, data
    write(context, e.what());
    if (classify) return 2;
  } catch (const std::exception& e) {
    write(context, e.what());
  } catch (...) {
    write(context, "unknown error in plugin");
  }
  return 1;
}

// The C entry points of one Trainer type.
template <class T>
struct entry_points {
  static void write_plan(const char* recipe_toml, ft_write_fn write, void* context) {
    T trainer(recipe::read_resolved(recipe_toml));
    write(context, trainer.plan().c_str());
  }
  static void run(const char* recipe_toml, ft_write_fn, void*) { T(recipe::read_resolved(recipe_toml)).train(); }

  static int plan(const char* recipe_toml, ft_write_fn write, void* context) noexcept {
    return guarded(&write_plan, false, recipe_toml, write, context);
  }
  static int train(const char* recipe_toml, ft_write_fn write, void* context) noexcept {
    return guarded(&run, true, recipe_toml, write, context);
  }
};

template <class T>
constexpr ft_trainer_factory factory_for() {
  using M = typename T::model_type;
  return {M::name.data(),
          T::precision_type::name.data(),
          T::parallelism_type::name.data(),
          T::optimizer_type::name.data(),
          T::adapter_type::name.data(),
          T::device_type::name.data(),
          nullptr,  // type_name: filled in at first call, see descriptor_of
          architectures<M>::c_strings.data(),
          architectures<M>::c_strings.size(),
          &entry_points<T>::plan,
          &entry_points<T>::train};
}

template <class List>
struct descriptor_of;
template <class... T>
struct descriptor_of<trainers<T...>> {
  static const ft_plugin_descriptor* get(const char* name, const char* version) {
    static const std::array<std::string, sizeof...(T)> type_names{T::type_name()...};
    static const std::array<ft_trainer_factory, sizeof...(T)> factories = [] {
      std::array<ft_trainer_factory, sizeof...(T)> out{factory_for<T>()...};
      for (std::size_t i = 0; i < out.size(); ++i) out[i].type_name = type_names[i].c_str();
      return out;
    }();
    static const ft_plugin_descriptor descriptor{FT_PLUGIN_ABI_VERSION, FT_TOOLCHAIN_ID, name,  version,
                                                 FT_VERSION_STRING,     factories.size(),  factories.data()};
    return &descriptor;
  }
};

}  // namespace detail
}  // namespace ft::plugin

#define FT_PLUGIN(NAME, VERSION, ...)                                                          \
  namespace {                                                                                \
  const ft_plugin_descriptor* ft_plugin_entry_point() {                                      \
    return ::ft::plugin::detail::descriptor_of<::ft::plugin::flatten<__VA_ARGS__>>::get(NAME, \
                                                                                  VERSION);  \
  }                                                                                          \
  }                                                                                          \
  BOOST_DLL_ALIAS(ft_plugin_entry_point, ft_plugin_v)

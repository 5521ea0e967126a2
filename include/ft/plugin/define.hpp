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
// on device::Cuda is a CUDA source: nvcc compiles it (plugins/cuda_plugin.cu).
// For every model family and device among its Trainers, a plugin also
// offers inference engines in float32 and bfloat16 (what ftrun generate,
// chat and serve run).
// FT_PLUGIN defines the one exported entry point; build the library with
// ft_add_plugin() from the installed package so everything else stays hidden.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include <boost/dll/alias.hpp>

#include "ft/core/error.hpp"
#include "ft/device/answer.hpp"
#include "ft/infer/served.hpp"
#include "ft/models/read.hpp"
#include "ft/models/spec_json.hpp"
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

// A static array of names as C strings.
template <class Names>
constexpr auto c_strings(const Names& names) {
  std::array<const char*, std::tuple_size_v<Names>> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = names[i].data();
  return out;
}

// A family's names (its architectures, its modules) as the boundary hands them over.
template <class Model>
struct family_names {
  static constexpr auto architectures = c_strings(Model::hf_architectures);
  static constexpr auto linear_modules = c_strings(Model::linear_modules);
  static constexpr auto default_lora_targets = c_strings(Model::default_lora_targets);
};

// Runs `act` and reports what it throws to the host, classified: 0 done,
// 1 stopped (the loss diverged) or failed, 2 bad input (recipe, model,
// data), 3 out of memory, 4 stopped by a signal after saving. No exception
// may cross into the host.
template <class Act>
int classified(ft_write_fn write, void* context, Act&& act) noexcept {
  try {
    act();
    return 0;
  } catch (const ft::train::StoppedOnRequest& e) {
    write(context, e.what());
    return 4;
  } catch (const ft::train::TrainingStopped& e) {
    write(context, e.what());
  } catch (const ft::OutOfMemory& e) {
    write(context, e.what());
    return 3;
  } catch (const ft::Error& e) {
    write(context, e.what());
    return 2;
  } catch (const std::exception& e) {
    write(context, e.what());
  } catch (...) {
    write(context, "unknown error in plugin");
  }
  return 1;
}

// The Trainer a factory offers, as its policies assembled it (train/assembly.hpp).
inline const train::Assembly& assembly_of(const ft_trainer_factory* self) {
  return *static_cast<const train::Assembly*>(self->implementation);
}

// The two entry points every factory shares: they read the combination from
// the factory they are called with, so a plugin's thousand combinations are
// data, not code. A plan reports only whether it succeeded (1); a run every outcome.
inline int plan_trainer(const ft_trainer_factory* self, const char* recipe_toml, ft_write_fn write,
                        void* context) noexcept {
  std::string plan;
  const int status = classified(write, context, [&] {
    const train::Assembly& a = assembly_of(self);
    plan = train::describe_plan(a.set, train::resolve(a, recipe::read_resolved(recipe_toml)));
  });
  if (status != 0) return 1;
  write(context, plan.c_str());
  return 0;
}
inline int run_trainer(const ft_trainer_factory* self, const char* recipe_toml, ft_write_fn write,
                       void* context) noexcept {
  return classified(write, context, [&] {
    const train::Assembly& a = assembly_of(self);
    a.run(a, train::resolve(a, recipe::read_resolved(recipe_toml)));
  });
}

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
          family_names<M>::architectures.data(),
          family_names<M>::architectures.size(),
          &T::assembly(),
          &plan_trainer,
          &run_trainer};
}

// The C entry points of the inference engine of one model family, element
// type and device: the model, its Engine and an EngineDecoder with the caches.
template <class Model, class Device, element T>
struct engine_entry_points {
  static infer::Decoder& of(void* engine) { return static_cast<infer::Served*>(engine)->decoder(); }

  static int open(const char* dir, const char* options, void** engine, ft_write_fn write, void* context) noexcept {
    *engine = nullptr;
    return classified(write, context, [&] {
      device::require_answer<Device>("--device " + std::string(Device::name));
      *engine = infer::open_served<T, Device>(models::read_model_spec_of<Model>(dir), dir,
                                              infer::load_options_from_json(options))
                    .release();
    });
  }
  static void close(void* engine) noexcept { delete static_cast<infer::Served*>(engine); }
  static int load_adapter(void* engine, const char* dir, std::int32_t* index, ft_write_fn write,
                          void* context) noexcept {
    *index = -1;
    return classified(write, context, [&] { *index = of(engine).load_adapter(dir); });
  }
  static std::int64_t vocab_size(void* engine) noexcept { return of(engine).vocab_size(); }
  static std::int64_t virtual_tokens(void* engine, std::int32_t adapter) noexcept {
    return adapter < -1 || adapter >= of(engine).adapters() ? -1 : of(engine).virtual_tokens(adapter);
  }
  static int reserve(void* engine, std::int64_t max_model_len, std::int64_t slots, ft_write_fn write,
                     void* context) noexcept {
    return classified(write, context, [&] { of(engine).reserve(max_model_len, slots); });
  }
  // EngineDecoder answers these two without throwing, with or without caches.
  static std::uint64_t cache_bytes(void* engine) noexcept { return of(engine).bytes_per_sequence(); }
  static std::int64_t acquire(void* engine) noexcept { return of(engine).acquire(); }
  static int release(void* engine, std::int64_t slot, ft_write_fn write, void* context) noexcept {
    return classified(write, context, [&] { of(engine).release(slot); });
  }
  static int step(void* engine, const ft_sequence_step* steps, std::size_t count, float* logits, ft_write_fn write,
                  void* context) noexcept {
    return classified(write, context, [&] {
      std::vector<infer::SlotStep> slots;
      for (std::size_t i = 0; i < count; ++i)
        slots.push_back({steps[i].slot, {steps[i].tokens, steps[i].token_count}, steps[i].adapter, steps[i].every_position != 0});
      of(engine).step(slots, logits);
    });
  }
  static int score(void* engine, const std::int32_t* ids, const std::int32_t* labels, const std::int32_t* documents,
                   std::size_t count, const std::int64_t* logits_at, std::size_t logits_count, double* loss_sum,
                   std::int64_t* scored, float* logits, ft_write_fn write, void* context) noexcept {
    return classified(write, context, [&] {
      const infer::Score s = of(engine).score({{ids, count},
                                               {labels, labels ? count : 0},
                                               {documents, documents ? count : 0},
                                               {logits_at, logits_count}},
                                              logits);
      *loss_sum = s.loss_sum;
      *scored = s.scored;
    });
  }
};

template <element T>
constexpr std::string_view dtype_name = std::is_same_v<T, float> ? "float32" : "bfloat16";

template <class Model, class Device, element T>
constexpr ft_engine_factory engine_factory_for() {
  using E = engine_entry_points<Model, Device, T>;
  return {Model::name.data(),
          dtype_name<T>.data(),
          Device::name.data(),
          nullptr,  // type_name: filled in at first call, see descriptor_of
          family_names<Model>::architectures.data(),
          family_names<Model>::architectures.size(),
          &E::open,
          &E::close,
          &E::load_adapter,
          &E::vocab_size,
          &E::virtual_tokens,
          &E::reserve,
          &E::cache_bytes,
          &E::acquire,
          &E::release,
          &E::step,
          &E::score};
}

// "ft::infer::Engine<bfloat16, ft::device::Cuda> for ft::models::Llama"
template <class Model, class Device, element T>
std::string engine_type_name() {
  return "ft::infer::Engine<" + std::string(dtype_name<T>) + ", " + std::string(Device::type_name) + "> for " +
         std::string(Model::type_name);
}

// A model family's reading of a model directory, for ftrun's own commands.
template <class Model>
int describe(const char* dir, ft_write_fn write, void* context) noexcept {
  std::string spec;
  const int status = classified(write, context, [&] { spec = models::spec_to_json(models::read_model_spec_of<Model>(dir)); });
  if (status == 0) write(context, spec.c_str());
  return status;
}

template <class Model>
constexpr ft_model_family family_for() {
  return {Model::name.data(),
          Model::type_name.data(),
          family_names<Model>::architectures.data(),
          family_names<Model>::architectures.size(),
          family_names<Model>::linear_modules.data(),
          family_names<Model>::linear_modules.size(),
          family_names<Model>::default_lora_targets.data(),
          family_names<Model>::default_lora_targets.size(),
          &describe<Model>};
}

template <class Optimizer>
constexpr ft_optimizer_policy optimizer_for() {
  return {Optimizer::name.data(), Optimizer::type_name.data(), double(Optimizer::state_bytes),
          optim::elementwise_state_of<Optimizer> ? 1 : 0};
}

// Entries made per Trainer, each named policy once.
template <class Entry, std::size_t N>
std::vector<Entry> unique_by_name(const std::array<Entry, N>& all) {
  std::vector<Entry> out;
  for (const Entry& e : all)
    if (std::none_of(out.begin(), out.end(), [&](const Entry& o) { return std::string_view(o.name) == e.name; }))
      out.push_back(e);
  return out;
}

template <class List>
struct descriptor_of;
template <class... T>
struct descriptor_of<trainers<T...>> {
  static const ft_plugin_descriptor* get(const char* name, const char* version) {
    static constexpr std::array<ft_trainer_factory, sizeof...(T)> offered{factory_for<T>()...};
    static const std::vector<std::string> type_names = [] {
      std::vector<std::string> out;
      for (const ft_trainer_factory& f : offered) out.push_back(train::type_name(assembly_of(&f)));
      return out;
    }();
    static const std::array<ft_trainer_factory, sizeof...(T)> factories = [] {
      std::array<ft_trainer_factory, sizeof...(T)> out = offered;
      for (std::size_t i = 0; i < out.size(); ++i) out[i].type_name = type_names[i].c_str();
      return out;
    }();
    // One engine per model family, device and element type: every Trainer
    // names one family and device, so the list is deduplicated here.
    static const std::array<std::string, 2 * sizeof...(T)> engine_names{
        engine_type_name<typename T::model_type, typename T::device_type, float>()...,
        engine_type_name<typename T::model_type, typename T::device_type, bf16>()...};
    static const std::vector<ft_engine_factory> engines = [] {
      const std::array<ft_engine_factory, 2 * sizeof...(T)> all{
          engine_factory_for<typename T::model_type, typename T::device_type, float>()...,
          engine_factory_for<typename T::model_type, typename T::device_type, bf16>()...};
      std::vector<ft_engine_factory> out;
      auto same = [](const ft_engine_factory& a, const ft_engine_factory& b) {
        return std::string_view(a.model) == b.model && std::string_view(a.dtype) == b.dtype &&
               std::string_view(a.device) == b.device;
      };
      for (std::size_t i = 0; i < all.size(); ++i) {
        if (std::any_of(out.begin(), out.end(), [&](const ft_engine_factory& e) { return same(e, all[i]); })) continue;
        out.push_back(all[i]);
        out.back().type_name = engine_names[i].c_str();
      }
      return out;
    }();
    static const std::vector<ft_model_family> families =
        unique_by_name(std::array<ft_model_family, sizeof...(T)>{family_for<typename T::model_type>()...});
    static const std::vector<ft_optimizer_policy> optimizers =
        unique_by_name(std::array<ft_optimizer_policy, sizeof...(T)>{optimizer_for<typename T::optimizer_type>()...});
    static const ft_plugin_descriptor descriptor{
        FT_PLUGIN_ABI_VERSION, FT_TOOLCHAIN_ID,  name,          version,          FT_VERSION_STRING,
        factories.size(),      factories.data(), engines.size(), engines.data(), families.size(),
        families.data(),       optimizers.size(), optimizers.data()};
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

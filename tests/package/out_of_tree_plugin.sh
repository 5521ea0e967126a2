#!/usr/bin/env bash
# The installed package, used from outside: install ft to a fresh prefix, build
# examples/third_party_plugin and examples/custom_trainer against it with
# find_package(ft), then have the installed ftrun load and use the plugin.
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
ftrun=$prefix/bin/ftrun
test -x "$ftrun"
test -f "$prefix/include/ft/ft.hpp"

# Built without optimization (no build type): what is checked is the package
# and the plugin ABI, which do not depend on it, and it halves the compile.
for example in third_party_plugin custom_trainer; do
  cmake -S "$src/examples/$example" -B "$work/$example" -G Ninja \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE= >"$work/$example.configure.log"
  cmake --build "$work/$example" >"$work/$example.build.log"
done
plugin=$work/third_party_plugin/libmy_plugin.so

fail() { echo "FAIL: $*" >&2; exit 1; }

# The installed ftrun finds its stock plugins and loads the third-party one.
out=$("$ftrun" plugins --plugin "$plugin")
grep -q "^ft-cpu 0.1.0  ($prefix/" <<<"$out" || fail "installed ftrun does not list its stock plugins: $out"
grep -q "^my-plugin 0.3.0" <<<"$out" || fail "ftrun does not list my-plugin: $out"
grep -q "^  gpt_neox, bf16-mixed, single, sgd-nesterov, lora$" <<<"$out" || fail "combination missing: $out"

# A recipe selects the plugin's new optimizer by name, through FT_PLUGIN_PATH too.
recipe=$work/recipe.toml
cat >"$recipe" <<TOML
[model]
path = "$src/tests/fixtures/models/tiny-llama"
[data]
train = "$src/tests/fixtures/data/tiny.jsonl"
[strategy]
optimizer = "sgd-nesterov"
TOML
out=$(FT_PLUGIN_PATH=$work/third_party_plugin "$ftrun" train "$recipe" --dry-run)
grep -q "trainer      ft::Trainer<ft::models::Llama, ft::precision::FP32, ft::parallel::Single, my::NesterovSGD, ft::adapters::LoRA>" <<<"$out" \
  || fail "dry-run did not pick the plugin's trainer: $out"

# Without the plugin the name is unknown, with a located error and exit 2.
set +e
err=$("$ftrun" train "$recipe" --dry-run 2>&1 >/dev/null); code=$?
set -e
[ "$code" -eq 2 ] || fail "expected exit 2 without the plugin, got $code"
grep -q "^ftrun: $recipe:6:13: strategy.optimizer: no plugin offers the optimizer \"sgd-nesterov\"" <<<"$err" \
  || fail "unexpected error: $err"

# The custom trainer built from the installed headers alone.
out=$("$work/custom_trainer/custom_trainer" "$recipe" --set strategy.optimizer=adamw)
grep -q "ft::precision::BF16Mixed" <<<"$out" || fail "custom trainer: $out"

echo "out-of-tree plugin and custom trainer: passed"

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

# Every example, built without optimization (no build type): what is checked
# is the package and the plugin ABI, which do not depend on it, and it halves
# the compile. The two used below must be among them.
examples=$(cd "$src/examples" && ls -d */ | tr -d /)
for example in third_party_plugin custom_trainer; do
  grep -qx "$example" <<<"$examples" || { echo "FAIL: examples/$example is missing" >&2; exit 1; }
done
for example in $examples; do
  cmake -S "$src/examples/$example" -B "$work/$example" -G Ninja \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE= >"$work/$example.configure.log"
  cmake --build "$work/$example" >"$work/$example.build.log"
done
plugin=$work/third_party_plugin/libmy_plugin.so

fail() { echo "FAIL: $*" >&2; exit 1; }

# The installed ftrun finds its stock plugins and loads the third-party one.
out=$("$ftrun" plugins --plugin "$plugin")
grep -q "^ft-cpu 0.1.0  ($prefix/" <<<"$out" || fail "installed ftrun does not list its stock plugins: $out"
grep -q "^my-plugin 0.4.0" <<<"$out" || fail "ftrun does not list my-plugin: $out"
grep -q "^  gpt_neox, bf16-mixed, single, sgd-nesterov, lora$" <<<"$out" || fail "combination missing: $out"
grep -q "^  my-lm, fp32, single, sgd-nesterov, full$" <<<"$out" || fail "the plugin's family is not offered: $out"

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

# The plugin's own family, which ft does not know: ftrun's commands read a
# model of it through the plugin. A config.json of its keys, the tiny
# model's tokenizer beside it.
model=$work/my-lm
mkdir -p "$model"
cp "$src/models/ft-tiny-llama/tokenizer.json" "$src/models/ft-tiny-llama/tokenizer_config.json" "$model/"
cat >"$model/config.json" <<JSON
{"architectures": ["MyLMForCausalLM"], "vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128,
 "max_seq_len": 256, "bos_token_id": 1, "eos_token_id": 2}
JSON
# Without the plugin, init refuses the architecture in one line.
set +e
err=$("$ftrun" init "$model" 2>&1 >/dev/null); code=$?
set -e
[ "$code" -eq 2 ] || fail "init of an unknown architecture: expected exit 2, got $code"
grep -q "^ftrun: $model/config.json: architecture \"MyLMForCausalLM\" is read by no family" <<<"$err" \
  || fail "unexpected init error: $err"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "init's refusal is not one line: $err"
# With it, init writes the family's weights under the family's own names.
out=$("$ftrun" init "$model" --plugin "$plugin")
grep -q "^initialised 115008 parameters" <<<"$out" || fail "init: $out"
head -c 4096 "$model/model.safetensors" | grep -aq '"blocks.1.wq.weight"' || fail "init did not write the family's names"

# It trains with the plugin's optimizer, and its estimate is made from what the optimizer declares.
recipe_lm=$work/my-lm.toml
cat >"$recipe_lm" <<TOML
output_dir = "$work/my-lm-run"
[model]
path = "$model"
[data]
train = "$src/tests/fixtures/data/tiny.jsonl"
format = "alpaca"
max_seq_length = 256
[strategy]
optimizer = "sgd-nesterov"
adapter = "full"
[train]
per_device_train_batch_size = 2
learning_rate = 1e-2
max_steps = 4
logging_steps = 1
TOML
out=$("$ftrun" estimate "$recipe_lm" --plugin "$plugin")
grep -Eq "optimizer state +449.2 KiB +sgd-nesterov" <<<"$out" || fail "estimate of the plugin's optimizer: $out"
out=$("$ftrun" train "$recipe_lm" --plugin "$plugin" 2>&1)
grep -q "my::MyLM" <<<"$out" || fail "train did not run the plugin's family: $out"
test -f "$work/my-lm-run/model/model.safetensors" || fail "train wrote no model: $out"

# Models of it are evaluated and generate through the plugin's engines. A
# model drawn at std 0.02 predicts nearly uniformly: its loss is about ln 512.
printf '{"input_ids": [1, 5, 9, 14, 3, 7, 2]}\n{"input_ids": [1, 22, 8, 2]}\n' >"$work/eval.jsonl"
out=$("$ftrun" eval --model "$model" --data "$work/eval.jsonl" --json --plugin "$plugin")
grep -q '"tokens":9}' <<<"$out" || fail "eval: $out"
loss=$(sed 's/.*"loss":\([0-9.]*\).*/\1/' <<<"$out")
awk -v l="$loss" 'BEGIN { d = l - log(512); exit !(d > -0.1 && d < 0.1) }' || fail "eval of the initialised model: $out"
out=$("$ftrun" eval --model "$work/my-lm-run/model" --data "$work/eval.jsonl" --json --plugin "$plugin")
grep -q '"tokens":9}' <<<"$out" || fail "eval of the trained model: $out"
out=$("$ftrun" generate "$work/my-lm-run/model" --raw -p "Red" --max-tokens 4 --json --plugin "$plugin")
grep -q '"finish_reason":"length"' <<<"$out" || fail "generate: $out"
[ "$(grep -o '"token_ids":\[[0-9,]*\]' <<<"$out" | tr -cd ',' | wc -c)" -eq 3 ] || fail "generate gave not 4 tokens: $out"

# The custom trainer built from the installed headers alone.
out=$("$work/custom_trainer/custom_trainer" "$recipe" --set strategy.optimizer=adamw)
grep -q "ft::precision::BF16Mixed" <<<"$out" || fail "custom trainer: $out"

echo "out-of-tree plugin and custom trainer: passed"

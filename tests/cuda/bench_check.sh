#!/usr/bin/env bash
# ftrun bench on a GPU: a point that trains ft's tiny Llama on cuda records
# the gpu_* properties of ado's SFTTrainer actuator, sampled through NVML while it ran (utilisation
# and power above 0, memory in use between 0 and 100 percent). (A point on the
# CPU records them as 0: tests/cli/test_bench.cpp.) Exits 77 (skipped) where
# no GPU answers.
#
#   bench_check.sh FTRUN MODEL_DIR
set -euo pipefail
ftrun=$1
model=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ft_cuda_bench_XXXXXX")
trap 'rm -rf "$dir"' EXIT

cat >"$dir/base.toml" <<TOML
output_dir = "$dir/unused"
[model]
path = "$model"
[data]
train = "artificial:tokens-256-entries-4096"
format = "tokens"
max_seq_length = 256
[train]
per_device_train_batch_size = 16
max_steps = 200
[checkpoint]
save_strategy = "no"
TOML
cat >"$dir/grid.toml" <<TOML
recipe = "base.toml"
[space]
"strategy.device" = ["cuda"]
TOML
"$ftrun" bench "$dir/grid.toml" --output "$dir/results" >"$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }

# A column of results.csv (one run, one row) by its header.
column() {
  awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) at[$i] = i; next } { print $at[name] }' \
    "$dir/results/results.csv"
}
if [ "$(column is_valid)" != true ]; then
  if grep -q "no device of that kind answers" "$dir"/results/runs/*/stderr.txt; then
    echo "skipped: no GPU answers"
    exit 77
  fi
  cat "$dir/results/results.csv" "$dir"/results/runs/*/stderr.txt
  exit 1
fi

ok=true
check() {  # property test
  local value
  value=$(column "$1")
  if awk -v v="$value" "BEGIN { exit !($2) }"; then
    echo "$1 = $value"
  else
    echo "$1 = '$value', expected $2: FAIL"
    ok=false
  fi
}
check gpu_compute_utilization_max "v > 0 && v <= 100"
check gpu_compute_utilization_avg "v > 0 && v <= 100"
check gpu_memory_utilization_max "v > 0 && v <= 100"
check gpu_memory_utilization_peak "v > 0 && v <= 100"
check gpu_power_watts_avg "v > 0"
check gpu_power_percent_max "v > 0 && v <= 150"
$ok

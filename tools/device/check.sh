#!/usr/bin/env bash
# A device pass on a lent GPU machine: unpacks .device/ (tools/device/pack.sh)
# into build/release and runs ft's GPU checks and benchmarks against the CPU,
# HF and PyTorch there, within a time budget, most telling first:
#
#   device     nvidia-smi, cuda_device_check
#   functors   host functors against the same functors on the device
#   parity     training's HF parity (logits, loss, every gradient) on the device
#   generate   KV-cache generation on the device against HF's and PEFT's generate
#   ftrun      ftrun generate and serve with --device cuda against the CPU's text
#   train      ftrun train on the GPU against the CPU, every optimizer and adapter
#   bench      decode and prefill tokens/s, ft against transformers on the same GPU
#   step       a bf16 fine-tuning step's tokens/s and MFU (bench_cuda_train_step)
#
# Run through the device tool, carrying .device:
#   run(command: "BUDGET=480 bash tools/device/check.sh", carry: [".device"], timeout_s: 540)
# or name the steps: bash tools/device/check.sh generate ftrun bench
# Each step's output is in $OUT/logs.tgz; the summary is printed at the end.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
budget=${BUDGET:-480}
out=${OUT:-/tmp/ft-device-out}
logs=/tmp/ft-device-logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
steps=("$@")
((${#steps[@]})) || steps=(device functors parity generate ftrun train bench step)

# The programs, at the paths the build gave them, and the libraries they need.
mkdir -p build/release /tmp/ft-device-lib
tar -xJf .device/payload.tar.xz -C build/release
tar -xJf .device/libraries.tar.xz -C /tmp/ft-device-lib
bin=build/release/bin
ftrun=$bin/ftrun
cuda_libs=""
for lib in libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
  found="$(find /usr/local/cuda*/ /opt /usr/lib -name "$lib*" -print -quit 2>/dev/null)"
  [ -n "$found" ] && [[ "$cuda_libs:" != *":$(dirname "$found"):"* ]] && cuda_libs+=":$(dirname "$found")"
done
ft_libs="/tmp/ft-device-lib$cuda_libs"
# Python (transformers, torch) runs with the image's own libraries.
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
export LD_LIBRARY_PATH="$ft_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "pass of $(cat .device/commit 2>/dev/null || echo '?') on $(nvidia-smi -L 2>/dev/null | head -1)"
echo "libraries: $LD_LIBRARY_PATH"

results=()
# run_step NAME LIMIT COMMAND: runs the command (a string, which may call the
# functions below) with its output in logs/NAME.log, within the budget.
run_step() {
  local name=$1 limit=$2 command=$3
  local left=$((budget - SECONDS))
  if ((left < 20)); then
    results+=("$name: not run (budget spent)")
    return
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  echo "== $name (at most ${limit}s)"
  timeout --kill-after=5 "$limit" bash -c "$command" >"$logs/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$logs/$name.log"
  local verdict=passed
  ((rc == 0)) || verdict="FAILED (exit $rc)"
  ((rc == 77)) && verdict="skipped (exit 77)"
  ((rc == 124 || rc == 137)) && verdict="TIMED OUT"
  results+=("$name: $verdict in $((SECONDS - t0)) s")
}

tiny_models() {
  for m in ft-tiny-llama ft-tiny-neox; do
    [ -s models/$m/model.safetensors ] || "$ftrun" init models/$m --seed 0 --force >/dev/null || return 1
  done
}

# ftrun generate on the GPU against the CPU (greedy; fp32, then bf16), then
# ftrun serve on the GPU answering the openai routes, whole and streamed.
ftrun_on_device() {
  tiny_models || return 1
  local failed=0 model=models/ft-tiny-llama
  for dtype in float32 bfloat16; do
    local args=("$model" -p "The jargon file says" -p "hello" --max-tokens 24 --raw --dtype "$dtype" --json)
    "$ftrun" generate "${args[@]}" --device cpu >"$logs/generate_cpu_$dtype.jsonl" || failed=1
    "$ftrun" generate "${args[@]}" --device cuda >"$logs/generate_cuda_$dtype.jsonl" || failed=1
    if cmp -s "$logs/generate_cpu_$dtype.jsonl" "$logs/generate_cuda_$dtype.jsonl"; then
      echo "generate $dtype: the GPU's text is the CPU's"
    else
      echo "generate $dtype: the GPU's text differs from the CPU's:"
      diff "$logs/generate_cpu_$dtype.jsonl" "$logs/generate_cuda_$dtype.jsonl"
      [ "$dtype" = float32 ] && failed=1  # bf16 sums in another order may flip a near tie
    fi
  done
  "$ftrun" serve "$model" --served-model-name ft-tiny-llama --device cuda --port 0 >"$logs/serve.out" 2>&1 &
  local server=$!
  local url=""
  for _ in $(seq 100); do
    url="$(grep -o 'http://[^ ]*' "$logs/serve.out" | head -1)"
    [ -n "$url" ] && break
    sleep 0.2
  done
  [ -n "$url" ] || { echo "ftrun serve did not start:"; cat "$logs/serve.out"; kill $server; return 1; }
  py - "$url" <<'EOF' || failed=1
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()
whole = json.loads(post("/v1/completions", {"model": "ft-tiny-llama", "prompt": "hello", "max_tokens": 16}))
print("completion:", repr(whole["choices"][0]["text"]))
chat = json.loads(post("/v1/chat/completions", {"model": "ft-tiny-llama", "max_tokens": 16,
                                                "messages": [{"role": "user", "content": "hello"}]}))
print("chat:", repr(chat["choices"][0]["message"]["content"]))
events = [l for l in post("/v1/completions", {"model": "ft-tiny-llama", "prompt": "hello", "max_tokens": 16,
                                              "stream": True}).splitlines() if l.startswith("data: ")]
streamed = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
print("streamed:", repr(streamed), "in", len(events) - 1, "events")
assert streamed == whole["choices"][0]["text"], "the streamed text differs from the whole answer"
EOF
  kill -TERM $server
  wait $server
  return $failed
}

# Decode and prefill speed, ft against transformers on the same GPU and models.
bench_generate() {
  local failed=0
  [ -x "$bin/bench_cuda_generate" ] || { echo "no bench_cuda_generate: build with -DFT_BUILD_BENCH=ON"; return 1; }
  for shape in smollm2-135m llama-1b; do
    local dir=/tmp/ft-models/$shape
    [ -f "$dir/config.json" ] || py tools/make_random_model.py "$dir" --shape "$shape" || return 1
    echo "### $shape, bf16, ft"
    "$bin/bench_cuda_generate" "$dir" --dtype bfloat16 --batches 1,16 || failed=1
    echo "### $shape, bf16, transformers"
    py tools/bench_hf_generate.py "$dir" --device cuda --dtype bfloat16 --batches 1,16 || failed=1
  done
  return $failed
}

export bin ftrun logs
export -f py tiny_models ftrun_on_device bench_generate
for step in "${steps[@]}"; do
  case $step in
    device) run_step device 60 'nvidia-smi && "$bin/cuda_device_check"' ;;
    functors) run_step functors 120 '"$bin/cuda_functors"' ;;
    parity) run_step parity 180 '"$bin/cuda_parity" tests/fixtures' ;;
    generate) run_step generate 180 '"$bin/cuda_generate" tests/fixtures' ;;
    ftrun) run_step ftrun 180 ftrun_on_device ;;
    train) run_step train 240 'tiny_models && "$bin/cuda_train_check" "$ftrun" models/ft-tiny-llama' ;;
    bench) run_step bench 300 bench_generate ;;
    step) run_step step 120 '"$bin/bench_cuda_train_step" 5' ;;
    *) results+=("$step: unknown step") ;;
  esac
done

tar -czf "$out/logs.tgz" -C "$logs" .
echo "== summary (${SECONDS}s of ${budget}s)"
printf '%s\n' "${results[@]}"

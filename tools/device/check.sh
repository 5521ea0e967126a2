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
#   kernels    causal attention's TFLOP/s, forward and backward (bench_cuda_kernels)
#   profile    each kernel's time in a few decode steps, by Nsight Compute (ncu.csv)
#
# Run through the device tool, carrying .device:
#   run(command: "BUDGET=420 bash tools/device/check.sh", carry: [".device"], timeout_s: 480)
# or name the steps: bash tools/device/check.sh generate ftrun bench
# Each step's output is in $OUT/logs.tgz, written again after every step;
# the summary is printed at the end, and the exit status is 1 if a step failed.
# A GPU machine that makes a check exit 77 (no GPU seen) fails the pass.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
budget=${BUDGET:-420}
out=${OUT:-/tmp/ft-device-out}
logs=/tmp/ft-device-logs
rm -rf "$logs"
mkdir -p "$out" "$logs"
steps=("$@")
((${#steps[@]})) || steps=(device functors parity generate ftrun train bench step kernels)
save_logs() { tar -czf "$out/logs.tgz" -C "$logs" .; }

# The programs, at the paths the build gave them, and the libraries they need.
unpack() {  # ARCHIVE DIR: with tar's xz, or Python's where the image has no xz
  if command -v xz >/dev/null; then tar -xJf "$1" -C "$2"; else python3 -m tarfile -e "$1" "$2"; fi
}
mkdir -p build/release /tmp/ft-device-lib
unpack .device/payload.tar.xz build/release && unpack .device/libraries.tar.xz /tmp/ft-device-lib ||
  { echo "check: .device could not be unpacked"; exit 1; }
bin=build/release/bin
ftrun=$bin/ftrun

# The CUDA libraries pack.sh left behind (.device/needs), from the image:
# its Python's NVIDIA wheels first (what its torch runs on), then a toolkit.
cuda_dirs=()
while read -r soname; do
  found="$(python3 - "$soname" <<'EOF'
import glob, os, site, sys
for d in site.getsitepackages():
    for f in sorted(glob.glob(os.path.join(d, "nvidia", "**", sys.argv[1]), recursive=True)):
        print(os.path.dirname(f)); sys.exit()
EOF
)"
  [ -n "$found" ] || found="$(dirname "$(find -L /usr/local/cuda*/ /usr/lib /opt -name "$soname" -print -quit 2>/dev/null)")"
  [ "$found" != . ] && [[ " ${cuda_dirs[*]-} " != *" $found "* ]] && cuda_dirs+=("$found")
done <.device/needs
image_ldp=${LD_LIBRARY_PATH-}
ft_ldp=/tmp/ft-device-lib
for d in "${cuda_dirs[@]}"; do ft_ldp+=":$d"; done
ft_ldp+="${image_ldp:+:$image_ldp}"
# ft's programs run with the packed libraries; Python (torch, transformers) with the image's own.
export LD_LIBRARY_PATH="$ft_ldp"
py() {
  if [ -n "$image_ldp" ]; then LD_LIBRARY_PATH="$image_ldp" python3 "$@"; else env -u LD_LIBRARY_PATH python3 "$@"; fi
}
echo "pass of $(cat .device/commit 2>/dev/null || echo '?') on $(timeout 20 nvidia-smi -L 2>&1 | head -1)"
echo "libraries: $LD_LIBRARY_PATH"
ldd "$bin"/* build/release/lib/ft/plugins/*.so >"$logs/ldd.log" 2>&1
if grep -q "not found" "$logs/ldd.log"; then
  grep "not found" "$logs/ldd.log" | sort -u
  echo "check: libraries missing (above); the pass stops"
  save_logs
  exit 1
fi

results=()
failed=0
# run_step NAME LIMIT COMMAND: runs the command (a string, which may call the
# functions below) with its output in logs/NAME.log, within the budget.
run_step() {
  local name=$1 limit=$2 command=$3
  local left=$((budget - SECONDS)) cut="TIMED OUT"
  if ((left < 20)); then
    results+=("$name: not run (budget spent)")
    return
  fi
  ((limit > left)) && limit=$left cut="cut off at the budget"
  local t0=$SECONDS
  echo "== $name (at most ${limit}s)"
  timeout --kill-after=5 "$limit" bash -c "$command" >"$logs/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$logs/$name.log"
  local verdict=passed
  ((rc == 0)) || verdict="FAILED (exit $rc)"
  ((rc == 77)) && verdict="FAILED (exit 77: the check saw no GPU)"
  ((rc == 124 || rc == 137)) && verdict=$cut
  [ "$verdict" = passed ] || failed=1
  results+=("$name: $verdict in $((SECONDS - t0)) s")
  save_logs
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
    local cpu="$logs/generate_cpu_$dtype.jsonl" gpu="$logs/generate_cuda_$dtype.jsonl"
    "$ftrun" generate "${args[@]}" --device cpu >"$cpu" || failed=1
    "$ftrun" generate "${args[@]}" --device cuda >"$gpu" || failed=1
    if [ "$(wc -l <"$cpu")" != 2 ] || [ "$(wc -l <"$gpu")" != 2 ]; then
      echo "generate $dtype: not two answers from each device"
      failed=1
    elif cmp -s "$cpu" "$gpu"; then
      echo "generate $dtype: the GPU's text is the CPU's"
    else
      echo "generate $dtype: the GPU's text differs from the CPU's:"
      diff "$cpu" "$gpu"
      [ "$dtype" = float32 ] && failed=1  # bf16 sums in another order may flip a near tie
    fi
  done
  "$ftrun" serve "$model" --served-model-name ft-tiny-llama --device cuda --port 0 >"$logs/serve.out" 2>&1 &
  local server=$!
  local url=""
  for _ in $(seq 300); do
    url="$(grep -o 'http://[^ ]*' "$logs/serve.out" | head -1)"
    [ -n "$url" ] && break
    kill -0 $server 2>/dev/null || break
    sleep 0.2
  done
  if [ -n "$url" ]; then
    py - "$url" "$logs/generate_cuda_float32.jsonl" <<'EOF' || failed=1
import json, sys, urllib.error, urllib.request
url, generated = sys.argv[1], sys.argv[2]
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        sys.exit(f"{path}: HTTP {e.code}: {e.read().decode()}")
greedy = {"model": "ft-tiny-llama", "max_tokens": 24, "temperature": 0, "seed": 0}
whole = json.loads(post("/v1/completions", dict(greedy, prompt="hello")))["choices"][0]["text"]
print("completion:", repr(whole))
chat = json.loads(post("/v1/chat/completions", dict(greedy, messages=[{"role": "user", "content": "hello"}])))
print("chat:", repr(chat["choices"][0]["message"]["content"]))
streamed, done, events = "", False, 0
for line in post("/v1/completions", dict(greedy, prompt="hello", stream=True)).splitlines():
    if not line.startswith("data: "):
        continue
    if line == "data: [DONE]":
        done = True
        break
    events += 1
    streamed += "".join(c.get("text") or "" for c in json.loads(line[6:]).get("choices", []))
print("streamed:", repr(streamed), "in", events, "events")
assert done, "the stream did not end with [DONE]"
assert streamed == whole, "the streamed text differs from the whole answer"
with open(generated) as f:
    rows = [json.loads(l) for l in f]
assert whole == rows[1]["text"], f"the server's text differs from ftrun generate's: {rows[1]['text']!r}"
print("the server's greedy text is ftrun generate's")
EOF
  else
    echo "ftrun serve did not start:"
    cat "$logs/serve.out"
    failed=1
  fi
  kill -TERM $server 2>/dev/null
  for _ in $(seq 50); do kill -0 $server 2>/dev/null || break; sleep 0.2; done
  kill -KILL $server 2>/dev/null
  wait $server 2>/dev/null
  return $failed
}

# Decode and prefill speed, ft against transformers on the same GPU and models.
bench_generate() {
  local failed=0
  [ -x "$bin/bench_cuda_generate" ] || { echo "no bench_cuda_generate: build with -DFT_BUILD_BENCH=ON"; return 1; }
  for shape in smollm2-135m llama-1b; do
    local dir=/tmp/ft-models/$shape
    [ -f "$dir/model.safetensors" ] || py tools/make_random_model.py "$dir" --shape "$shape" || return 1
    echo "### $shape, bf16, ft"
    "$bin/bench_cuda_generate" "$dir" --dtype bfloat16 --batches 1,16 || failed=1
    echo "### $shape, bf16, transformers"
    py tools/bench_hf_generate.py "$dir" --device cuda --dtype bfloat16 --batches 1,16 || failed=1
  done
  return $failed
}

# Every kernel of a short generation (warm-up, a 128-token prefill, three
# decode steps at batch 1) timed by Nsight Compute, for where a step's time goes.
profile_decode() {
  local dir=/tmp/ft-models/smollm2-135m ncu
  ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)"
  [ -n "$ncu" ] || { echo "no ncu on this machine"; return 1; }
  [ -f "$dir/model.safetensors" ] || py tools/make_random_model.py "$dir" --shape smollm2-135m || return 1
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$logs/ncu.log" \
    "$bin/bench_cuda_generate" "$dir" --dtype bfloat16 --batches 1 --prompt 128 --decode 3 >"$logs/ncu.csv" || return 1
  cp "$logs/ncu.csv" "$logs/ncu.log" "$out/"
  cat "$logs/ncu.csv"
  grep -hc '"gpu__time_duration.sum"' "$logs/ncu.csv" "$logs/ncu.log"
}

export bin ftrun logs image_ldp out
export -f py tiny_models ftrun_on_device bench_generate profile_decode
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
    kernels) run_step kernels 90 '"$bin/bench_cuda_kernels" attention' ;;
    profile) run_step profile 150 profile_decode ;;
    *) results+=("$step: unknown step"); failed=1 ;;
  esac
done

save_logs
echo "== summary (${SECONDS}s of ${budget}s)"
printf '%s\n' "${results[@]}"
exit $failed

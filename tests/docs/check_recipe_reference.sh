#!/usr/bin/env bash
# docs/recipe-reference.md is `ftrun recipe --reference`'s output: a recipe key
# added, removed or redescribed without regenerating it fails here.
#   check_recipe_reference.sh FTRUN REFERENCE_MD
set -euo pipefail
ftrun=$1 reference=$2
if ! "$ftrun" recipe --reference | diff -u "$reference" -; then
  echo "$reference differs from 'ftrun recipe --reference' (above, - the file, + the declarations);" \
       "regenerate it: build/release/bin/ftrun recipe --reference > docs/recipe-reference.md" >&2
  exit 1
fi

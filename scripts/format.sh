#!/usr/bin/env bash
# Formats the tree, or checks that it is formatted: every tracked C++ file with clang-format
# (.clang-format), every tracked Python file with ruff's formatter and linter (pyproject.toml's
# [tool.ruff]). Both tools are the pinned ones of python/requirements.txt, taken from the virtual
# environment of PYTHON, so that every machine formats alike whatever its own clang-format is.
#
#   scripts/format.sh [--check] [PYTHON]
#     --check  change nothing; list what is not formatted and exit 1 if anything is
#     PYTHON   the environment's python (default: .venv/bin/python of the repository, `make venv`)
# `make test` runs the check as the ctest `format`; `make format` formats.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
python="${1:-$root/.venv/bin/python}"
bin="$(dirname "$python")"
for tool in clang-format ruff; do
  if [ ! -x "$bin/$tool" ]; then
    echo "scripts/format.sh: no $tool next to $python (python/requirements.txt pins it;" \
      "make the environment with \`make venv\`)" >&2
    exit 2
  fi
done

cd "$root"
mapfile -t cpp < <(git ls-files '*.cc' '*.h')
mapfile -t py < <(git ls-files '*.py')

if [ "$check" = 1 ]; then
  status=0
  "$bin/clang-format" --dry-run -Werror "${cpp[@]}" || status=1
  "$bin/ruff" format --check "${py[@]}" || status=1
  "$bin/ruff" check "${py[@]}" || status=1
  if [ "$status" != 0 ]; then
    echo "Not formatted: run scripts/format.sh (or make format) and commit the result." >&2
  fi
  exit "$status"
fi
"$bin/clang-format" -i "${cpp[@]}"
"$bin/ruff" check --fix --quiet "${py[@]}" || true
"$bin/ruff" format --quiet "${py[@]}"
# What the linter cannot fix by itself is left for a person, listed here.
"$bin/ruff" check "${py[@]}"

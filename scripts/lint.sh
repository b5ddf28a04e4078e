#!/usr/bin/env bash
# Lints the C++ of the library, the posenc command, the benchmarks and the Python bindings with
# clang-tidy and the checks of .clang-tidy (a set the tree passes; each one left out says why),
# using the pinned clang-tidy of python/requirements.txt from the virtual environment of PYTHON
# and the compile commands of the build directory BUILD. Exits 1 on any warning.
#
#   scripts/lint.sh BUILD [PYTHON]
#     BUILD   a configured build directory (CMake writes its compile_commands.json)
#     PYTHON  the environment's python (default: .venv/bin/python of the repository, `make venv`)
# `make test` runs it as the ctest `lint`. Tests (*_test.cc) and the study (libtorch's headers)
# are not linted.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: scripts/lint.sh BUILD [PYTHON]}" && pwd)"
python="${2:-$root/.venv/bin/python}"
tidy="$(dirname "$python")/clang-tidy"
if [ ! -x "$tidy" ]; then
  echo "scripts/lint.sh: no clang-tidy next to $python (python/requirements.txt pins it;" \
    "make the environment with \`make venv\`)" >&2
  exit 2
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "scripts/lint.sh: $build has no compile_commands.json (configure it with CMake first)" >&2
  exit 2
fi

cd "$root"
# The tracked sources that this build compiles (optional parts may be left out of it).
mapfile -t files < <(git ls-files 'src/*.cc' 'tools/*.cc' 'bench/*.cc' 'python/src/*.cc' |
  grep -v '_test\.cc$' |
  "$python" -c '
import json, os, sys
built = {os.path.realpath(e["file"]) for e in json.load(open(sys.argv[1]))}
for line in sys.stdin:
    if os.path.realpath(line.strip()) in built:
        print(line.strip())' "$build/compile_commands.json")
# OpenMP's omp.h lives with g++'s own headers, where clang does not look; only it is shown to
# clang (g++'s intrinsics headers are not clang's).
omp_dir="$(mktemp -d)"
trap 'rm -rf "$omp_dir"' EXIT
ln -s "$(g++ -print-file-name=include/omp.h)" "$omp_dir/omp.h"
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -n 4 "$tidy" -p "$build" --quiet --warnings-as-errors='*' \
    "--extra-arg=-isystem$omp_dir" 2> >(grep -v ' warnings\? generated\.$' >&2) || status=1
if [ "$status" != 0 ]; then
  echo "Lint: fix the warnings above (or, where a check is wrong for this code, say why in" \
    ".clang-tidy)." >&2
fi
exit "$status"

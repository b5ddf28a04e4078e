#!/usr/bin/env bash
# Makes the project's virtual environment, in which `make test` builds the Python extension and
# runs the Python tests: Debian's python3 with the pinned PyPI packages of python/requirements.txt
# and python/constraints.txt (torch with its CPU and CUDA libraries: about 3 GB to download, 5.6 GB
# on disk).
# Made once and reused: a stamp holds the hash of the pin files and of python3's version, and the
# environment is made again from scratch when they change. Needs python3-venv (scripts/setup.sh).
#
#   scripts/venv.sh [DIR]   DIR: the environment's folder (default .venv in the repository root)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$root/.venv}"
requirements="$root/python/requirements.txt"
constraints="$root/python/constraints.txt"
# Debian's interpreter, never another python3 that happens to be first on PATH.
python=/usr/bin/python3

stamp="$venv/posenc-pins.sha256"
wanted="$( (cat "$requirements" "$constraints"; "$python" --version) | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi

echo "posenc set-up: making the virtual environment $venv (python/requirements.txt)"
# From scratch: a stamp written last means a complete environment; anything else is made again.
# Only a virtual environment (its pyvenv.cfg) is removed, never another folder given by mistake.
if [ -e "$venv" ]; then
  if [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "scripts/venv.sh: $venv exists and is not a virtual environment (no pyvenv.cfg);" \
      "remove it or choose another VENV" >&2
    exit 2
  fi
  rm -rf "$venv"
fi
"$python" -m venv "$venv"
# Wheels only: nothing is compiled on the way, and every package is the pinned file.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
  -r "$requirements" -c "$constraints"
echo "$wanted" > "$stamp"

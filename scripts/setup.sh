#!/usr/bin/env bash
# Installs the Debian packages posenc needs, only those that are missing. Run as root (or with
# sudo available). Safe to run again: it does nothing when all packages are present.
#
#   scripts/setup.sh demo   what the library, the posenc tool and its demo need (make demo)
#   scripts/setup.sh        everything: also the tests, Python, the study, the fuzzers (make test)
# The Python tests' own packages (PyPI's torch, transformers, pytest) are scripts/venv.sh's.
set -euo pipefail

profile="${1:-all}"
case "$profile" in
  demo | all) ;;
  *) echo "scripts/setup.sh: profile must be 'demo' or 'all', got '$profile'" >&2; exit 2 ;;
esac

# The library, the posenc tool and its figures.
packages=(
  build-essential cmake        # compiler and build system
  libcli11-dev                 # command-line parsing for the posenc tool
  nlohmann-json3-dev           # Hugging Face config.json files, JSON output of the CLI
  gnuplot-nox                  # draws the demo's figures (PNG through cairo, and SVG)
  libhwy-dev                   # Google Highway: SIMD kernels with runtime CPU dispatch
  libsleef-dev                 # SLEEF: torch's float32 pow, for Hugging Face's exact RoPE bits
  libmicrohttpd-dev pkgconf    # posenc serve: the HTTP server, event-driven so slow clients hold no thread
  libjs-chart.js               # posenc serve: the charts of the explorer page
)
if [ "$profile" = all ]; then
  packages+=(
    libgtest-dev libgmock-dev    # unit tests
    libbenchmark-dev             # Google Benchmark: bench/posenc_benchmarks
    python3-dev pybind11-dev     # the Python extension module, built for Debian's python3 3.11
    python3-venv                 # the project's virtual environment (scripts/venv.sh: torch, pytest)
    python3-numpy                # numpy for Debian's python3: `make install`'s package, the README
    python3-pytest               # the explorer's browser test, run by Debian's python3 (Selenium)
    clang libclang-rt-14-dev     # libFuzzer (clang's -fsanitize=fuzzer) for fuzz/hf_config_fuzzer
    libomp-dev                   # OpenMP for the library when clang builds it for the fuzzer
    libtorch-dev                 # libtorch (C++): trains the models of the study (study/)
    libopenblas0-pthread         # OpenBLAS behind libtorch (the reference BLAS is several times slower)
    bible-kjv bible-kjv-text     # the study's text: the King James Bible and the `bible` reader
    libopenmpi-dev openmpi-bin   # Open MPI: `mpirun -n N posenc_study` spreads the study's runs (optional)
    chromium chromium-driver python3-selenium  # the explorer's test in a real (headless) browser
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "posenc set-up: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"

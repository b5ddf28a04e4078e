# posenc: `make demo` and `make test` set up what they need on Debian 12 (the packages in
# scripts/setup.sh, only those missing), configure, build and run. `make demo` installs and builds
# only the library and the posenc tool; `make test` everything, and first the project's Python
# virtual environment $(VENV) (scripts/venv.sh: the pinned PyPI torch, transformers and pytest of
# python/requirements.txt), in which the Python extension is built and the Python tests run.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PACKAGE_BUILD ?= build-package
FUZZ_SECONDS ?= 55
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
DEMO_DIR ?= posenc-demo
VENV ?= .venv
# The python3 that the build's extension is made for and its Python tests run with; empty: the one
# configured before, else CMake's default (CMakeLists.txt). `make test` sets it to $(VENV)'s.
BUILD_PYTHON ?=

.PHONY: all setup setup-demo venv configure build demo study test test-sanitizers test-fuzz \
  format lint install package clean

all: build

setup:
	@bash scripts/setup.sh

setup-demo:
	@bash scripts/setup.sh demo

# Made once (about 3 GB to download, 5.6 GB on disk), then reused until python/requirements.txt or
# python/constraints.txt change.
venv: setup
	@bash scripts/venv.sh $(VENV)

# Formats every C++ and Python file with the environment's pinned clang-format and ruff;
# `make test` checks the same (the ctest `format`).
format: venv
	@bash scripts/format.sh $(abspath $(VENV))/bin/python

# Lints the C++ with the environment's pinned clang-tidy and .clang-tidy's checks; `make test` runs
# the same (the ctest `lint`).
lint: venv configure
	@bash scripts/lint.sh $(BUILD) $(abspath $(VENV))/bin/python

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPOSENC_BUILD_TESTS=ON \
	  $(if $(BUILD_PYTHON),-DPython3_EXECUTABLE=$(BUILD_PYTHON)) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The lesson, reproduced: a report on stdout, figures and report.html in $(DEMO_DIR)/. Builds the
# library and the posenc tool only (a few minutes on 2 cores), in the same folder as `make build`.
demo: setup-demo
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target posenc_cli
	@./$(BUILD)/tools/posenc demo --out $(DEMO_DIR)

# The length-extrapolation study: trains and evaluates every arm (1 h 08 min on 2 cores of an
# Intel Xeon, Emerald Rapids), writes docs/STUDY.md and docs/study/*.png. Resumable: checkpoints
# and results stay in study-runs/. QUICK=1: the same pipeline on tiny settings in seconds, into
# study-runs-quick/.
study: build
	@./$(BUILD)/study/posenc_study $(if $(QUICK),--quick)

# All tests: unit, CLI and Python tests (in $(VENV)) and the installed-package consumers and
# wheel, the config loader under libFuzzer, then the unit tests once more under AddressSanitizer +
# UndefinedBehaviorSanitizer (last, so that the run closes on a test summary).
test: venv
	@$(MAKE) --no-print-directory build BUILD_PYTHON=$(abspath $(VENV))/bin/python
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-fuzz
	@$(MAKE) --no-print-directory test-sanitizers

test-sanitizers: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPOSENC_SANITIZE=ON \
	  -DPOSENC_BUILD_TOOLS=OFF -DPOSENC_BUILD_PYTHON=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target posenc_tests
	@echo "Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer:"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

# Every fuzz target under libFuzzer (clang, ASan + UBSan): each target's regressions once, then
# an equal share of $(FUZZ_SECONDS) s (the total) of new inputs grown from its seeds (kept in
# $(FUZZ_BUILD)/corpus-<target>). A target <t> is fuzz/<t>_fuzzer.cc with FUZZ_SEEDS_<t>,
# FUZZ_REGRESSIONS_<t> and FUZZ_FLAGS_<t> below.
FUZZ_TARGETS := hf_config npy cli_options
FUZZ_SEEDS_hf_config := fuzz/corpus
FUZZ_REGRESSIONS_hf_config := fuzz/regressions
FUZZ_FLAGS_hf_config := -dict=fuzz/hf_config.dict
FUZZ_SEEDS_npy := fuzz/npy_corpus
FUZZ_REGRESSIONS_npy := fuzz/npy_regressions
FUZZ_FLAGS_npy :=
FUZZ_SEEDS_cli_options := fuzz/cli_options_corpus
FUZZ_REGRESSIONS_cli_options := fuzz/cli_options_regressions
FUZZ_FLAGS_cli_options := -dict=fuzz/cli_options.dict
FUZZ_EACH = $(shell expr $(FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)))

test-fuzz: setup
	@cmake -S fuzz -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addsuffix _fuzzer,$(FUZZ_TARGETS))
	@for target in $(FUZZ_TARGETS); do \
	  $(MAKE) --no-print-directory fuzz-run-$$target || exit 1; \
	done

fuzz-run-%:
	@mkdir -p $(FUZZ_BUILD)/corpus-$*
	@echo "$* under libFuzzer: regressions, then $(FUZZ_EACH) s of fuzzing"
	@./$(FUZZ_BUILD)/$*_fuzzer -runs=0 $(FUZZ_REGRESSIONS_$*)
	@./$(FUZZ_BUILD)/$*_fuzzer -max_total_time=$(FUZZ_EACH) -timeout=10 \
	  -rss_limit_mb=2048 $(FUZZ_FLAGS_$*) -print_final_stats=1 \
	  $(FUZZ_BUILD)/corpus-$* $(FUZZ_SEEDS_$*)

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# The Debian package $(PACKAGE_BUILD)/posenc_<version>_<arch>.deb: library, headers, CMake and
# pkg-config files and the CLI under /usr (multiarch libdir), for `apt install ./posenc_*.deb`.
# Its own build directory: prefix /usr, and no tests, Python module or study to build.
package: setup-demo
	@cmake -S . -B $(PACKAGE_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	  -DPOSENC_BUILD_TESTS=OFF -DPOSENC_BUILD_PYTHON=OFF -DPOSENC_BUILD_STUDY=OFF >/dev/null
	@cmake --build $(PACKAGE_BUILD) -j $(JOBS)
	@cd $(PACKAGE_BUILD) && cpack -G DEB

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(PACKAGE_BUILD) $(DEMO_DIR) study-runs-quick

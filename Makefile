# posenc: `make demo` and `make test` set up everything they need on Debian 12 (the packages in
# scripts/setup.sh, only those missing), configure, build and run.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 55
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
DEMO_DIR ?= posenc-demo

.PHONY: all setup configure build demo study test test-sanitizers test-fuzz install clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The lesson, reproduced: a report on stdout, figures and report.html in $(DEMO_DIR)/.
demo: build
	@./$(BUILD)/tools/posenc demo --out $(DEMO_DIR)

# The length-extrapolation study: trains and evaluates every arm (about 45 minutes on 2 cores),
# writes docs/STUDY.md and docs/study/*.png. Resumable: checkpoints and results stay in
# study-runs/. QUICK=1: the same pipeline on tiny settings in seconds, into study-runs-quick/.
study: build
	@./$(BUILD)/study/posenc_study $(if $(QUICK),--quick)

# All tests: unit, CLI and Python tests and the installed-package consumers, the config loader
# under libFuzzer, then the unit tests once more under AddressSanitizer + UndefinedBehaviorSanitizer
# (last, so that the run closes on a test summary).
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-fuzz
	@$(MAKE) --no-print-directory test-sanitizers

test-sanitizers: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPOSENC_SANITIZE=ON \
	  -DPOSENC_BUILD_TOOLS=OFF -DPOSENC_BUILD_PYTHON=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target posenc_tests
	@echo "Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer:"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

# The config loader under libFuzzer (clang, ASan + UBSan): every input in fuzz/regressions once,
# then $(FUZZ_SECONDS) s of new inputs grown from fuzz/corpus (kept in $(FUZZ_BUILD)/corpus).
test-fuzz: setup
	@cmake -S fuzz -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target hf_config_fuzzer
	@mkdir -p $(FUZZ_BUILD)/corpus
	@echo "Config loader under libFuzzer: regressions, then $(FUZZ_SECONDS) s of fuzzing"
	@./$(FUZZ_BUILD)/hf_config_fuzzer -runs=0 fuzz/regressions
	@./$(FUZZ_BUILD)/hf_config_fuzzer -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	  -rss_limit_mb=2048 -dict=fuzz/hf_config.dict -print_final_stats=1 \
	  $(FUZZ_BUILD)/corpus fuzz/corpus

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(DEMO_DIR) study-runs-quick

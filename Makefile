# posenc: `make demo` and `make test` set up everything they need on Debian 12 (the packages in
# scripts/setup.sh, only those missing), configure, build and run.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
DEMO_DIR ?= posenc-demo

.PHONY: all setup configure build demo test test-sanitizers install clean

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

# All tests: unit and CLI tests, the installed-package consumer, then the unit tests once more
# under AddressSanitizer + UndefinedBehaviorSanitizer.
test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory test-sanitizers

test-sanitizers: setup
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPOSENC_SANITIZE=ON \
	  -DPOSENC_BUILD_TOOLS=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target posenc_tests
	@echo "Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer:"
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L unit

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(DEMO_DIR)

# kvgate: two commands for newcomers (`make demo`, `make test`); the rest for developers.
BUILD_DIR ?= build
JOBS ?= 2
MAKEFLAGS += --no-print-directory

.PHONY: setup build test unit demo lint bench fuzz clean deb

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS)

# The sanitizer legs (scripts/sanitize.sh, docs/reliability.md): ASan + UBSan and TSan builds
# with clang in build-asan/ and build-tsan/, run after the tests above; SANITIZE=0 skips them.
SANITIZE ?= 1
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j1
	@if [ "$(SANITIZE)" = 1 ]; then s=0; bash scripts/sanitize.sh address || s=1; \
	  bash scripts/sanitize.sh thread || s=1; exit $$s; fi

unit: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -R '^[A-Z]'

demo: build
	@bash scripts/demo.sh

# The Debian package (docs/operations.md "Debian package"): build/kvgate_<version>_<arch>.deb.
deb: build
	@cd $(BUILD_DIR) && cpack -G DEB >/dev/null && ls -1 $$PWD/kvgate_*.deb

# Side-by-side benchmarks (kvgate vs direct vs nginx vs HAProxy); figures go to docs/benchmarks.md.
bench: build
	@bash scripts/setup.sh --bench
	@bash bench/run_all.sh

# libFuzzer runs (clang + ASan/UBSan) of the fuzz targets; FUZZ_SECONDS each (default 60). New
# inputs that add coverage are merged into tests/fuzz/corpus (replayed by `make test`).
FUZZ_SECONDS ?= 60
fuzz: setup
	@bash scripts/setup.sh --fuzz
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

lint:
	@find src -name '*.cc' -o -name '*.h' | xargs clang-format --dry-run --Werror
	@find src -name '*.cc' -not -name '*_test.cc' | xargs clang-tidy -p $(BUILD_DIR) --quiet \
	  --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 --extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan

# treespec: the two set-up commands are `make run` and `make test`.
# Both install missing Debian packages (scripts/setup.sh), configure Release into
# build/, build, then run the demo or the whole test suite.

BUILD     ?= build
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 60

.PHONY: all setup configure build run test test-sanitize test-tsan fuzz bench clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@scripts/run_demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer build of the unit tests (RelWithDebInfo).
SANITIZE_TESTS ?= .
test-sanitize: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTREESPEC_SANITIZE="address;undefined" \
	  -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -L '$(SANITIZE_TESTS)'

# ThreadSanitizer build: the thread pool and the server's batching.
TSAN_TESTS ?= test_core|itest_server
test-tsan: setup
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTREESPEC_SANITIZE=thread \
	  -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L '$(TSAN_TESTS)'

# libFuzzer targets (clang-14), each run for FUZZ_SECONDS from the committed seed corpus.
fuzz:
	@scripts/setup.sh clang-14 libclang-rt-14-dev
	@CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTREESPEC_FUZZ=ON \
	  -DTREESPEC_SANITIZE="address;undefined" -DTREESPEC_BUILD_TESTS=OFF -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@scripts/run_fuzz.sh build-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz

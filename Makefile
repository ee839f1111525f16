# treespec: the two set-up commands are `make run` and `make test`.
# Both install missing Debian packages (scripts/setup.sh), configure Release into
# build/, build, then run the demo or the whole test suite.

BUILD     ?= build
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 60

.PHONY: all setup configure build install install-python uninstall run test soak test-sanitize test-tsan fuzz build-fuzz-targets fuzz-corpus bench format format-check lint clean

all: build

setup:
	@scripts/setup.sh

# A new build directory uses Ninja (scripts/setup.sh installs it): it starts a module's
# compiles as soon as their headers exist, where CMake's Makefiles wait for every library
# the module links, which left one of the 2 cores idle for a third of the build. An
# existing build directory keeps the generator it was made with.
cmake_gen = $(if $(wildcard $(1)/CMakeCache.txt),,$(if $(shell command -v ninja),-G Ninja))

configure: setup
	@cmake -S . -B $(BUILD) $(call cmake_gen,$(BUILD)) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# make install PREFIX=DIR: bin/treespec, lib/libtreespec.so.0 (+ .so link) and
# libtreespec.a, include/treespec.h, lib/pkgconfig/treespec.pc, lib/cmake/treespec/.
# Builds only what it installs. make install-python PREFIX=DIR adds the Python module
# in DIR/lib/pythonX.Y/site-packages/treespec (and the library it loads). make uninstall
# removes what they installed (CMake's install manifests in $(BUILD)).
PREFIX ?= /usr/local
INSTALL_TARGETS = treespec treespec_shared treespec_static
install: configure
	@cmake --build $(BUILD) -j $(JOBS) --target $(INSTALL_TARGETS)
	@cmake --install $(BUILD) --prefix $(PREFIX)

install-python: install
	@cmake --install $(BUILD) --prefix $(PREFIX) --component python

uninstall:
	@for m in $(BUILD)/install_manifest.txt $(BUILD)/install_manifest_python.txt; do \
	  if [ -f $$m ]; then echo "uninstall: removing the files listed in $$m"; xargs -d '\n' rm -f -- < $$m; rm -f $$m; fi; \
	done

# Builds only the tool (not the tests, benchmarks or libraries it does not link).
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target treespec
	@scripts/run_demo.sh $(BUILD)

# After the run, scripts/test_summary.sh lists skipped tests, loudly those skipped for a
# missing ../shared; the exit code stays ctest's.
# ctest starts the tests it knows to be long first (Testing/Temporary/CTestCostData.txt,
# written by every run); a fresh build has none and would start the longest tests last,
# so it gets the committed list of the ~30 longest (tests/ctest_costs_*.txt; regenerate
# from a build's own cost file when the suite changes much). docs/reliability.md, "CI time".
seed_ctest_costs = @mkdir -p $(1)/Testing/Temporary && [ -s $(1)/Testing/Temporary/CTestCostData.txt ] || \
  cp $(CURDIR)/tests/ctest_costs_$(2).txt $(1)/Testing/Temporary/CTestCostData.txt
test: build
	$(call seed_ctest_costs,$(BUILD),release)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS); rc=$$?; $(CURDIR)/scripts/test_summary.sh .; exit $$rc

# The server load test (docs/reliability.md, "Load") for SOAK_SECONDS of rounds.
SOAK_SECONDS ?= 600
soak: build
	@cd $(BUILD) && TREESPEC_LOAD_SECONDS=$(SOAK_SECONDS) TREESPEC_SHARED=$${TREESPEC_SHARED:-$(CURDIR)/../shared} \
	  tests/itest_server --gtest_filter='ServerLoad.*'

# AddressSanitizer + UndefinedBehaviorSanitizer build of the tests; any finding fails
# the test (abort on error, leaks included). SANITIZE_TESTS is a ctest label regex
# (labels: test_<dir>, itest_<dir>); SANITIZE_EXCLUDE a test-name regex of tests left
# out. The default subset is every test except those that repeat, many times over, code
# the remaining tests already run under the sanitizers, and that take most of the
# suite's time under ASan: the chi-square sampling loops (verifiers, Medusa, the draft
# model, EAGLE: EagleDrafter.SampledDrafts... runs its sampled path), Medusa head
# training and its greedy-equality decodes, the lossless contract's wide-model cases
# (LosslessContract: Q8_0 only; the other types run the same forward code), the
# end-to-end drafter checks through the binary (LosslessE2E), and the longest golden
# variants (the CLI expand-and-widen check, four ProPD and one PTD and one draft-model
# golden whose code the other goldens of the same drafter run), the
# prune-head training loop (its file and fit checks stay), three of --spec auto's four
# golden tests (each retrains the heads; RandomArmSwitching runs the AutoDrafter's
# paths), the policy's longest simulation, and the penalties' chi-square and
# every-drafter decodes (90 s each under ASan; ServerNative.PenaltiesMatchRunAndEveryMethod
# runs the engine's penalty code there), and likewise the logit-bias / typical-p /
# logprobs every-drafter and chi-square decodes (ServerSampling.* runs that code), and the
# grammar's (ServerGrammar.* and GrammarEngine.CutKeeps... run its engine code). ctest
# names of parametrised tests end in "  # GetParam() = ...", hence the "( .*)?".
# Timings and the CI budget (.ci/run under 30 minutes on 2 cores): docs/reliability.md,
# "CI time". `make test-sanitize SANITIZE_EXCLUDE=` runs all.
SANITIZE_TESTS ?= .
SANITIZE_EXCLUDE ?= ^(Verify(Lossless|Coupled)\..*Distribution|MedusaLossless\.EmittedTokens.*|DraftSampling\..*|EagleSampling\..*|MedusaTrain\.Stories.*|MedusaDecode\..*|MedusaDrafterParts\.LiveTable.*|LosslessE2E\..*|LosslessContractIsa\..*|AllWeightTypes/LosslessContract\..*/(f32|f16|bf16|q4_0|q4_k|q6_k|q5_k|iq4_xs)( .*)?|ExpandHeads\.Cli.*|PropdGolden\.(LogitLens|Factory|PtdUnder|PrunedDynamic).*|PtdGolden\.ReferenceConfiguration.*|DraftGoldens\.ExpandedTarget|PruneHead\.Training.*|MedusaAuto\.(PolicyChoice|CoupledSampling|ShadowGrades).*|AutoPolicy\.ExplorationCost.*|Penalties\.(SampledTokens|EveryDrafter).*|SamplingFields\.(EveryDrafter|CoupledSpeculation|SampledTokens).*|GrammarEngine\.(EveryDrafter|SampledTokens).*)$$
# allocator_may_return_null: a failed allocation returns NULL as in a normal build (the
# code turns that into an "out of memory" error, which tests check) instead of aborting.
# TREESPEC_LOAD_*: the server load test (docs/reliability.md, "Load") with smaller counts.
# TREESPEC_TEST_GOLDENS=4: tests that decode every stories260K golden through a drafter
# decode the first 4 (still batched; tests/common/golden.h): the same code on fewer
# prompts. The Release suite decodes all 10.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TREESPEC_LOAD_CLIENTS=20 TREESPEC_LOAD_ROUNDS=2 TREESPEC_TEST_GOLDENS=4
# The sanitizer build uses clang 14 (clang-14; its ASan/UBSan runtimes are in
# libclang-rt-14-dev, llvm-symbolizer in llvm-14: the fuzz build's packages): it compiles
# this tree with ASan + UBSan in about 55% of gcc 12's time, and its UBSan checks more
# (docs/reliability.md, "CI time"). SAN_CC/SAN_CXX=gcc/g++ builds it with gcc instead.
SAN_PACKAGES = clang-14 libclang-rt-14-dev llvm-14
SAN_CC ?= clang-14
SAN_CXX ?= clang++-14
# -O1 (the kernels keep -O2, src/kernels/CMakeLists.txt) and -g1 (cmake/treespec.cmake):
# the ASan + UBSan build in about half the time of -O2 -g (docs/reliability.md, "CI time").
SAN_OPT = -O1 -DNDEBUG
test-sanitize:
	@scripts/setup.sh $(SAN_PACKAGES)
	@cmake -S . -B build-asan $(call cmake_gen,build-asan) -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(SAN_OPT)" \
	  -DTREESPEC_SANITIZE="address;undefined" -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	$(call seed_ctest_costs,build-asan,sanitize)
	@sym=$$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true); \
	  cd build-asan && env $${sym:+ASAN_SYMBOLIZER_PATH=$$sym} $(SAN_ENV) \
	  ctest --output-on-failure --no-tests=error -j $(JOBS) -L '$(SANITIZE_TESTS)' \
	  $(if $(SANITIZE_EXCLUDE),-E '$(SANITIZE_EXCLUDE)')

# ThreadSanitizer build: the thread pool (test_core), the 2-thread forward and engine
# (test_model, test_engine) and, once src/server exists, the server's batching
# (test_server, itest_server). Only the test binaries that exist are built (plus the
# tool, which integration tests start), so the target works before and after the server
# lands; the server's suppressions file is used if present.
TSAN_TESTS ?= test_core|test_model|test_engine|test_server|itest_server
TSAN_SUPP = $(CURDIR)/tests/integration/server/tsan.supp
test-tsan:
	@scripts/setup.sh libtsan2
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTREESPEC_SANITIZE=thread \
	  -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@targets=$$(cmake --build build-tsan --target help | sed -n 's/^\.\.\. //p' | awk '{print $$1}' \
	  | grep -Ex '$(TSAN_TESTS)|treespec' | tr '\n' ' '); \
	  echo "test-tsan: building $$targets"; cmake --build build-tsan -j $(JOBS) --target $$targets
	@cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1$(if $(wildcard $(TSAN_SUPP)), suppressions=$(TSAN_SUPP))" \
	  ctest --output-on-failure --no-tests=error -j $(JOBS) -L '^($(TSAN_TESTS))$$'

# libFuzzer targets (clang-14; Debian's libclang-rt-14-dev has the runtime), ASan + UBSan,
# each run for FUZZ_SECONDS from a copy of the committed seed corpus (tests/fuzz/README.md),
# FUZZ_JOBS targets at a time (default: JOBS).
# Only the fuzz targets are built, not the tool or the tests. FUZZ_RUNS=N also stops each
# target after N executions (the campaigns of docs/reliability.md).
FUZZ_TARGETS ?=
fuzz: build-fuzz-targets
	@FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_JOBS=$(or $(FUZZ_JOBS),$(JOBS)) nice -n 10 scripts/run_fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# clang-14 (compiler), libclang-rt-14-dev (libFuzzer and the clang sanitizer runtimes),
# llvm-14 (llvm-symbolizer: crash reports with file:line).
FUZZ_PACKAGES = $(SAN_PACKAGES)
build-fuzz-targets:
	@scripts/setup.sh $(FUZZ_PACKAGES)
	@CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz $(call cmake_gen,build-fuzz) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTREESPEC_FUZZ=ON \
	  -DTREESPEC_SANITIZE="address;undefined" -DTREESPEC_BUILD_TESTS=OFF -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_targets

# Regenerates the committed seed corpora (deterministic) with make_fuzz_corpus; the
# regress_* inputs (fuzz findings, added by hand) are kept.
fuzz-corpus: build-fuzz-targets
	@find tests/fuzz/corpus -type f ! -name 'regress_*' -delete 2>/dev/null || true
	@build-fuzz/tests/fuzz/make_fuzz_corpus tests/fuzz/corpus

# Formatting (.clang-format, clang-format 14 from scripts/setup.sh): `make format` formats
# the C/C++ files of src/, tools/, tests/, benchmarks/ and include/ in place;
# `make format-check` changes nothing and fails listing the files it would change (.ci/run).
format:
	@scripts/setup.sh
	@scripts/format.sh

format-check:
	@scripts/setup.sh
	@scripts/format.sh --check

# clang-tidy 14 (.clang-tidy) over src/ (scripts/lint.sh): a few minutes on 2 cores, not
# run by CI. Its compile commands come from build-lint/, configured (not built) with
# TREESPEC_UNITY=OFF: a unity build's compile_commands.json lists the unity TUs, not the
# source files. LINT_FILES narrows it (a path regex, e.g. LINT_FILES=src/engine/).
LINT_FILES ?= src/
lint:
	@scripts/setup.sh clang-tidy-14
	@cmake -S . -B build-lint $(call cmake_gen,build-lint) -DCMAKE_BUILD_TYPE=Release -DTREESPEC_UNITY=OFF \
	  -DTREESPEC_BUILD_TESTS=OFF -DTREESPEC_BUILD_BENCHMARKS=OFF >/dev/null
	@LINT_JOBS=$(JOBS) scripts/lint.sh build-lint '$(LINT_FILES)'

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz build-lint

# Tidemark top-level Makefile: thin wrapper over CMake + CTest.
#   make run      set up, build, start tidemark-server (embedded store default)
#   make test     set up, build (normal and ASan+UBSan), run every test
#   make bench    run benchmarks (not gated)
#   make soak     long soak (SOAK_SECONDS, SOAK_SEED, SOAK_CLIENTS)
#   make install  install library, headers and pkg-config file (PREFIX=/usr/local)

BUILD      ?= build
BUILD_SAN  ?= build-asan
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
RUN_ARGS   ?=

SOAK_SECONDS ?= 600
SOAK_SEED    ?= 1
SOAK_CLIENTS ?= 8

.PHONY: all deps build build-san run test test-fast bench soak install clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX)

$(BUILD_SAN)/CMakeCache.txt:
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DTIDEMARK_SANITIZE=ON

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-san: deps $(BUILD_SAN)/CMakeCache.txt
	cmake --build $(BUILD_SAN) -j $(JOBS)

run: build
	./$(BUILD)/bin/tidemark-server $(RUN_ARGS)

test: build build-san
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	cd $(BUILD_SAN) && ctest --output-on-failure -j $(JOBS) -LE nosan

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	bash bench/run.sh $(BUILD)

soak: build
	node tests/soak/soak.mjs --proxy $(BUILD)/bin/tm-proxy \
	  --server $(BUILD)/bin/tidemark-server-crashpoints \
	  --client $(BUILD)/bin/tidemark-client-crashpoints \
	  --seconds $(SOAK_SECONDS) --seed $(SOAK_SEED) --clients $(SOAK_CLIENTS)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_SAN)

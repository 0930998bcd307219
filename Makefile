# warren: the top-level entry points. Everything real happens in meson/ninja
# and in scripts/; this file only names the user-facing verbs.
BUILD     ?= build
TESTBUILD ?= build-test
NINJA     ?= ninja
export PATH := $(PATH):/usr/sbin:/sbin

.PHONY: all build deps demo test bench redteam format format-check clean

all: build

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)
	@scripts/criu-build.sh $(BUILD)

# apt-installs every missing Debian package the build, tests and benchmarks
# need; idempotent and quiet when nothing is missing.
deps:
	@scripts/deps.sh

demo: deps build
	@scripts/demo.sh $(BUILD)

$(TESTBUILD)/build.ninja:
	meson setup $(TESTBUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

# Everything: format check, ASan+UBSan unit tests, integration tests as root.
test: deps $(TESTBUILD)/build.ninja
	$(NINJA) -C $(TESTBUILD)
	@scripts/criu-build.sh $(TESTBUILD)
	@scripts/test.sh $(TESTBUILD)

redteam: deps $(TESTBUILD)/build.ninja
	$(NINJA) -C $(TESTBUILD)
	@scripts/test.sh $(TESTBUILD) redteam

bench: deps build
	@bench/run.sh $(BUILD)

format:
	@git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@scripts/format-check.sh

clean:
	rm -rf $(BUILD) $(TESTBUILD)

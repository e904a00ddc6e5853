# agentsnet build. Targets: all, lint, test, check (lint + test), demo, bench, fuzz.
# Quiet by default; V=1 shows the commands.

CC      ?= cc
ifeq ($(CC),cc)
CC      := gcc
endif
PKGS    := liburing libcares yaml-0.1 libxxhash libssl libcrypto libidn2 libpsl
WARN    := -Wall -Wextra -Werror -Wshadow -Wconversion -Wimplicit-fallthrough -Wvla -Wformat=2
CFLAGS_BASE := -std=c17 -D_GNU_SOURCE $(WARN) -I. -pthread -g \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

# Two trees: release (build/rel) and the sanitized tree the tests run (build/san).
REL_CFLAGS := $(CFLAGS_BASE) -O2
SAN_CFLAGS := $(CFLAGS_BASE) -O1 -DAN_DEBUG -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=all
SAN_LDFLAGS := -fsanitize=address,undefined

ifeq ($(V),1)
Q :=
else
Q := @
endif

LIB_SRC := $(sort $(wildcard core/*.c policy/*.c tls/*.c))
BIN_SRC := tools/agentsnetd/main.c
UNIT_SRC := $(sort $(wildcard tests/unit/*/*.c tests/unit/*/*/*.c))
HEADERS := $(sort $(wildcard core/*.h policy/*.h tls/*.h))

REL_OBJ := $(LIB_SRC:%.c=build/rel/%.o)
SAN_OBJ := $(LIB_SRC:%.c=build/san/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=build/san/tests/unit/%)
LOADGEN_BIN := build/rel/bench/loadgen

.PHONY: all lint test check demo bench fuzz fuzz-short deps clean unit integ install
.DEFAULT_GOAL := all

all: build/rel/agentsnetd build/san/agentsnetd build/rel/agentsnet build/san/agentsnet \
	build/rel/agentsnet-bridge build/san/agentsnet-bridge \
	build/rel/agentsnet-probe build/san/agentsnet-probe $(LOADGEN_BIN)

deps:
	$(Q)./tools/deps.sh

# `make install [PREFIX=/usr/local] [DESTDIR=...]`: the release binaries (the CLI,
# the bridge and the probe side by side: the CLI finds them next to itself), the
# systemd unit (deploy/systemd/, its ExecStart pointed at PREFIX) and the docs.
PREFIX ?= /usr/local
install: build/rel/agentsnetd build/rel/agentsnet build/rel/agentsnet-bridge \
		build/rel/agentsnet-probe
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/doc/agentsnet
	install -m 0755 build/rel/agentsnetd $(DESTDIR)$(PREFIX)/sbin/agentsnetd
	install -m 0755 build/rel/agentsnet build/rel/agentsnet-bridge build/rel/agentsnet-probe \
		$(DESTDIR)$(PREFIX)/bin/
	sed -e 's|/usr/local/|$(PREFIX)/|g' deploy/systemd/agentsnetd.service \
		> $(DESTDIR)/lib/systemd/system/agentsnetd.service
	chmod 0644 $(DESTDIR)/lib/systemd/system/agentsnetd.service
	install -m 0644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/agentsnet/

build/rel/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(REL_CFLAGS) -MMD -MP -c $< -o $@

build/san/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC-SAN  $<")
	$(Q)$(CC) $(SAN_CFLAGS) -MMD -MP -c $< -o $@

build/rel/libagentsnet.a: $(REL_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
build/san/libagentsnet.a: $(SAN_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

build/rel/agentsnetd: build/rel/tools/agentsnetd/main.o build/rel/libagentsnet.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -o $@ $^ $(LDLIBS)
build/san/agentsnetd: build/san/tools/agentsnetd/main.o build/san/libagentsnet.a
	@$(if $(Q),echo "  LD-SAN  $@")
	$(Q)$(CC) $(SAN_LDFLAGS) -o $@ $^ $(LDLIBS)

AGENTSNET_OBJ := $(patsubst %.c,%.o,$(sort $(wildcard tools/agentsnet/*.c)))
build/rel/agentsnet: $(AGENTSNET_OBJ:%=build/rel/%) build/rel/libagentsnet.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -o $@ $^ $(LDLIBS)
build/san/agentsnet: $(AGENTSNET_OBJ:%=build/san/%) build/san/libagentsnet.a
	@$(if $(Q),echo "  LD-SAN  $@")
	$(Q)$(CC) $(SAN_LDFLAGS) -o $@ $^ $(LDLIBS)

# The sandbox's init: static, linking only libc and libseccomp (tools/bridge/).
BRIDGE_LIBS := -lseccomp
BRIDGE_OBJ := $(patsubst %.c,%.o,$(sort $(wildcard tools/bridge/*.c))) core/an.o
build/rel/agentsnet-bridge: $(BRIDGE_OBJ:%=build/rel/%)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -static -Wl,--strip-debug -o $@ $^ $(BRIDGE_LIBS)
build/san/agentsnet-bridge: $(BRIDGE_OBJ:%=build/san/%)
	@$(if $(Q),echo "  LD-SAN  $@")
	$(Q)$(CC) $(SAN_LDFLAGS) -o $@ $^ $(BRIDGE_LIBS)
build/san/tests/unit/tools/bridge/main: LDLIBS += $(BRIDGE_LIBS)
# The selftest's unit test runs the built probe.
build/san/tests/unit/tools/agentsnet/selftest: | build/san/agentsnet-probe

# `agentsnet selftest`'s probes, run as the agent inside the sandbox: static, libc only
# (tools/probe/), so it runs whatever the sandbox's file system holds.
PROBE_OBJ := $(patsubst %.c,%.o,$(sort $(wildcard tools/probe/*.c))) core/an.o
build/rel/agentsnet-probe: $(PROBE_OBJ:%=build/rel/%)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -static -Wl,--strip-debug -o $@ $^
build/san/agentsnet-probe: $(PROBE_OBJ:%=build/san/%)
	@$(if $(Q),echo "  LD-SAN  $@")
	$(Q)$(CC) $(SAN_LDFLAGS) -o $@ $^

# The bench's load client and origin (bench/loadgen.c): optimised, linking only core/an.o
# and OpenSSL (for its tls mode), never the proxy's code paths. `make bench` runs it; `make
# all` builds it too, so that it keeps building.
$(LOADGEN_BIN): build/rel/bench/loadgen.o build/rel/core/an.o
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -o $@ $^ -lssl -lcrypto -pthread

# A unit test may #include the .c under test; the archive then supplies the rest.
build/san/tests/unit/%: tests/unit/%.c build/san/libagentsnet.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST-CC $<")
	$(Q)$(CC) $(SAN_CFLAGS) -Wno-conversion -MMD -MP -o $@ $< build/san/libagentsnet.a \
		$(LDLIBS) $(CHECK_LIBS)

unit: $(UNIT_BIN)
	$(Q)tests/run-unit.sh $(UNIT_BIN)

integ: all
	$(Q)tests/integ/run.sh

# The fuzzers' short run (FUZZ_SECONDS each; `make fuzz` runs them longer). A
# compiler that cannot build them is a failure here, not a skip: clang and its
# libFuzzer come from tools/deps.sh.
fuzz-short:
	$(Q)FUZZ_RUNS=$${FUZZ_RUNS:-100000} tests/fuzz/run.sh

test: unit integ fuzz-short

lint:
	$(Q)tests/lint.sh

check: deps
	$(Q)$(MAKE) --no-print-directory lint
	$(Q)$(MAKE) --no-print-directory all $(UNIT_BIN)
	$(Q)$(MAKE) --no-print-directory test

demo:
	$(Q)./tools/deps.sh demo
	$(Q)$(MAKE) --no-print-directory build/rel/agentsnetd build/rel/agentsnet \
		build/rel/agentsnet-bridge
	$(Q)demo/run.sh

bench:
	$(Q)./tools/deps.sh bench
	$(Q)$(MAKE) --no-print-directory build/rel/agentsnetd build/rel/agentsnet \
		build/rel/agentsnet-bridge $(LOADGEN_BIN) $(MICRO_BIN)
	$(Q)bench/run.sh

fuzz:
	$(Q)tests/fuzz/run.sh

clean:
	rm -rf build

include bench/micro.mk

-include $(shell find build -name '*.d' 2>/dev/null)

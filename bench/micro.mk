# Google Benchmark microbenchmarks (bench/micro.cc) against the release objects.
# Included by the top-level Makefile after its variables; builds build/rel/bench/micro.
# Needs libbenchmark-dev. Run: see the design comment in bench/micro.cc.

MICRO_BIN      := build/rel/bench/micro
MICRO_CXXFLAGS  = -std=c++17 -D_GNU_SOURCE $(WARN) -I. -pthread -g -O2 \
	$(shell pkg-config --cflags benchmark 2>/dev/null)
MICRO_LIBS      = $(shell pkg-config --libs benchmark 2>/dev/null || echo -lbenchmark)

build/rel/bench/micro.o: bench/micro.cc
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX     $<")
	$(Q)$(CXX) $(MICRO_CXXFLAGS) -MMD -MP -c $< -o $@

$(MICRO_BIN): build/rel/bench/micro.o build/rel/libagentsnet.a
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CXX) -o $@ $^ $(MICRO_LIBS) $(LDLIBS)

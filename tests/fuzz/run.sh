#!/bin/sh
# `make fuzz`: builds every tests/fuzz/*.c as a libFuzzer binary (clang, with
# ASan and UBSan) and runs each for ${FUZZ_SECONDS:-30} seconds on its seed
# corpus tests/fuzz/corpus/<name>/, with inputs up to ${FUZZ_MAX_LEN:-20480}
# bytes. With FUZZ_RUNS set (`make fuzz-short`, which `make check` runs), each
# driver instead runs that many inputs from seed ${FUZZ_SEED:-1}, on its seeds
# and a fresh scratch corpus: the same inputs on every machine and every run,
# so a CI result is reproducible and a red run is a regression, not luck; the
# exploring belongs to `make fuzz`. A driver lists the library sources it needs on a "fuzz-sources:" line
# (or several) in its top comment, and the pkg-config names of the libraries it
# links on "fuzz-libs:" lines; without sources it gets the default below. New inputs go to
# build/fuzz/corpus/<name>/ (the seeds stay as they are), crashes to
# build/fuzz/<name>-crash-*. Exit 0 when every driver ran clean, 1 on a build
# failure or a crash, 77 when clang's libFuzzer is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1

secs=${FUZZ_SECONDS:-30}
cc=${FUZZ_CC:-clang}
max_len=${FUZZ_MAX_LEN:-20480}
out=build/fuzz
flags="-std=c17 -D_GNU_SOURCE -DAN_DEBUG -I. -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
default_src="core/an.c core/reason.c core/pool.c"

mkdir -p "$out"
probe="$out/.probe.c"
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
	'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
	>"$probe"
# shellcheck disable=SC2086 # $flags is a list
if ! $cc $flags -o "$out/.probe" "$probe" >/dev/null 2>&1; then
	echo "  SKIP    fuzz: $cc cannot build a libFuzzer binary (install clang and libclang-rt-dev)"
	echo "fuzz: 0 passed, 0 failed, 1 skipped (fuzz: $cc cannot build a libFuzzer binary)"
	exit 77
fi

fail=0
passed=0
failed=0
for f in tests/fuzz/*.c; do
	[ -e "$f" ] || continue
	name=$(basename "$f" .c)
	src=$(sed -n 's/^[[:space:]*]*fuzz-sources:[[:space:]]*//p' "$f" | tr '\n' ' ')
	[ -n "$src" ] || src=$default_src
	# pkg-config names of the libraries a driver links ("fuzz-libs:" lines).
	pkgs=$(sed -n 's/^[[:space:]*]*fuzz-libs:[[:space:]]*//p' "$f" | tr '\n' ' ')
	libs=""
	[ -z "$pkgs" ] || libs=$(pkg-config --libs $pkgs)
	echo "  FUZZ-CC $f"
	# shellcheck disable=SC2086 # word splitting of the flag and source lists is wanted
	if ! $cc $flags -o "$out/$name" "$f" $src $libs >"$out/$name.build.log" 2>&1; then
		echo "  FAIL    $name: build failed"
		sed 's/^/    /' "$out/$name.build.log"
		fail=1
		failed=$((failed + 1))
		continue
	fi
	seeds=tests/fuzz/corpus/$name
	[ -d "$seeds" ] || seeds=
	if [ -n "${FUZZ_RUNS:-}" ]; then
		corpus="$out/scratch/$name"
		rm -rf "$corpus"
		budget="-runs=$FUZZ_RUNS -seed=${FUZZ_SEED:-1}"
		echo "  FUZZ    $name ($FUZZ_RUNS runs, seed ${FUZZ_SEED:-1})"
	else
		corpus="$out/corpus/$name"
		budget="-max_total_time=$secs"
		echo "  FUZZ    $name (${secs}s)"
	fi
	mkdir -p "$corpus"
	# shellcheck disable=SC2086 # $seeds is empty or one directory, $budget two flags
	# max_len above the 16 KiB head limits, so the fuzzer can cross them.
	"$out/$name" $budget -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$out/$name-" -print_final_stats=1 \
		"$corpus" $seeds >"$out/$name.log" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		echo "  FAIL    $name (exit $rc), log: $out/$name.log"
		tail -n 60 "$out/$name.log" | sed 's/^/    /'
		fail=1
		failed=$((failed + 1))
	else
		runs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$out/$name.log")
		echo "  PASS    $name (${runs:-?} runs)"
		passed=$((passed + 1))
	fi
done
# The closing counts, one per fuzzer, as every harness of make check ends (docs/testing.md).
echo "fuzz: $passed passed, $failed failed, 0 skipped"
exit $fail

#!/bin/sh
# `make lint`: the house-style rules a tool can check (docs/style.md sections 1, 2, 4, 11).
#  1. clang-format leaves every C file unchanged;
#  2. every header compiles on its own;
#  3. no banned function, and raw malloc/free only in core/pool.c;
#  4. include direction (tests/lint-deps.py): core/ includes none of policy/,
#     tls/, tools/; policy/ and tls/ include neither each other nor tools/;
#     the connection's parts (core/conn.[ch], core/conn_int.h and every file
#     that includes it) do not include core/worker.h, only its types
#     (core/worker-t.h, which declares no function), and call none of its
#     functions; the spine (those parts but modes.c and the mode files) names
#     no function or object a mode's file defines;
#  5. every path into the tree a document or a source cites exists
#     (tests/lint-paths.py);
#  6. every promise of README.md and docs/ names a test that exists and runs
#     (docs/testing.md, "Promises"; tests/lint-promises.py);
#  7. no file in core/, policy/ or tools/ passes 1,500 lines, core/http1.c
#     (the parser, kept whole) aside (tests/lint-size.py).
set -u
cd "$(dirname "$0")/.."
fail=0
src=$(git ls-files -co --exclude-standard '*.c' '*.h' 2>/dev/null | grep -v '^build/')
proj=$(printf '%s\n' $src | grep -E '^(core|policy|tls|tools)/')

for f in $src; do
	if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
		echo "lint: $f: not clang-format clean (run: clang-format -i $f)"
		fail=1
	fi
done

cflags="-std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -I. $(pkg-config --cflags liburing libcares yaml-0.1 libxxhash libssl 2>/dev/null)"
for h in $(printf '%s\n' $proj | grep '\.h$'); do
	if ! printf '#include "%s"\n#include "%s"\n' "$h" "$h" | gcc $cflags -x c -fsyntax-only - 2>/tmp/lint.$$; then
		echo "lint: $h: does not compile on its own (or twice):"
		sed 's/^/    /' /tmp/lint.$$
		fail=1
	fi
done
rm -f /tmp/lint.$$

banned='\b(strcpy|strcat|sprintf|vsprintf|strtok|atoi|atol|gets|alloca)[[:space:]]*\('
for f in $proj; do
	# Comment lines are prose, not code.
	code=$(sed -e 's:^[[:space:]]*/\{0,1\}\*.*$::' -e 's://.*$::' "$f")
	hits=$(printf '%s\n' "$code" | grep -nE "$banned" | grep -v 'snprintf\|vsnprintf')
	if [ -n "$hits" ]; then
		echo "lint: $f: banned function:"; echo "$hits" | sed 's/^/    /'; fail=1
	fi
	if [ "$f" != core/pool.c ]; then
		hits=$(printf '%s\n' "$code" | grep -nE '(^|[^_a-z])(malloc|calloc|realloc|free)[[:space:]]*\(')
		if [ -n "$hits" ]; then
			echo "lint: $f: raw allocation outside core/pool.c:"; echo "$hits" | sed 's/^/    /'; fail=1
		fi
	fi
done

python3 tests/lint-deps.py . || fail=1
python3 tests/lint-paths.py . || fail=1
python3 tests/lint-promises.py . || fail=1
python3 tests/lint-size.py . || fail=1

[ $fail -eq 0 ] && echo "  LINT    ok"
exit $fail

#!/bin/sh
# `make bench` (not part of `make check`): bench/bench.py measures agentsnetd
# against the peers (squid, tinyproxy, haproxy, mitmproxy, squid ssl-bump:
# bench/peers.py) and direct connections on loopback, with the load client and
# origin build/rel/bench/loadgen (bench/loadgen.c), runs the microbenchmarks
# (build/rel/bench/micro), both built by `make bench`, and prints one table;
# the figures also go to bench/results/latest.json. Every step is bounded in
# time.
#
# AGENTSNETD overrides the daemon (default build/rel/agentsnetd);
# AN_BENCH_TIMEOUT_S the global timeout (default 900 s); AN_BENCH_STRICT=1
# makes a missed target fail the run.
set -u
cd "$(dirname "$0")/.."

daemon=${AGENTSNETD:-build/rel/agentsnetd}
cli=build/rel/agentsnet
loadgen=build/rel/bench/loadgen
limit=${AN_BENCH_TIMEOUT_S:-900}
for tool in openssl python3 taskset timeout wrk; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "bench: $tool is missing (tools/deps.sh bench installs it)"
		exit 1
	fi
done
if [ ! -x "$daemon" ]; then
	echo "bench: $daemon is not built (make build/rel/agentsnetd)"
	exit 1
fi
if [ ! -x "$cli" ]; then
	echo "bench: $cli is not built (make $cli): it makes the bench's CA"
	exit 1
fi
if [ ! -x "$loadgen" ]; then
	echo "bench: $loadgen is not built (make $loadgen)"
	exit 1
fi

work=$(mktemp -d /tmp/agentsnet-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM HUP

timeout --kill-after=15 "$limit" python3 -u bench/bench.py --daemon "$daemon" \
	--agentsnet "$cli" --loadgen "$loadgen" --micro build/rel/bench/micro --work "$work" \
	--results bench/results/latest.json
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	echo "bench: FAIL: global timeout of ${limit}s"
	rc=1
fi
exit $rc

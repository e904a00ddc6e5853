#!/bin/sh
# Counts the Debian packages `make demo` installs on a fresh Debian 12: a
# bookworm minbase chroot made with debootstrap (tools/deps.sh footprint), this
# tree copied in; first a dry run (apt-get -s) of the whole build-and-test set
# (`tools/deps.sh` with no argument: what `make demo` installed before it had a
# set of its own), then `tools/deps.sh demo` for real, the packages counted
# before and after, and the demo's three binaries built in the chroot with
# only those. Needs root and a reachable Debian mirror (DEBIAN_MIRROR, default
# deb.debian.org). Prints one line per figure; removes the chroot unless KEEP=1.
#
#   sh tools/demo-footprint.sh
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$(id -u)" -ne 0 ]; then
	echo "footprint: needs root (debootstrap and chroot)" >&2
	exit 2
fi
root=$(mktemp -d /var/tmp/agentsnet-footprint.XXXXXX)
chmod 0755 "$root" # apt in the chroot fetches as _apt
cleanup() {
	for m in dev sys proc; do
		umount -l "$root/$m" 2>/dev/null || true
	done
	if [ "${KEEP:-0}" != 1 ]; then
		rm -rf "$root"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

sh "$here/tools/deps.sh" footprint
echo "footprint: debootstrap --variant=minbase bookworm ($mirror) into $root"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
	echo "footprint: debootstrap failed; its log: $root.log" >&2
	exit 1
fi
rm -f "$root.log"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
# Slaves: the cleanup's unmounts must never reach the host's own mounts.
mount --make-rslave "$root/sys"
mount --make-rslave "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/src"
(cd "$here" && git ls-files -z | xargs -0 tar -cf -) | tar -xf - -C "$root/src"

installed() {
	chroot "$root" dpkg-query -W -f='${db:Status-Status}\n' | grep -c '^installed$'
}
fresh=$(installed)
echo "footprint: fresh bookworm minbase: $fresh packages installed"
chroot "$root" apt-get update -qq
full=$(AN_DEPS_LIST=1 sh "$here/tools/deps.sh")
if ! chroot "$root" apt-get -s install --no-install-recommends $full >"$root/dry-run.txt" 2>&1; then
	echo "footprint: apt-get -s of the whole set failed:" >&2
	tail -n 20 "$root/dry-run.txt" >&2
	exit 1
fi
would=$(grep -c '^Inst ' "$root/dry-run.txt" || true)
echo "footprint: the whole build-and-test set (tools/deps.sh) would install $would packages"
chroot "$root" sh -c 'cd /src && sh tools/deps.sh demo' >/dev/null
demo=$(installed)
echo "footprint: tools/deps.sh demo installed $((demo - fresh)) packages ($demo in all)"
if chroot "$root" sh -c 'cd /src && make -s build/rel/agentsnetd build/rel/agentsnet build/rel/agentsnet-bridge' >"$root/build.log" 2>&1; then
	echo "footprint: agentsnetd, agentsnet and agentsnet-bridge build with only those"
else
	echo "footprint: the demo's binaries do not build with only those:" >&2
	tail -n 20 "$root/build.log" >&2
	exit 1
fi

#!/usr/bin/env bash
# build.sh: build the guest VM that tests/guest_test.go boots (see README.md here).
#
#   scripts/guest-vm/build.sh [--rebuild]
#
# The guest runs Debian's kernel, the same release the siw VM pins (scripts/siw-vm: its
# build.sh downloads the kernel image and headers; this script runs it first, a no-op when
# it is up to date), with emunic's own kernel driver, emunic.ko (guest/emunic), compiled
# here out of tree against those headers. The initramfs holds busybox, iproute2, ethtool,
# virtio_net (the benchmark's baseline NIC) and emunic.ko. Output: $GUESTVM_OUT (default
# out/ beside this script, git-ignored). Root the first time (apt-get for missing packages).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${GUESTVM_OUT:-$here/out}
siwout=${SIWVM_OUT:-$repo/scripts/siw-vm/out}
rebuild=0
for arg in "$@"; do
	case $arg in
	--rebuild) rebuild=1 ;;
	-h | --help)
		sed -n '2,11s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "build.sh: unknown argument $arg (try --help)" >&2
		exit 2
		;;
	esac
done
say() { printf 'guest-vm build: %s\n' "$*" >&2; }
fail() {
	printf 'guest-vm build: error: %s\n' "$*" >&2
	exit 1
}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time per output directory: two at once (say a developer's and a test
# run's) would unpack and pack into the same files.
exec 9>"$out/.build.lock"
if ! flock -n 9; then
	say "another build into $out is running; waiting for it"
	flock 9
fi

# ------------------------------------------------------------------ the kernel
# The siw VM's build owns the kernel: its release pin, the unpacked image and headers.
SIWVM_OUT=$siwout "$repo/scripts/siw-vm/build.sh"
release=$(sed -n 's/^kernel=//p' "$siwout/build.info")
[ -n "$release" ] || fail "no kernel in $siwout/build.info"
image=$siwout/kernel-$release
kbuild=$siwout/headers-$release/usr/src/linux-headers-$release
[ -f "$image/.unpacked" ] && [ -f "$kbuild/Makefile" ] || fail "the siw VM's kernel or headers are missing in $siwout"

# ------------------------------------------------------------------ host packages
# Beyond what the siw VM's build installs: ethtool (emunic0's statistics in the guest).
pkgs=(ethtool busybox-static iproute2 kmod cpio gzip make gcc-12 libc6-dev)
installed() { [ "$(dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || fail "missing Debian packages: ${missing[*]}; run this as root once"
	say "installing ${missing[*]}"
	apt-get update >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi

# ------------------------------------------------------------------ the stamp
inputs() {
	echo "kernel $release"
	cat "$here/build.sh" "$here/guest-init.sh" "$repo"/guest/emunic/* "$repo/rings/c/emunic_abi.h"
	dpkg-query -W -f '${Package} ${Version}\n' "${pkgs[@]}" 2>/dev/null
}
stamp=$(inputs | sha256sum | cut -c1-16)
if [ "$rebuild" = 0 ] && [ -f "$out/build.info" ] && grep -qx "stamp=$stamp" "$out/build.info"; then
	say "up to date ($out)"
	exit 0
fi
rm -f "$out/build.info"

# ------------------------------------------------------------------ emunic.ko
# The driver includes the generated ABI header, which names <stddef.h> and <stdint.h>
# for user space; in the kernel those two come from a shim directory that maps them to
# the kernel's own types (first on the include path).
work=$out/emunic-build
rm -rf "$work"
mkdir -p "$work/shim"
cp "$repo"/guest/emunic/*.c "$repo"/guest/emunic/*.h "$repo/guest/emunic/Kbuild" "$work/"
cp "$repo/rings/c/emunic_abi.h" "$work/"
printf '#include <linux/stddef.h>\n' >"$work/shim/stddef.h"
printf '#include <linux/types.h>\n' >"$work/shim/stdint.h"
say "compiling emunic.ko against linux-headers-$release"
make -C "$kbuild" M="$work" -j"$(nproc)" modules >&2
strip --strip-debug -o "$out/emunic.ko" "$work/emunic.ko"

# ------------------------------------------------------------------ initramfs
root=$out/rootfs
rm -rf "$root"
mkdir -p "$root"/{usr/bin,usr/lib/x86_64-linux-gnu,usr/lib/modules,etc,proc,sys,dev,tmp,run,root}
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib "$root/lib64"
cp /bin/busybox "$root/usr/bin/busybox"
applets=$("$root/usr/bin/busybox" --list)
for a in $applets; do [ "$a" = busybox ] || ln -s busybox "$root/usr/bin/$a"; done
tools=(ip ethtool)
for t in "${tools[@]}"; do
	p=$(command -v "$t") || fail "$t is not on the host"
	rm -f "$root/usr/bin/$t"
	cp -L "$p" "$root/usr/bin/$t"
	ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/"; done
cp -L /lib64/ld-linux-x86-64.so.2 "$root/usr/lib/ld-linux-x86-64.so.2"
# Busybox's sh runs its own applet for a name that is one; a function comes first.
for t in "${tools[@]}"; do
	if grep -qx "$t" <<<"$applets"; then printf '%s() { /usr/bin/%s "$@"; }\n' "$t" "$t"; fi
done >"$root/etc/guestvm-functions"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"

# Modules: virtio_net's closure (kmod resolves it from the image's modules.dep), then
# emunic.ko, which needs nothing that is not built in.
: >"$root/etc/guestvm-modules"
modprobe -d "$image" -S "$release" --show-depends virtio_net | awk '$1 == "insmod" { print $2 }' |
	while read -r path; do
		name=${path##*/}
		name=${name%.xz}
		case $path in
		*.xz) xz -dc "$path" >"$root/usr/lib/modules/$name" ;;
		*) cp "$path" "$root/usr/lib/modules/$name" ;;
		esac
		echo "$name" >>"$root/etc/guestvm-modules"
	done
cp "$out/emunic.ko" "$root/usr/lib/modules/emunic.ko"
install -m 0755 "$here/guest-init.sh" "$root/init"
echo "kernel=$release" >"$root/etc/guestvm-build"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >"$out/initramfs.tmp"
mv "$out/initramfs.tmp" "$out/initramfs.cpio.gz"
cp "$siwout/vmlinuz" "$out/vmlinuz"
rm -rf "$root"

cat >"$out/build.info" <<EOF2
stamp=$stamp
kernel=$release
vmlinuz=$out/vmlinuz
initramfs=$out/initramfs.cpio.gz
module=$out/emunic.ko
EOF2
say "built: kernel $release, emunic.ko, initramfs $(du -h "$out/initramfs.cpio.gz" | cut -f1) in $out"

#!/usr/bin/env bash
# build.sh: build the siw VM that tests/siw_test.go boots (see README.md here).
#
#   scripts/siw-vm/build.sh [--rebuild] [--update]
#
#   --rebuild   rebuild siw.ko and the initramfs even when the stamp says they are current
#   --update    ask apt for the newest kernel of the series and move to it if it changed
#
# The result is a Debian kernel, Linux's software iWARP driver (siw.ko, compiled here)
# and an initramfs holding busybox and rdma-core's tools, all under $SIWVM_OUT
# (default: out/ beside this script, git-ignored). Run as root the first time: missing
# Debian packages are installed with apt-get. A second run with nothing changed only
# compares a stamp and exits, without the network.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${SIWVM_OUT:-$here/out}
# Debian 12 carries two kernel series; 6.12 is the newer one, and its siw is the one the
# tests' expectations (docs/iwarp.md) were measured against.
series=${SIWVM_KERNEL_SERIES:-6.12}
rebuild=0
update=0
for arg in "$@"; do
	case $arg in
	--rebuild) rebuild=1 ;;
	--update) update=1 ;;
	-h | --help)
		sed -n '2,13s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "build.sh: unknown argument $arg (try --help)" >&2
		exit 2
		;;
	esac
done

say() { printf 'siw-vm build: %s\n' "$*" >&2; }
fail() {
	printf 'siw-vm build: error: %s\n' "$*" >&2
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

# ------------------------------------------------------------------ host packages
# The VM's userland is copied from the host's own Debian packages (same release, so
# the libraries match), and the module is compiled with the host's gcc against the
# kernel's headers. Only what is missing is installed.
pkgs=(
	qemu-system-x86   # the VM, run under TCG: no KVM needed
	busybox-static    # the VM's shell and small tools
	rdmacm-utils      # rping, rdma_client/rdma_server, ucmatose, rstream
	ibverbs-utils     # ibv_devices, ibv_devinfo
	ibverbs-providers # libsiw, the user-space half of siw
	perftest          # ib_send_bw and friends
	iproute2          # ip, ss, and rdma (link add siw0)
	kmod              # depmod and modprobe --show-depends on the host
	cpio xz-utils gzip
	make gcc-12 libc6-dev pahole # the out-of-tree module build (gcc-12 built Debian's kernel)
)
installed() { [ "$(dpkg-query -W -f '${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" -eq 0 ] || fail "missing Debian packages: ${missing[*]}; run this as root once"
	say "installing ${missing[*]}"
	apt-get update >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi

# ------------------------------------------------------------------ which kernel
# The kernel release is pinned in out/kernel.release once chosen, so an up-to-date build
# needs no apt lookups and does not move under the tests when Debian publishes a new one.
newest_release() {
	# linux-image-6.12-amd64 is a metapackage; its candidate's one dependency names
	# the release.
	apt-cache depends "linux-image-$series-amd64" 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { sub(/^linux-image-/, "", $2); print $2; exit }'
}
release=$(cat "$out/kernel.release" 2>/dev/null || true)
if [ -z "$release" ] || [ "$update" = 1 ]; then
	latest=$(newest_release)
	if [ -z "$latest" ]; then
		apt-get update >&2
		latest=$(newest_release)
	fi
	[ -n "$latest" ] || fail "apt knows no linux-image-$series-amd64"
	if [ "$latest" != "$release" ]; then
		say "kernel $latest${release:+ (was $release)}"
		# The old release's packages and trees go: linux-source-6.12's .deb is named
		# by series, and must not be mistaken for the new release's.
		rm -rf "$out"/kernel-* "$out"/headers-* "$out"/siw-src-* "$out/debs"
		release=$latest
		rebuild=1
		echo "$release" >"$out/kernel.release"
	fi
fi
abi=${release%-amd64} # the headers' common and kbuild packages are named without the flavour

# ------------------------------------------------------------------ the stamp
# Everything the build reads: the kernel, these scripts, and the host packages copied
# into the VM. When it matches the last build, there is nothing to do.
inputs() {
	echo "kernel $release"
	cat "$here/build.sh" "$here/guest-init.sh"
	dpkg-query -W -f '${Package} ${Version}\n' "${pkgs[@]}" 2>/dev/null
}
stamp=$(inputs | sha256sum | cut -c1-16)
if [ "$rebuild" = 0 ] && [ -f "$out/build.info" ] && grep -qx "stamp=$stamp" "$out/build.info"; then
	say "up to date ($out)"
	exit 0
fi
rm -f "$out/build.info" # a build that stops half way must not look finished

# ------------------------------------------------------------------ kernel packages
# Downloaded, never installed: the host keeps its own kernel; the image, headers and the
# siw sources are only unpacked under out/.
debs=$out/debs
mkdir -p "$debs"
deb() { compgen -G "$debs/${1}_*.deb" | head -1; }
download() {
	local name=${1%%=*}
	[ -n "$(deb "$name")" ] && return 0
	say "downloading $1"
	(cd "$debs" && apt-get download "$1" >&2) || {
		apt-get update >&2
		(cd "$debs" && apt-get download "$1" >&2)
	} || fail "apt-get download $1"
}

image=$out/kernel-$release # the unpacked linux-image: vmlinuz and the modules
if [ ! -f "$image/.unpacked" ]; then
	download "linux-image-$release-unsigned"
	rm -rf "$image"
	dpkg-deb -x "$(deb "linux-image-$release-unsigned")" "$image"
	touch "$image/.unpacked"
fi
version=$(dpkg-deb -f "$(deb "linux-image-$release-unsigned")" Version)

headers=$out/headers-$release
kbuild=$headers/usr/src/linux-headers-$release
if [ ! -f "$headers/.unpacked" ]; then
	rm -rf "$headers"
	for p in "linux-headers-$release" "linux-headers-$abi-common" "linux-kbuild-$abi"; do
		download "$p"
		dpkg-deb -x "$(deb "$p")" "$headers"
	done
	# The flavour's Makefile includes the common tree by its installed path, /usr/src/...;
	# point it at the unpacked copy instead.
	sed -i "s|^include /usr/src/|include $headers/usr/src/|" "$kbuild/Makefile"
	touch "$headers/.unpacked"
fi

# Debian 12's kernels are built without CONFIG_RDMA_SIW, so the driver is compiled here
# from the linux-source package of exactly the image's version: only its siw directory
# is taken out of the tarball.
sources=$out/siw-src-$release
if [ ! -f "$sources/.unpacked" ]; then
	download "linux-source-$series=$version"
	say "extracting drivers/infiniband/sw/siw (reads the whole source tarball once)"
	rm -rf "$sources"
	mkdir -p "$sources"
	dpkg-deb --fsys-tarfile "$(deb "linux-source-$series")" |
		tar -xO --wildcards '*/linux-source-*.tar.xz' |
		xz -dc | tar -x -C "$sources" --strip-components=5 --wildcards '*/drivers/infiniband/sw/siw/*'
	[ -f "$sources/siw_main.c" ] || fail "no siw sources in linux-source-$series $version"
	touch "$sources/.unpacked"
fi

# ------------------------------------------------------------------ siw.ko
# Upstream siw has no module parameters: its MPA choices are compile-time constants.
# The tests need to boot siw with other choices (CRC required, MPA peer-to-peer mode,
# MPA revision 1), so the constants lose their const and become parameters, defaults
# unchanged. No other line of siw is touched.
siw_params=(
	"try_gso|bool|offer and accept siw's private GSO flag in MPA"
	"mpa_crc_required|bool|initiator asks for MPA CRC and refuses a reply without it"
	"mpa_crc_strict|bool|without mpa_crc_required, refuse a peer that asks for CRC"
	"siw_tcp_nagle|bool|keep Nagle on (siw sets TCP_NODELAY otherwise)"
	"peer_to_peer|bool|initiator asks for RFC 6581 peer-to-peer mode"
	"mpa_version|byte|MPA revision the initiator sends (1 or 2)"
)
make_parameters() {
	local dir=$1 entry name type desc
	for entry in "${siw_params[@]}"; do
		IFS='|' read -r name type desc <<<"$entry"
		if [ "$type" = bool ]; then
			# 'const bool x;' in siw_main.c and 'extern const bool x;' in siw.h
			grep -qE "^const bool $name( =.*)?;" "$dir/siw_main.c" || fail "siw_main.c has no const $name"
			sed -i -E "s/^const bool $name( =|;)/bool $name\1/" "$dir/siw_main.c"
			sed -i -E "s/^extern const bool $name;/extern bool $name;/" "$dir/siw.h"
		fi
		printf 'module_param(%s, %s, 0644);\nMODULE_PARM_DESC(%s, "%s");\n' \
			"$name" "$type" "$name" "$desc" >>"$dir/siw_main.c"
	done
}
module=$out/siw.ko
work=$out/siw-build
say "compiling siw.ko against linux-headers-$release"
rm -rf "$work"
mkdir -p "$work"
cp "$sources"/*.[ch] "$sources/Makefile" "$work/"
make_parameters "$work"
make -C "$kbuild" M="$work" CONFIG_RDMA_SIW=m -j"$(nproc)" modules >&2
strip --strip-debug -o "$module" "$work/siw.ko"

# ------------------------------------------------------------------ initramfs
root=$out/rootfs
rm -rf "$root"
mkdir -p "$root"/{usr/bin,usr/lib/x86_64-linux-gnu/libibverbs,etc/libibverbs.d,proc,sys,dev,tmp,run,root}
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib "$root/lib64"

cp /bin/busybox "$root/usr/bin/busybox"
applets=$("$root/usr/bin/busybox" --list)
for a in $applets; do [ "$a" = busybox ] || ln -s busybox "$root/usr/bin/$a"; done

# The tools the tests and a person debugging by hand run in the VM. A real binary
# replaces busybox's applet of the same name (ip: busybox's cannot do what iproute2 does).
tools=(rping ucmatose rdma_client rdma_server rstream riostream udaddy mckey
	ib_send_bw ib_send_lat ib_write_bw ib_write_lat ib_read_bw ib_read_lat
	ibv_devices ibv_devinfo rdma ip ss)
libs=()
for t in "${tools[@]}"; do
	p=$(command -v "$t") || fail "$t is not on the host (package list above out of step?)"
	rm -f "$root/usr/bin/$t"
	cp -L "$p" "$root/usr/bin/$t"
	libs+=("$p")
done
# siw's user-space provider is dlopen()ed by libibverbs, found through its .driver file.
for p in /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav*.so; do
	cp -L "$p" "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
	libs+=("$p")
done
cp /etc/libibverbs.d/siw.driver "$root/etc/libibverbs.d/"
# glibc dlopen()s libgcc_s to unwind a cancelled thread (rping cancels its CQ thread);
# ldd cannot see that.
libs+=(/usr/lib/x86_64-linux-gnu/libgcc_s.so.1)
for f in "${libs[@]}"; do
	case $f in *.so*) echo "$f" ;; esac
	ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r lib; do
	case $lib in
	*/libibverbs/*) ;; # providers were copied above, into their own directory
	*) cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/${lib##*/}" ;;
	esac
done
# The program interpreter is asked for by its absolute path.
cp -L /lib64/ld-linux-x86-64.so.2 "$root/usr/lib/ld-linux-x86-64.so.2"

# Busybox's sh runs its own applet for a name that is one, whatever PATH says; a
# function comes first, so every replaced applet gets one that calls the real tool.
for t in "${tools[@]}"; do
	if grep -qx "$t" <<<"$applets"; then printf '%s() { /usr/bin/%s "$@"; }\n' "$t" "$t"; fi
done >"$root/etc/siwvm-functions"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"

# Modules: the closure that siw, the RDMA connection manager's user interface and the
# virtio NIC need, in the order modprobe would load them (kmod resolves it here on the
# host, from the image's modules.dep with siw.ko added), decompressed so that busybox's
# insmod can read them. crc32c_generic goes first: siw's libcrc32c asks the crypto API
# for crc32c when it loads, and nothing in the VM could load it on demand. 8021q (with
# its garp, mrp, stp and llc) is the kernel's VLAN stack: the VLAN trunk test
# (tests/vlan_vm_test.go) puts eth0.ID interfaces on the VM's NIC.
moddir=$image/lib/modules/$release
mkdir -p "$moddir/extra"
cp "$module" "$moddir/extra/siw.ko"
depmod -b "$image" "$release"
mkdir -p "$root/usr/lib/modules"
: >"$root/etc/siwvm-modules"
for m in crc32c_generic virtio_net rdma_ucm siw 8021q; do
	modprobe -d "$image" -S "$release" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r path; do
	name=${path##*/}
	name=${name%.xz}
	case $path in
	*.xz) xz -dc "$path" >"$root/usr/lib/modules/$name" ;;
	*) cp "$path" "$root/usr/lib/modules/$name" ;;
	esac
	echo "$name" >>"$root/etc/siwvm-modules"
done
for m in siw.ko 8021q.ko; do
	grep -qx "$m" "$root/etc/siwvm-modules" || fail "$m is not in the module list"
done

modules=$(tr '\n' ' ' <"$root/etc/siwvm-modules")
install -m 0755 "$here/guest-init.sh" "$root/init"
{
	echo "kernel=$release"
	echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	dpkg-query -W -f '${Package}=${Version}\n' rdmacm-utils perftest busybox-static iproute2
} >"$root/etc/siwvm-build"

# newc, owned by root, in a stable order: the same inputs give the same archive layout.
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
	gzip -6 >"$out/initramfs.tmp"
mv "$out/initramfs.tmp" "$out/initramfs.cpio.gz"
cp "$image/boot/vmlinuz-$release" "$out/vmlinuz"
rm -rf "$root" "$work"

# build.info is written last: run.sh and the tests take its presence as "built".
cat >"$out/build.info" <<EOF
stamp=$stamp
kernel=$release
kernel-version=$version
vmlinuz=$out/vmlinuz
initramfs=$out/initramfs.cpio.gz
modules=$modules
EOF
say "built: kernel $release, initramfs $(du -h "$out/initramfs.cpio.gz" | cut -f1) in $out"

#!/usr/bin/env bash
# run.sh: boot the guest VM once, run a script in it, and exit with the script's status.
#
#   scripts/guest-vm/run.sh --ivshmem SOCKET --ip CIDR [options] -- SCRIPT...
#   scripts/guest-vm/run.sh --virtio-tap TAP --virtio-ip CIDR [options] -- SCRIPT...
#   scripts/guest-vm/run.sh --check
#
# With --ivshmem the VM has QEMU's ivshmem-doorbell device on the ivshmem server at
# SOCKET ('emunic device --ivshmem SOCKET' must be serving there), and emunic.ko brings it
# up as emunic0 with address CIDR. With --virtio-tap it also (or only) has a virtio-net NIC
# on the host TAP TAP, as eth0. SCRIPT's words are joined and run by busybox sh in the VM.
#
#   --ivshmem PATH      the ivshmem server's socket
#   --vectors N         ivshmem vectors, each way (default 5: the device uses 1 + 4 rings one way, 3 the other)
#   --ip CIDR           emunic0's address
#   --virtio-tap NAME   a virtio-net NIC on this host TAP (created if missing)
#   --virtio-ip CIDR    eth0's address
#   --emunic-param K=V  a module parameter of emunic.ko, repeatable
#   --log FILE          also keep the whole console in FILE
#   --timeout S         stop the VM after S seconds (default 300)
#   --mem SIZE          guest memory (default 768M)
#   --dmesg             print the guest's kernel log after the script
#   --qemu-arg ARG      one more argument for QEMU, repeatable (-d trace:ivshmem*, say)
#   --pidfile FILE      QEMU writes its process ID there (to kill the guest from outside)
#   --check             exit 0 if the VM is built, else say what to run and exit 1
#
# Exit status: the script's; 124 when the timeout struck; 125 when the VM ended without
# reporting a status. Console lines GUESTVM-READY and GUESTVM-RESULT (guest-init.sh) mark
# the script's start and end for harnesses.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${GUESTVM_OUT:-$here/out}

sock='' vectors=5 addr='' vtap='' vaddr='' log='' timeout_s=300 mem=768M dmesg=0
modparams=()
extra=()
usage() {
	sed -n '2,31s/^# \{0,1\}//p' "$0"
	exit "$1"
}
while [ $# -gt 0 ]; do
	case $1 in
	--ivshmem) sock=$2 && shift ;;
	--vectors) vectors=$2 && shift ;;
	--ip) addr=$2 && shift ;;
	--virtio-tap) vtap=$2 && shift ;;
	--virtio-ip) vaddr=$2 && shift ;;
	--emunic-param) modparams+=("emunic.$2") && shift ;;
	--log) log=$2 && shift ;;
	--timeout) timeout_s=$2 && shift ;;
	--mem) mem=$2 && shift ;;
	--dmesg) dmesg=1 ;;
	--qemu-arg) extra+=("$2") && shift ;;
	--pidfile) extra+=(-pidfile "$2") && shift ;;
	--check)
		if [ -f "$out/build.info" ] && command -v qemu-system-x86_64 >/dev/null; then exit 0; fi
		echo "the guest VM is not built in $out: run $here/build.sh as root" >&2
		exit 1
		;;
	-h | --help) usage 0 ;;
	--)
		shift
		break
		;;
	*)
		echo "run.sh: unknown option $1 (the script goes after --)" >&2
		usage 2
		;;
	esac
	shift
done
script="$*"
die() {
	echo "run.sh: $*" >&2
	exit 125
}
[ -f "$out/build.info" ] || die "the VM is not built in $out: run $here/build.sh"
[ -n "$sock" ] || [ -n "$vtap" ] || die "give --ivshmem or --virtio-tap (or both)"
[ -z "$sock" ] || [ -n "$addr" ] || die "--ivshmem needs --ip"
[ -z "$vtap" ] || [ -n "$vaddr" ] || die "--virtio-tap needs --virtio-ip"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/guestvm-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/cpio/guestvm-run"
{
	printf "VM_ADDR='%s'\nVM_VIRTIO_ADDR='%s'\nVM_DMESG='%s'\n" "${sock:+$addr}" "${vtap:+$vaddr}" "$dmesg"
	printf "VM_MODPARAMS='%s'\n" "${modparams[*]:-}"
} >"$tmp/cpio/guestvm-run/config"
printf '%s\n' "$script" >"$tmp/cpio/guestvm-run/script"
(cd "$tmp/cpio" && find . -mindepth 1 | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$tmp/run.cpio.gz"
cat "$out/initramfs.cpio.gz" "$tmp/run.cpio.gz" >"$tmp/initrd"

qemu=(qemu-system-x86_64
	-machine q35 -accel tcg -cpu max -smp 1 -m "$mem"
	-nodefaults -no-user-config -display none -no-reboot
	-kernel "$out/vmlinuz" -initrd "$tmp/initrd"
	-append "console=ttyS0,115200 quiet loglevel=3 panic=1 rdinit=/init"
	-serial stdio -monitor none)
if [ -n "$sock" ]; then
	# QEMU connects to the server as a client and takes BAR2 and the eventfds from it.
	qemu+=(-chardev "socket,path=$sock,id=ivs0" -device "ivshmem-doorbell,chardev=ivs0,vectors=$vectors")
fi
if [ -n "$vtap" ]; then
	if ! ip link show dev "$vtap" >/dev/null 2>&1; then
		ip tuntap add dev "$vtap" mode tap || die "cannot create TAP $vtap (root?)"
	fi
	ip link set dev "$vtap" up
	# virtio-net as a guest normally has it: vhost off (TCG), offloads on.
	qemu+=(-netdev "tap,id=net0,ifname=$vtap,script=no,downscript=no"
		-device "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:02")
fi

qemu+=("${extra[@]}")
console=${log:-$tmp/console}
set +e
timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null 2>"$tmp/qemu.err" | tee "$console"
status=("${PIPESTATUS[@]}")
set -e
[ -s "$tmp/qemu.err" ] && sed 's/^/qemu: /' "$tmp/qemu.err" >&2
rc=$(tr -d '\r' <"$console" | sed -n 's/^GUESTVM-RESULT rc=\([0-9]*\).*/\1/p' | tail -n 1)
[ -z "$rc" ] || exit "$rc"
case ${status[0]} in
124 | 137)
	echo "run.sh: the VM ran past --timeout $timeout_s" >&2
	exit 124
	;;
esac
echo "run.sh: the VM ended (QEMU status ${status[0]}) without a GUESTVM-RESULT line" >&2
exit 125

#!/usr/bin/env bash
# run.sh: boot the siw VM once, run a script in it, and exit with the script's status.
#
#   scripts/siw-vm/run.sh --tap TAP --ip CIDR [options] -- SCRIPT...
#   scripts/siw-vm/run.sh --check
#
# SCRIPT's words are joined and run by busybox sh in the VM, after siw0 is up on eth0;
# a multi-line script can be one word. The VM's NIC is a virtio NIC on host TAP TAP.
#
#   --tap NAME        the host TAP for the VM's NIC (created if missing)
#   --ip CIDR         the VM's address on eth0
#   --ip6 CIDR        an IPv6 address on eth0 too (IPv6 is off in the VM without one)
#   --bridge NAME     put the TAP on this Linux bridge (created if missing)
#   --host-ip CIDR    give the bridge (or the TAP, without --bridge) this host address
#   --rm-tap          delete the TAP afterwards if this run created it
#   --mtu N           eth0's MTU
#   --vlan ID=CIDR    an 802.1Q interface eth0.ID on the VM's NIC with this address,
#                     repeatable (eth0 becomes a VLAN trunk; its own --ip stays untagged)
#   --siw-param K=V   a siw module parameter, repeatable: mpa_version=1, mpa_crc_required=1,
#                     mpa_crc_strict=1, peer_to_peer=1, try_gso=1, siw_tcp_nagle=1
#   --pcap FILE       write every frame of the VM's NIC to FILE (QEMU's filter-dump)
#   --log FILE        also keep the whole console in FILE
#   --timeout S       stop the VM after S seconds (default 300)
#   --mem SIZE        guest memory (default 512M)
#   --dmesg           print the guest's kernel log after the script
#   --check           exit 0 if the VM is built, else say what to run and exit 1
#
# Exit status: the script's; 124 when the timeout struck; 125 when the VM ended without
# reporting a status (it crashed, or did not boot). Console lines SIWVM-READY and
# SIWVM-RESULT (guest-init.sh) mark the script's start and end for harnesses.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${SIWVM_OUT:-$here/out}

tap='' addr='' addr6='' bridge='' host_ip='' rm_tap=0 mtu='' pcap='' log='' timeout_s=300 mem=512M dmesg=0
modparams=()
vlans=()
usage() {
	sed -n '2,30s/^# \{0,1\}//p' "$0"
	exit "$1"
}
while [ $# -gt 0 ]; do
	case $1 in
	--tap) tap=$2 && shift ;;
	--ip) addr=$2 && shift ;;
	--ip6) addr6=$2 && shift ;;
	--bridge) bridge=$2 && shift ;;
	--host-ip) host_ip=$2 && shift ;;
	--rm-tap) rm_tap=1 ;;
	--mtu) mtu=$2 && shift ;;
	--siw-param) modparams+=("siw.$2") && shift ;;
	--vlan)
		[[ $2 =~ ^[0-9]+=[0-9a-fA-F.:]+/[0-9]+$ ]] || {
			echo "run.sh: --vlan wants ID=CIDR (10=10.77.10.2/24), not $2" >&2
			exit 2
		}
		vlans+=("$2") && shift
		;;
	--pcap) pcap=$2 && shift ;;
	--log) log=$2 && shift ;;
	--timeout) timeout_s=$2 && shift ;;
	--mem) mem=$2 && shift ;;
	--dmesg) dmesg=1 ;;
	--check)
		if [ -f "$out/build.info" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initramfs.cpio.gz" ]; then
			command -v qemu-system-x86_64 >/dev/null && exit 0
			echo "qemu-system-x86_64 is not installed: run $here/build.sh as root" >&2
			exit 1
		fi
		echo "the siw VM is not built in $out: run $here/build.sh as root (about a minute the first time)" >&2
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
[ -n "$tap" ] || die "--tap is required"
[ -n "$addr" ] || die "--ip is required"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing: run $here/build.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/siwvm-run.XXXXXX")
made_tap=0
cleanup() {
	if [ "$made_tap" = 1 ] && [ "$rm_tap" = 1 ]; then ip link del "$tap" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# Host devices this script makes get no IPv6, for the same reason the guest has none:
# captures without router solicitations.
quiet_v6() { echo 1 >"/proc/sys/net/ipv6/conf/$1/disable_ipv6" 2>/dev/null || true; }
if ! ip link show dev "$tap" >/dev/null 2>&1; then
	ip tuntap add dev "$tap" mode tap || die "cannot create TAP $tap (root?)"
	made_tap=1
	quiet_v6 "$tap"
fi
if [ -n "$bridge" ]; then
	if ! ip link show dev "$bridge" >/dev/null 2>&1; then
		# No spanning tree: a new port forwards at once instead of after 15 s of learning.
		ip link add "$bridge" type bridge stp_state 0 forward_delay 0 || die "cannot create bridge $bridge"
		quiet_v6 "$bridge"
	fi
	ip link set dev "$bridge" up
	ip link set dev "$tap" master "$bridge"
fi
ip link set dev "$tap" up
if [ -n "$host_ip" ]; then
	on=${bridge:-$tap}
	ip -o addr show dev "$on" | grep -qF " ${host_ip} " || ip addr add "$host_ip" dev "$on"
fi

# A MAC from the address, so that each VM on a bridge has its own and a capture says
# which VM a frame came from: 52:54:00 (QEMU's prefix) and the address's last three bytes.
IFS=./ read -r _ b c d _ <<<"$addr"
mac=$(printf '52:54:00:%02x:%02x:%02x' "$b" "$c" "$d")

# The per-boot archive: settings and the script (see guest-init.sh).
mkdir -p "$tmp/cpio/siwvm-run"
{
	printf "VM_ADDR='%s'\nVM_ADDR6='%s'\nVM_MTU='%s'\nVM_DMESG='%s'\n" "$addr" "$addr6" "$mtu" "$dmesg"
	printf "VM_MODPARAMS='%s'\n" "${modparams[*]:-}"
	printf "VM_VLANS='%s'\n" "${vlans[*]:-}"
} >"$tmp/cpio/siwvm-run/config"
printf '%s\n' "$script" >"$tmp/cpio/siwvm-run/script"
# Compressed like the first: after a gzip member the kernel's unpacker expects another
# compressed one (or zero padding), and rejects a bare cpio that follows.
(cd "$tmp/cpio" && find . -mindepth 1 | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$tmp/run.cpio.gz"
cat "$out/initramfs.cpio.gz" "$tmp/run.cpio.gz" >"$tmp/initrd"

# virtio-net with every offload off and no virtio-net header on the TAP: the guest
# then sends ordinary frames of at most the MTU with their checksums filled in, which
# is what a real NIC's peer sees and what the tests' captures decode.
nic="virtio-net-pci,netdev=net0,mac=$mac,mrg_rxbuf=off,csum=off,guest_csum=off,gso=off"
for f in guest_tso4 guest_tso6 guest_ecn guest_ufo host_tso4 host_tso6 host_ecn host_ufo; do
	nic="$nic,$f=off"
done
qemu=(qemu-system-x86_64
	-machine q35 -accel tcg -cpu max -smp 1 -m "$mem"
	-nodefaults -no-user-config -display none -no-reboot
	-kernel "$out/vmlinuz" -initrd "$tmp/initrd"
	# panic=1 and -no-reboot: a guest panic ends QEMU instead of hanging until the timeout.
	-append "console=ttyS0,115200 quiet loglevel=3 panic=1 rdinit=/init"
	-netdev "tap,id=net0,ifname=$tap,script=no,downscript=no,vnet_hdr=off"
	-device "$nic"
	-serial stdio -monitor none)
[ -z "$pcap" ] || qemu+=(-object "filter-dump,id=dump0,netdev=net0,file=$pcap")

console=${log:-$tmp/console}
set +e
# The console goes to stdout as it comes (tee does not hold lines back), and to a file
# for the status.
timeout -k 5 "$timeout_s" "${qemu[@]}" </dev/null 2>"$tmp/qemu.err" | tee "$console"
status=("${PIPESTATUS[@]}")
set -e
[ -s "$tmp/qemu.err" ] && sed 's/^/qemu: /' "$tmp/qemu.err" >&2
rc=$(tr -d '\r' <"$console" | sed -n 's/^SIWVM-RESULT rc=\([0-9]*\).*/\1/p' | tail -n 1)
[ -z "$rc" ] || exit "$rc"
case ${status[0]} in
124 | 137)
	echo "run.sh: the VM ran past --timeout $timeout_s" >&2
	exit 124
	;;
esac
echo "run.sh: the VM ended (QEMU status ${status[0]}) without a SIWVM-RESULT line" >&2
exit 125

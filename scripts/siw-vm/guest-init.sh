#!/bin/sh
# The siw VM's /init (busybox sh, PID 1). build.sh installs it into the initramfs.
#
# run.sh appends a second, small cpio archive for each boot (the kernel unpacks
# concatenated archives in turn), holding:
#   /siwvm-run/config   shell assignments: VM_ADDR (CIDR on eth0), VM_ADDR6 (an IPv6
#                       CIDR on eth0 too, or empty: IPv6 off), VM_MTU,
#                       VM_MODPARAMS ("module.param=value ..."), VM_DMESG (1: print the
#                       kernel log after the script), VM_VLANS ("ID=CIDR ...": an
#                       802.1Q interface eth0.ID with that address for each)
#   /siwvm-run/script   what to run, with busybox sh
#
# It then brings siw up on eth0 as siw0 and runs the script. The console protocol that
# run.sh and the tests read, one line each:
#   SIWVM-READY addr=<CIDR> kernel=<release> t=<uptime>   siw0 is up; the script starts
#   SIWVM-RESULT rc=<status> t=<uptime>                   the script ended with status
#   SIWVM-ERROR <what>                                    setup failed (then rc=250)
export PATH=/usr/bin HOME=/root
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
for d in /dev/shm /tmp /run; do mount -t tmpfs tmpfs $d; done

uptime_s() { read -r up _ </proc/uptime && echo "$up"; }
power_off() {
	sync
	poweroff -f
	# Not reached unless poweroff failed; PID 1 must never return.
	echo o >/proc/sysrq-trigger
	while :; do sleep 60; done
}
setup_failed() {
	echo "SIWVM-ERROR $*"
	echo "SIWVM-RESULT rc=250 t=$(uptime_s)"
	power_off
}

VM_ADDR='' VM_ADDR6='' VM_MTU='' VM_MODPARAMS='' VM_DMESG=0 VM_VLANS=''
[ -f /siwvm-run/config ] && . /siwvm-run/config

# Keep kernel chatter off the console the harness parses, errors excepted.
echo "3 4 1 3" >/proc/sys/kernel/printk

# Load the modules in the order build.sh resolved, each with its parameters from
# VM_MODPARAMS (siw.mpa_version=1 gives siw 'mpa_version=1').
while read -r ko; do
	mod=${ko%.ko}
	mod=$(echo "$mod" | tr - _)
	args=''
	for p in $VM_MODPARAMS; do
		case $p in "$mod".*) args="$args ${p#"$mod".}" ;; esac
	done
	# shellcheck disable=SC2086 # one word per parameter
	insmod "/lib/modules/$ko" $args || setup_failed "insmod $ko$args"
done </etc/siwvm-modules

# IPv6 off unless the VM has an IPv6 address: the captures the tests decode then hold
# no router solicitations or MLD. With one, IPv6 stays on but quiet: no router
# solicitations, no router advertisements taken, no duplicate address detection
# (the address is usable at once); neighbour discovery and MLD for its groups remain.
v6conf() {
	for c in all default ${1:-}; do
		echo "$2" >"/proc/sys/net/ipv6/conf/$c/$3" || setup_failed "ipv6 $c $3"
	done
}
if [ -z "$VM_ADDR6" ]; then
	v6conf '' 1 disable_ipv6
else
	v6conf '' 0 accept_ra
	v6conf '' 0 router_solicitations
	v6conf '' 0 accept_dad
fi
/usr/bin/ip link set lo up

if [ -n "$VM_ADDR" ]; then
	n=0
	until [ -e /sys/class/net/eth0 ]; do
		n=$((n + 1))
		[ $n -le 100 ] || setup_failed "no eth0 (is the NIC on the QEMU command line?)"
		sleep 0.1
	done
	[ -z "$VM_MTU" ] || /usr/bin/ip link set eth0 mtu "$VM_MTU" || setup_failed "mtu $VM_MTU"
	/usr/bin/ip addr add "$VM_ADDR" dev eth0 || setup_failed "address $VM_ADDR"
	if [ -n "$VM_ADDR6" ]; then
		# eth0 may predate the 'default' settings above: its own too.
		v6conf eth0 0 accept_ra
		v6conf eth0 0 router_solicitations
		v6conf eth0 0 accept_dad
		/usr/bin/ip addr add "$VM_ADDR6" dev eth0 nodad || setup_failed "address $VM_ADDR6"
	fi
	/usr/bin/ip link set eth0 up || setup_failed "eth0 up"
	# eth0 is then a VLAN trunk too: untagged frames are eth0's, tagged ones its
	# VLAN interfaces' (8021q is among the modules).
	for v in $VM_VLANS; do
		id=${v%%=*}
		/usr/bin/ip link add link eth0 name "eth0.$id" type vlan id "$id" || setup_failed "VLAN $id on eth0"
		/usr/bin/ip addr add "${v#*=}" dev "eth0.$id" || setup_failed "address ${v#*=} on eth0.$id"
		/usr/bin/ip link set "eth0.$id" up || setup_failed "eth0.$id up"
	done
	/usr/bin/rdma link add siw0 type siw netdev eth0 || setup_failed "rdma link add siw0"
	# A SYN sent before the link has carrier is lost, and TCP waits a second to resend.
	n=0
	until [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" = 1 ] || [ $n -ge 50 ]; do
		n=$((n + 1))
		sleep 0.1
	done
fi
# rping and friends register their buffers.
ulimit -l unlimited

cd /root || setup_failed "no /root"
echo "SIWVM-READY addr=${VM_ADDR:-none}${VM_ADDR6:+ addr6=$VM_ADDR6} kernel=$(uname -r) t=$(uptime_s)"
rc=0
if [ -f /siwvm-run/script ]; then
	cat /etc/siwvm-functions /siwvm-run/script >/tmp/script.sh
	sh /tmp/script.sh </dev/null
	rc=$?
fi
if [ "$VM_DMESG" = 1 ]; then
	echo "SIWVM-DMESG-BEGIN"
	dmesg
	echo "SIWVM-DMESG-END"
fi
# The empty line first: a script whose output ends without a newline would otherwise
# push the result into the middle of a line, where no harness looks for it.
printf '\nSIWVM-RESULT rc=%s t=%s\n' "$rc" "$(uptime_s)"
power_off

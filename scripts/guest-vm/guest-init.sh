#!/bin/sh
# The guest VM's /init (busybox sh, PID 1). build.sh installs it into the initramfs.
#
# run.sh appends a second, small cpio archive for each boot, holding:
#   /guestvm-run/config   shell assignments: VM_ADDR (CIDR on emunic0, empty: do not load
#                         emunic.ko), VM_VIRTIO_ADDR (CIDR on eth0, virtio-net; empty: none),
#                         VM_MODPARAMS ("emunic.param=value ..."), VM_DMESG (1: print the
#                         kernel log after the script)
#   /guestvm-run/script   what to run, with busybox sh
#
# The console protocol that run.sh and the tests read, one line each:
#   GUESTVM-READY addr=<CIDR> kernel=<release> t=<uptime>   the NICs are up; the script starts
#   GUESTVM-RESULT rc=<status> t=<uptime>                   the script ended with status
#   GUESTVM-ERROR <what>                                    setup failed (then rc=250)
export PATH=/usr/bin HOME=/root
umask 022

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
for d in /tmp /run; do mount -t tmpfs tmpfs $d; done

uptime_s() { read -r up _ </proc/uptime && echo "$up"; }
power_off() {
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	while :; do sleep 60; done
}
setup_failed() {
	echo "GUESTVM-ERROR $*"
	echo "GUESTVM-RESULT rc=250 t=$(uptime_s)"
	power_off
}

VM_ADDR='' VM_VIRTIO_ADDR='' VM_MODPARAMS='' VM_DMESG=0
[ -f /guestvm-run/config ] && . /guestvm-run/config
echo "3 4 1 3" >/proc/sys/kernel/printk
echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6
/usr/bin/ip link set lo up

# wait_for IFACE: until it exists (5 s).
wait_for() {
	n=0
	until [ -e "/sys/class/net/$1" ]; do
		n=$((n + 1))
		[ $n -le 50 ] || return 1
		sleep 0.1
	done
}
# up IFACE CIDR: address, up, and wait (5 s) for carrier.
up() {
	/usr/bin/ip addr add "$2" dev "$1" || setup_failed "address $2 on $1"
	/usr/bin/ip link set "$1" up || setup_failed "$1 up"
	n=0
	until [ "$(cat "/sys/class/net/$1/carrier" 2>/dev/null)" = 1 ]; do
		n=$((n + 1))
		[ $n -le 50 ] || setup_failed "$1 has no carrier after 5 s"
		sleep 0.1
	done
}

if [ -n "$VM_VIRTIO_ADDR" ]; then
	while read -r ko; do
		insmod "/lib/modules/$ko" || setup_failed "insmod $ko"
	done </etc/guestvm-modules
	wait_for eth0 || setup_failed "no eth0 (is the virtio NIC on the QEMU command line?)"
	up eth0 "$VM_VIRTIO_ADDR"
fi
if [ -n "$VM_ADDR" ]; then
	args=''
	for p in $VM_MODPARAMS; do
		case $p in emunic.*) args="$args ${p#emunic.}" ;; esac
	done
	# shellcheck disable=SC2086 # one word per parameter
	insmod /lib/modules/emunic.ko $args || setup_failed "insmod emunic.ko$args"
	wait_for emunic0 || setup_failed "no emunic0 (is the ivshmem-doorbell device on the QEMU command line, and its server up?)"
	up emunic0 "$VM_ADDR"
fi

cd /root || setup_failed "no /root"
echo "GUESTVM-READY addr=${VM_ADDR:-none} kernel=$(uname -r) t=$(uptime_s)"
rc=0
if [ -f /guestvm-run/script ]; then
	cat /etc/guestvm-functions /guestvm-run/script >/tmp/script.sh
	sh /tmp/script.sh </dev/null
	rc=$?
fi
if [ "$VM_DMESG" = 1 ]; then
	echo "GUESTVM-DMESG-BEGIN"
	dmesg
	echo "GUESTVM-DMESG-END"
fi
printf '\nGUESTVM-RESULT rc=%s t=%s\n' "$rc" "$(uptime_s)"
power_off

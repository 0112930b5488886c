#!/usr/bin/env bash
# pair.sh: two siw VMs on one bridge, a server and then a client: siw against siw, the
# reference traffic that emunic's iWARP engine is compared with.
#
#   scripts/siw-vm/pair.sh --server 'rping -s -a 0.0.0.0 -v -C 3 -S 64' \
#                          --client 'rping -c -a 10.77.9.2 -v -C 3 -S 64' [options]
#
#   --port N          the port the server listens on; the client boots once it does
#                     (default 7174, rping's; rdma_server, ucmatose and rstream use 7471)
#   --subnet A.B.C    the /24 the pair lives in (default 10.77.9): the server is .2, the
#                     client .3
#   --pcap FILE       every frame of the client VM's NIC: the whole session
#   --siw-param K=V   a siw module parameter for both VMs (repeatable)
#   --timeout S       per VM (default 180)
#
# The bridge and TAPs are made for the run and removed after it. Exit status: the
# client's, or the server's when the client's is 0.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
server_cmd='' client_cmd='' port=7174 subnet=10.77.9 pcap='' timeout_s=180
common=()
while [ $# -gt 0 ]; do
	case $1 in
	--server) server_cmd=$2 && shift ;;
	--client) client_cmd=$2 && shift ;;
	--port) port=$2 && shift ;;
	--subnet) subnet=$2 && shift ;;
	--pcap) pcap=$(realpath -m "$2") && shift ;;
	--siw-param) common+=(--siw-param "$2") && shift ;;
	--timeout) timeout_s=$2 && shift ;;
	-h | --help)
		sed -n '2,17s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "pair.sh: unknown option $1 (try --help)" >&2
		exit 2
		;;
	esac
	shift
done
if [ -z "$server_cmd" ] || [ -z "$client_cmd" ]; then
	echo "pair.sh: --server and --client are both needed" >&2
	exit 2
fi
"$here/run.sh" --check

# Names of our own for this run, so that two pairs, or a test, never share a device.
tag=$(printf '%04x' $((RANDOM % 65536)))
bridge=siwpbr$tag server_tap=siwps$tag client_tap=siwpc$tag
tmp=$(mktemp -d "${TMPDIR:-/tmp}/siwvm-pair.XXXXXX")
server_pid=''
cleanup() {
	[ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
	for dev in "$server_tap" "$client_tap" "$bridge"; do ip link del "$dev" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
ip link add "$bridge" type bridge stp_state 0 forward_delay 0
echo 1 >"/proc/sys/net/ipv6/conf/$bridge/disable_ipv6" 2>/dev/null || true
ip link set dev "$bridge" up

# The server announces itself once its port listens (siw listens on a kernel TCP
# socket, so ss sees it), and the client VM is started only then.
mkfifo "$tmp/server.console"
"$here/run.sh" --tap "$server_tap" --rm-tap --bridge "$bridge" --ip "$subnet.2/24" \
	--timeout "$timeout_s" "${common[@]}" -- \
	"$server_cmd 2>&1 &
until ss -ltn | grep -q ':$port '; do sleep 0.05; done
echo SIWPAIR-LISTENING
wait \$!" >"$tmp/server.console" 2>&1 &
server_pid=$!
# Copy the server's console to a file, and return as soon as it listens (or ended).
exec 3<"$tmp/server.console"
listening=0
while IFS= read -r line <&3; do
	printf '%s\n' "${line%$'\r'}" >>"$tmp/server.log"
	case $line in SIWPAIR-LISTENING*)
		listening=1
		break
		;;
	esac
done
if [ "$listening" = 0 ]; then
	echo "pair.sh: the server VM never listened on port $port:" >&2
	cat "$tmp/server.log" >&2
	exit 125
fi
cat <&3 >>"$tmp/server.log" &
drain_pid=$!

set +e
echo "=== client $subnet.3: $client_cmd"
"$here/run.sh" --tap "$client_tap" --rm-tap --bridge "$bridge" --ip "$subnet.3/24" \
	--timeout "$timeout_s" ${pcap:+--pcap "$pcap"} "${common[@]}" -- "$client_cmd" |
	tr -d '\r' | sed -n '/^SIWVM-READY/,/^SIWVM-RESULT/p'
client_rc=${PIPESTATUS[0]}
wait "$server_pid"
server_rc=$?
server_pid=''
wait "$drain_pid"
set -e
echo "=== server $subnet.2: $server_cmd"
tr -d '\r' <"$tmp/server.log" | sed -n '/^SIWVM-READY/,/^SIWVM-RESULT/p'
echo "pair.sh: client rc=$client_rc, server rc=$server_rc${pcap:+, capture $pcap}"
[ "$client_rc" = 0 ] || exit "$client_rc"
exit "$server_rc"

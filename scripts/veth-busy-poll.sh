#!/bin/bash
# Does a veth's XDP NAPI honour the kernel's preferred busy polling?
# Runs `vadapt serve` with an uplink on a veth whose far end (in a network
# namespace) sends COUNT frames to an echo port behind it, once under
# interrupt mode and once under EE-KBP, and prints for each: the frames
# echoed, the NET_RX softIRQs the host ran per frame (/proc/softirqs,
# every CPU), and the uplink worker's NAPI line (EE-KBP: the socket's
# SO_INCOMING_NAPI_ID, or the line saying there is none). With busy
# polling working, the NAPI poll runs in the worker's recvfrom, not in the
# softIRQ, so EE-KBP's softIRQs a frame fall.
#
# Usage (root): scripts/veth-busy-poll.sh VADAPT_BIN [PREFIX] [COUNT]
set -euo pipefail
bin=$1
p=${2:-vbp}
count=${3:-20000}
ns=${p}w host=${p}h peer=${p}p
dir=$(mktemp -d)
cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	ip link del "$host" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$host" type veth peer name "$peer" netns "$ns"
ip -n "$ns" link set "$peer" up
ip link set "$host" up
[ -n "${VETH_GRO:-}" ] && ethtool -K "$host" gro on >/dev/null
net_rx() { awk '/NET_RX/ { s = 0; for (i = 2; i <= NF; i++) s += $i; print s }' /proc/softirqs; }
here=$(cd "$(dirname "$0")/.." && pwd)
for policy in interrupt eekbp; do
	"$bin" serve --uplink "name=up0,iface=$host,policy=$policy" --echo e0,mac=02:00:00:00:0e:00 \
		--control "$dir/c.sock" --state-dir "$dir" >"$dir/$policy.log" 2>&1 &
	pid=$!
	sleep 2
	a=$(net_rx)
	out=$(ip netns exec "$ns" python3 "$here/tests/wire/send_and_count.py" "$peer" 020000000e00 "$count" 60)
	b=$(net_rx)
	kill -INT "$pid"
	wait "$pid" || true
	pid=
	echo "$policy: sent, echoed: $out; NET_RX softIRQs a frame: $(awk -v d=$((b - a)) -v n="$count" 'BEGIN { printf "%.3f", d / n }')"
	grep -o 'busy-poll[^"]*napi_id=[0-9]*\|knows no NAPI instance[^"]*\|refuses busy polling[^"]*' "$dir/$policy.log" | head -2 || true
done

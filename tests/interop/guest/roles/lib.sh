# Helpers shared by the guest roles; also callable from the `shell` role.
# Each prints one "VADAPT-RESULT key=value ..." line the host test parses.

# vping PEER COUNT: ping PEER COUNT times (one per 0.2 s, 2 s deadline per reply).
vping() {
    out="$(ping -c "$2" -i 0.2 -W 2 "$1" 2>&1)"
    rc=$?
    tx="$(echo "$out" | sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p')"
    rx="$(echo "$out" | sed -n 's/.* \([0-9]*\) packets received.*/\1/p')"
    echo "VADAPT-RESULT ping_peer=$1 ping_tx=${tx:-0} ping_rx=${rx:-0} rc=$rc"
}

# vpattern N: the deterministic test stream, `seq 1 N` (the host recomputes
# its length and md5 to check both ends).
vpattern() {
    seq 1 "$1"
}

# vsend PEER PORT N: send vpattern N over TCP; retries while the listener is
# not up yet (connection refused), at most 30 times.
vsend() {
    sum="$(vpattern "$3" | md5sum | cut -d' ' -f1)"
    bytes="$(vpattern "$3" | wc -c)"
    n=0
    while [ $n -lt 30 ]; do
        if vpattern "$3" | nc -w 5 "$1" "$2"; then
            echo "VADAPT-RESULT send_bytes=$bytes send_md5=$sum tries=$((n + 1)) rc=0"
            return 0
        fi
        n=$((n + 1))
        sleep 1
    done
    echo "VADAPT-RESULT send_bytes=0 send_md5=none tries=$n rc=1"
    return 1
}

# vrecv PORT: accept one TCP connection, store what arrives, report length
# and md5. `nc -e` makes the stream end when the sender closes (plain
# `nc -l` with stdin at EOF stops reading early in busybox 1.35).
vrecv() {
    rm -f /tmp/rx.bin
    echo "VADAPT-RESULT listening=$1"
    nc -l -p "$1" -e /roles/rx-to-file.sh </dev/null
    rc=$?
    echo "VADAPT-RESULT recv_bytes=$(wc -c </tmp/rx.bin) recv_md5=$(md5sum /tmp/rx.bin | cut -d' ' -f1) rc=$rc"
}

"""A TCP stream each way between the host's own stack and a QEMU guest (TCG,
the Debian kernel's virtio-net driver), through a vadapt TAP port opened with
IFF_VNET_HDR and TUNSETOFFLOAD (issue #15).

Both ends have segmentation offloads on towards vadapt: the host's TAP
accepted checksum and TSO offloads, the guest negotiated CSUM and HOST_TSO4
as well as GUEST_CSUM and GUEST_TSO4. vadapt checks the TCP segments of up
to 64 KiB and passes them whole both ways: into the guest behind their
virtio-net header, into the TAP behind theirs (the kernel takes GSO frames
on any TAP with vnet headers); each stream is checked byte for byte (md5)
at the receiving end. Needs root (a TAP device, an address on it).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading

from test_qemu import pattern

from harness import Guest, Vadapt, ip, port, total

MAC = "52:54:00:5a:00:07"
HOST_IP, GUEST_IP = "10.0.7.254", "10.0.7.2"
TO_GUEST_PORT, TO_HOST_PORT = 5001, 5002
# `seq 1 N`, as the guest's vpattern makes it: ~2 MB.
STREAM_N = 300_000


def receive_one(listener: socket.socket, out: dict) -> None:
    """Accept one connection and keep what arrives until the peer closes."""
    listener.settimeout(150)
    conn, _ = listener.accept()
    conn.settimeout(60)
    h, n = hashlib.md5(), 0
    with conn:
        while chunk := conn.recv(1 << 16):
            h.update(chunk)
            n += len(chunk)
    out["bytes"], out["md5"] = n, h.hexdigest()


def test_tcp_both_ways_between_host_and_guest_through_tap(vadapt_bin, qemu, procs):
    if os.geteuid() != 0:
        from conftest import missing

        missing("a TAP device needs root")
    tap = f"offtap{os.getpid() % 10000}"
    sock = procs.workdir / "vm.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm,socket={sock},queues=1", "--tap", tap],
        cpus=None,
    ).start([sock])
    ip("addr", "add", f"{HOST_IP}/24", "dev", tap)
    ip("link", "set", tap, "up")
    assert "TAP port opened" in "\n".join(d.proc.lines), d.proc.tail()

    g = Guest(procs, "guest", sock, MAC, f"{GUEST_IP}/24", "server", {"port": str(TO_GUEST_PORT)})
    assert g.booted()["mac"] == MAC
    g.result("listening", timeout=30)
    want_bytes, want_md5 = pattern(STREAM_N)
    data = "".join(f"{i}\n" for i in range(1, STREAM_N + 1)).encode()

    # Host -> guest: the host's TSO segments enter through the TAP reader.
    with socket.create_connection((GUEST_IP, TO_GUEST_PORT), timeout=60) as s:
        s.sendall(data)
    got = g.result("recv_bytes", timeout=120)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5), got

    # Guest -> host: the guest's TSO segments enter through its transmit ring.
    listener = socket.create_server((HOST_IP, TO_HOST_PORT))
    out: dict = {}
    t = threading.Thread(target=receive_one, args=(listener, out))
    t.start()
    sent = g.shell_result(f"vsend {HOST_IP} {TO_HOST_PORT} {STREAM_N}", "send_bytes", timeout=150)
    t.join(timeout=160)
    listener.close()
    assert sent["rc"] == "0", sent
    assert (out.get("bytes"), out.get("md5")) == (want_bytes, want_md5), out

    st = d.stats()
    vm, tp = port(st, "vm"), port(st, tap)
    assert total(tp, "tx_bytes") >= want_bytes, tp  # host -> switch
    assert total(vm, "tx_bytes") >= want_bytes, vm  # guest -> switch
    # The offload paths really ran: GSO frames crossed whole, the host's
    # into the guest and the guest's into the TAP.
    assert total(vm, "gso_whole") > 0, vm
    assert total(tp, "gso_whole") > 0, tp
    # Other drops (frames flooded to the VM port before its guest was up)
    # are not this test's business; refused headers are.
    for p in (vm, tp):
        assert sum(q.get("dropped", {}).get("bad_vnet_hdr", 0) for q in p["queues"]) == 0, p
    assert "bad virtio-net header" not in "\n".join(d.proc.lines)
    assert g.poweroff() == 0

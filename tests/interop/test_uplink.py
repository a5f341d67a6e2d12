"""A QEMU TCG guest on a vadapt VM port talks to the kernel's own stack on
the far side of vadapt's AF_XDP uplink (issue #27): a veth pair, one end
given to vadapt as the uplink, the other in a network namespace this test
makes (the "wire").

The guest pings the namespace's address, then a TCP stream goes each way
(namespace -> guest, guest -> namespace), each checked byte for byte (md5)
at the receiving end. The guest's TSO segments are cut in software at the
uplink's egress (AF_XDP carries plain frames), and the namespace's
segments reach the guest as the NIC delivered them. Needs root and
`ip netns`.
"""

from __future__ import annotations

import os
import subprocess

from test_qemu import pattern

from harness import Guest, Vadapt, ip, net_names, port, total, veth_into_namespace

MAC = "52:54:00:5a:00:27"
WIRE_IP, GUEST_IP = "10.0.27.254", "10.0.27.2"
TO_GUEST_PORT, TO_WIRE_PORT = 5001, 5002
# `seq 1 N`, as the guest's vpattern makes it: ~2 MB.
STREAM_N = 300_000

# Inside the namespace: connect to HOST:PORT and send `seq 1 N`.
SEND = """
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = "".join(f"{i}\\n" for i in range(1, n + 1)).encode()
with socket.create_connection((host, port), timeout=120) as s:
    s.sendall(data)
"""

# Inside the namespace: accept one connection on HOST:PORT; print bytes, md5.
RECEIVE = """
import hashlib, socket, sys
host, port = sys.argv[1], int(sys.argv[2])
listener = socket.create_server((host, port))
print("listening", flush=True)
listener.settimeout(150)
conn, _ = listener.accept()
conn.settimeout(60)
h, n = hashlib.md5(), 0
with conn:
    while chunk := conn.recv(1 << 16):
        h.update(chunk)
        n += len(chunk)
print(n, h.hexdigest(), flush=True)
"""


def test_a_guest_and_the_wires_kernel_stack_through_the_uplink(vadapt_bin, qemu, procs):
    if os.geteuid() != 0:
        from conftest import missing

        missing("a network namespace and a veth pair need root")
    ns, host, peer = net_names("q")
    ip("netns", "add", ns)
    try:
        veth_into_namespace(ns, host, peer, f"{WIRE_IP}/24")
        # veth hands XDP a frame with the partial checksum its sender's
        # stack left (a NIC's frames carry complete ones): the far end
        # computes its checksums itself.
        subprocess.run(
            ["ip", "netns", "exec", ns, "ethtool", "-K", peer, "tx", "off"],
            check=True,
            capture_output=True,
            timeout=10,
        )
        ip("link", "set", host, "up")
        run_through_the_uplink(vadapt_bin, procs, ns, host)
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def run_through_the_uplink(vadapt_bin, procs, ns: str, host: str) -> None:
    sock = procs.workdir / "vm.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm",
            f"name=vm,socket={sock},queues=1",
            "--uplink",
            f"name=up0,iface={host},policy=eekbp",
        ],
        cpus=None,
    ).start([sock])
    assert "uplink open" in "\n".join(d.proc.lines), d.proc.tail()

    g = Guest(procs, "guest", sock, MAC, f"{GUEST_IP}/24", "server", {"port": str(TO_GUEST_PORT)})
    assert g.booted()["mac"] == MAC
    g.result("listening", timeout=30)
    want_bytes, want_md5 = pattern(STREAM_N)

    # Wire -> guest: the namespace's stack connects to the guest.
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            ns,
            "python3",
            "-c",
            SEND,
            GUEST_IP,
            str(TO_GUEST_PORT),
            str(STREAM_N),
        ],
        check=True,
        timeout=150,
    )
    got = g.result("recv_bytes", timeout=120)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5), got

    # The guest pings the wire.
    pinged = g.shell_result(f"vping {WIRE_IP} 3", "ping_rx", timeout=60)
    assert pinged.get("ping_rx") == "3", pinged

    # Guest -> wire: the guest's TSO segments leave through the uplink, cut.
    recv = subprocess.Popen(
        ["ip", "netns", "exec", ns, "python3", "-c", RECEIVE, WIRE_IP, str(TO_WIRE_PORT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert recv.stdout.readline().strip() == "listening"
        sent = g.shell_result(
            f"vsend {WIRE_IP} {TO_WIRE_PORT} {STREAM_N}", "send_bytes", timeout=150
        )
        out, _ = recv.communicate(timeout=160)
    finally:
        recv.kill()
    assert sent["rc"] == "0", sent
    n, md5 = out.split()
    assert (int(n), md5) == (want_bytes, want_md5), out

    st = d.stats()
    up = port(st, "up0")
    assert total(up, "tx_bytes") >= want_bytes, up  # wire -> switch
    assert total(up, "rx_bytes") >= want_bytes, up  # switch -> wire
    assert total(up, "gso_frames") > 0, up  # the guest's segments, cut at the uplink
    assert g.poweroff() == 0

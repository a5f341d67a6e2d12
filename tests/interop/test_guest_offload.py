"""Guest-side offloads between Linux guests on the vadapt switch (issue #15):
three QEMU TCG guests, the Debian kernel's own virtio-net driver.

Guests A and B negotiate every offload vadapt offers (checksum and TSO both
ways). A sends B a TCP stream of more than 20 MB: A's TCP segments of up to
64 KiB cross the switch whole and reach B with their virtio-net header, as
vhost-net with tap would hand them over — B's port shows a mean frame size
above 1514 bytes and GSO frames passed whole. Guest C is started with its
guest offloads off (`guest_csum=off,guest_tso4=off,...`): the same stream
from the same sender reaches it cut into MSS frames and checksummed by
vadapt at C's egress. Both receivers check the stream byte for byte (md5).

A writes the stream with `dd bs=1M` straight into the socket (`nc -e`):
piped through busybox `nc`, which writes a few KiB at a time, a TCG guest
sends mostly single segments, as its peer acknowledges each write at once,
and there would be few large segments to see.
"""

from __future__ import annotations

import time

from test_qemu import pattern

from harness import Guest, Vadapt, port, total

MAC_A, MAC_B, MAC_C = "52:54:00:5a:00:11", "52:54:00:5a:00:12", "52:54:00:5a:00:13"
IP_A, IP_B, IP_C = "10.0.1.1", "10.0.1.2", "10.0.1.3"
PORT = 5001
# `seq 1 N`: 21.3 MB.
STREAM_N = 2_800_000
# A's sender: the stream file into the socket, a MiB per write.
TX_SCRIPT = r"printf '#!/bin/sh\nexec dd if=/tmp/data bs=1M 2>/dev/null\n' >/tmp/tx.sh"
GUEST_OFFLOADS_OFF = ",guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off"

# virtio-net feature bits, as /sys/class/net/eth0/device/features shows them
# (one character per bit, bit 0 first).
CSUM, GUEST_CSUM, GUEST_TSO4, HOST_TSO4 = 0, 1, 7, 11


def features(g: Guest) -> str:
    """The feature bits the guest's driver negotiated."""
    out = g.shell("cat /sys/class/net/eth0/device/features")
    bits = [line.strip() for line in out if set(line.strip()) <= {"0", "1"} and line.strip()]
    assert bits, out
    return bits[-1]


def test_tso_segments_cross_whole_and_are_cut_for_a_guest_without_offloads(vadapt_bin, qemu, procs):
    socks = {n: procs.workdir / f"vm{n}.sock" for n in "abc"}
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [a for n in "abc" for a in ("--vm", f"name=vm{n},socket={socks[n]},queues=1")],
        cpus=None,  # three TCG guests need both cores more than the daemon does
    ).start(list(socks.values()))

    a = Guest(procs, "guest-a", socks["a"], MAC_A, f"{IP_A}/24", "shell")
    b = Guest(procs, "guest-b", socks["b"], MAC_B, f"{IP_B}/24", "server", {"port": str(PORT)})
    c = Guest(
        procs,
        "guest-c",
        socks["c"],
        MAC_C,
        f"{IP_C}/24",
        "server",
        {"port": str(PORT)},
        net_opts=GUEST_OFFLOADS_OFF,
    )
    for g, mac in ((a, MAC_A), (b, MAC_B), (c, MAC_C)):
        assert g.booted()["mac"] == mac
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.result("listening", timeout=30)
    c.result("listening", timeout=30)

    fa = features(a)
    assert fa[CSUM] == fa[HOST_TSO4] == fa[GUEST_CSUM] == fa[GUEST_TSO4] == "1", fa

    want = pattern(STREAM_N)
    started = time.monotonic()
    a.shell(f"vpattern {STREAM_N} >/tmp/data", timeout=300)
    a.shell(f"{TX_SCRIPT} && chmod +x /tmp/tx.sh")
    made = time.monotonic() - started
    times = []
    for g, peer in ((b, IP_B), (c, IP_C)):
        started = time.monotonic()
        a.shell(f"nc {peer} {PORT} -e /tmp/tx.sh", timeout=600)
        got = g.result("recv_bytes", timeout=120)
        times.append(time.monotonic() - started)
        assert (int(got["recv_bytes"]), got["recv_md5"]) == want, got
    print(f"\n{want[0]} bytes: made in {made:.1f} s, A->B {times[0]:.1f} s, A->C {times[1]:.1f} s")

    # The receivers' drivers negotiated what the test says they did (after
    # the stream: the server role takes commands once it has received).
    b.proc.wait_for("VADAPT-READY", timeout=30)
    c.proc.wait_for("VADAPT-READY", timeout=30)
    fb, fc = features(b), features(c)
    assert fb[GUEST_CSUM] == fb[GUEST_TSO4] == "1", fb
    assert fc[GUEST_CSUM] == fc[GUEST_TSO4] == "0", fc
    assert fc[CSUM] == fc[HOST_TSO4] == "1", fc

    st = d.stats()
    pa, pb, pc = port(st, "vma"), port(st, "vmb"), port(st, "vmc")
    print(
        "mean frame bytes: A tx "
        f"{total(pa, 'tx_bytes') / max(1, total(pa, 'tx_packets')):.0f}, B rx "
        f"{total(pb, 'rx_bytes') / max(1, total(pb, 'rx_packets')):.0f}, C rx "
        f"{total(pc, 'rx_bytes') / max(1, total(pc, 'rx_packets')):.0f}"
    )
    # Whole segments reached B: frames larger than any plain Ethernet frame.
    assert total(pb, "rx_bytes") >= want[0], pb
    assert total(pb, "rx_bytes") > 1514 * total(pb, "rx_packets"), pb
    assert total(pb, "gso_whole") > 0, pb
    assert total(pb, "gso_frames") == 0, pb
    # C got the same stream cut at its egress, no frame above 1514 bytes.
    assert total(pc, "rx_bytes") >= want[0], pc
    assert total(pc, "gso_frames") > 0, pc
    assert total(pc, "gso_whole") == 0, pc
    assert total(pc, "rx_bytes") <= 1514 * total(pc, "rx_packets"), pc
    for p in (pa, pb, pc):
        assert sum(q.get("dropped", {}).get("bad_vnet_hdr", 0) for q in p["queues"]) == 0, p
    for g in (a, b, c):
        assert g.poweroff() == 0

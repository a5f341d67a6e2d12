"""Jumbo frames between two QEMU guests (issue 26, item 4): TCG, the Debian
kernel's own virtio-net driver, both vadapt ports with `mtu=9000`.

QEMU offers the guests `VIRTIO_NET_F_MTU` with `host_mtu=9000` and keeps the
feature only because vadapt offers it too, so each guest's eth0 comes up
with a 9000-byte MTU. A pings B with 8972-byte payloads (9000-byte IP
packets, 9014-byte frames) and every request crosses the switch as one
frame: busybox's ping has no `-M do`, so the unfragmented path is shown by
B's port counting one frame per request, where a 1500-byte path would take
seven fragments each. Then a TCP stream A -> B is checked byte for byte at
both ends (md5).
"""

from __future__ import annotations

from test_qemu import pattern

from harness import Guest, Vadapt, port, total

MAC_A, MAC_B = "52:54:00:5a:00:21", "52:54:00:5a:00:22"
IP_A, IP_B = "10.0.2.1", "10.0.2.2"
PORT = 5001
STREAM_N = 300_000
PINGS = 5
# 9000-byte IPv4 packets: 8972 bytes of ICMP payload behind 8 + 20 bytes of headers.
PING_SIZE = 8972
FRAME = 14 + 20 + 8 + PING_SIZE


def dropped(p: dict, reason: str) -> int:
    return sum(q.get("dropped", {}).get(reason, 0) for q in p["queues"])


def test_jumbo_ping_and_stream_between_two_9000_byte_guests(vadapt_bin, qemu, procs):
    socks = {n: procs.workdir / f"vm{n}.sock" for n in "ab"}
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [a for n in "ab" for a in ("--vm", f"name=vm{n},socket={socks[n]},queues=1,mtu=9000")],
        cpus=None,  # two TCG guests need both cores more than the daemon does
    ).start(list(socks.values()))
    a = Guest(procs, "guest-a", socks["a"], MAC_A, f"{IP_A}/24", "shell", net_opts=",host_mtu=9000")
    b = Guest(
        procs,
        "guest-b",
        socks["b"],
        MAC_B,
        f"{IP_B}/24",
        "server",
        {"port": str(PORT)},
        net_opts=",host_mtu=9000",
    )
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.result("listening", timeout=30)

    # The guest's driver took the MTU from the config space.
    assert "9000" in [line.strip() for line in a.shell("cat /sys/class/net/eth0/mtu")]

    # One warm-up ping resolves B's MAC, so that the counted ones are alone.
    a.shell(f"ping -c 1 -W 5 {IP_B} >/dev/null")
    before = port(d.stats(), "vmb")
    out = a.shell(f"ping -c {PINGS} -i 0.2 -W 2 -s {PING_SIZE} {IP_B}", timeout=60)
    assert any(f"{PINGS} packets received" in line for line in out), out
    after = d.wait_stats(
        lambda s: total(port(s, "vmb"), "tx_packets") - total(before, "tx_packets") >= PINGS
    )
    pb = port(after, "vmb")
    rx_frames = total(pb, "rx_packets") - total(before, "rx_packets")
    rx_bytes = total(pb, "rx_bytes") - total(before, "rx_bytes")
    tx_bytes = total(pb, "tx_bytes") - total(before, "tx_bytes")
    print(f"\nB: {rx_frames} frames, {rx_bytes} bytes in; {tx_bytes} bytes out")
    assert rx_bytes >= PINGS * FRAME, pb
    assert tx_bytes >= PINGS * FRAME, pb
    # Whole: one frame per request (and perhaps a few of ARP or IPv6), not seven.
    assert PINGS <= rx_frames < 2 * PINGS, pb

    want_bytes, want_md5 = pattern(STREAM_N)
    sent = a.shell_result(f"vsend {IP_B} {PORT} {STREAM_N}", "send_bytes", timeout=150)
    got = b.result("recv_bytes", timeout=60)
    assert sent["rc"] == "0", sent
    assert (int(sent["send_bytes"]), sent["send_md5"]) == (want_bytes, want_md5)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5)

    st = d.stats()
    for name in ("vma", "vmb"):
        p = port(st, name)
        assert dropped(p, "over_mtu") == 0, p
        assert dropped(p, "bad_vnet_hdr") == 0, p
    b.proc.wait_for("VADAPT-READY", timeout=30)
    assert "9000" in [line.strip() for line in b.shell("cat /sys/class/net/eth0/mtu")]
    for g in (a, b):
        assert g.poweroff() == 0

"""Restarting vadapt under traffic without restarting a VM.

Two QEMU TCG guests on one vadapt switch; guest A streams a large TCP
transfer to guest B and pings it every PING_INTERVAL_S meanwhile; vadapt is
stopped (SIGTERM) and started again in the middle of the transfer. The
transfer must complete with the right length and md5, both QEMU processes
must be the ones started at the beginning (no guest rebooted), and the
figures of the outage are printed (`RESTART-OUTAGE ...`, run pytest with
`-s` to see them; docs/reliability.md records them):

* `down_ms`: SIGTERM to the old daemon until the new one's sockets exist;
* `reconnect_ms`: SIGTERM until both VM ports are connected again;
* `ping_lost` and `outage_ms`: pings without a reply, and the longest time
  without a reply in ms, as guest A saw them (see `outage`): the outage of
  the guests' network.

Both ways round, as OVS-DPDK offers them:

* `server`: vadapt listens, QEMU connects with `reconnect=1` (QEMU retries
  once a second, so the outage includes up to a second of QEMU's timer);
* `client`: QEMU listens (`server=on,wait=off`), vadapt connects
  (`--vm ...,mode=client`) and reconnects with backoff.
"""

from __future__ import annotations

import re
import time

import pytest

from harness import Guest, HarnessError, Vadapt, outage, pattern, port, total

MAC_A = "52:54:00:5a:00:11"
MAC_B = "52:54:00:5a:00:12"
IP_A, IP_B = "10.0.1.1", "10.0.1.2"
PORT = 5002
# `seq 1 N`: ~11.6 MB, several seconds under TCG, so the restart lands in it.
STREAM_N = 1_600_000
# Restart once this much of the stream crossed the switch.
RESTART_AFTER_BYTES = 1_000_000
PING_INTERVAL_S = 0.05
PINGS = 1200  # 60 s of pings at most; the guest stops them after the stream


def test_outage():
    assert outage([(0, 1.0), (1, 1.0), (2, 1.0), (5, 1.0), (6, 1.0)], 50) == (2, 100.0)
    # Queued while the link was down and answered late: not lost, still an outage.
    # (The link is down from 30 to 430 ms: ping 1 waits, pings 2-8 are lost.)
    assert outage([(0, 1.0), (1, 381.0), (9, 1.0)], 50) == (7, 380.0)
    assert outage([(3, 1.0)], 50) == (0, 0.0)
    assert outage([], 50) == (0, 0.0)


def daemon(vadapt_bin, procs, socks, mode: str, name: str) -> Vadapt:
    args = []
    for vm, sock in zip(("vma", "vmb"), socks, strict=True):
        spec = f"name={vm},socket={sock},queues=1"
        if mode == "client":
            spec += ",mode=client"
        args += ["--vm", spec]
    # In server mode vadapt creates the sockets; in client mode QEMU does.
    return Vadapt(vadapt_bin, procs.workdir, procs, args, cpus=None, name=name).start(
        list(socks) if mode == "server" else []
    )


def both_connected(s: dict) -> bool:
    return port(s, "vma")["connected"] and port(s, "vmb")["connected"]


@pytest.mark.parametrize("mode", ["server", "client"])
def test_transfer_survives_a_daemon_restart(vadapt_bin, qemu, procs, mode):
    socks = (procs.workdir / "ra.sock", procs.workdir / "rb.sock")
    chardev = ",reconnect=1" if mode == "server" else ",server=on,wait=off"
    d = daemon(vadapt_bin, procs, socks, mode, "vadapt-1")
    a = Guest(procs, "guest-a", socks[0], MAC_A, f"{IP_A}/24", "shell", chardev=chardev)
    b = Guest(
        procs, "guest-b", socks[1], MAC_B, f"{IP_B}/24", "server", {"port": str(PORT)}, chardev
    )
    pids = (a.proc.popen.pid, b.proc.popen.pid)
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.result("listening", timeout=30)
    d.wait_stats(both_connected, timeout=20)
    assert a.shell_result(f"vping {IP_B} 3", "ping_rx", timeout=60)["ping_rx"] == "3"

    want_bytes, want_md5 = pattern(STREAM_N)
    a.shell(f"ping -i {PING_INTERVAL_S} -c {PINGS} -W 1 {IP_B} >/tmp/ping.txt 2>&1 &")
    a.shell(f"vsend {IP_B} {PORT} {STREAM_N} >/tmp/send.txt 2>&1 &")

    # Restart in the middle of the stream.
    deadline = time.monotonic() + 120
    while total(port(d.stats(), "vma"), "tx_bytes") < RESTART_AFTER_BYTES:
        assert time.monotonic() < deadline, "the stream did not start"
        time.sleep(0.05)
    t0 = time.monotonic()
    rc = d.proc.stop(grace=3.0)
    assert rc == 0, f"vadapt exited {rc} on SIGTERM\n{d.proc.tail()}"
    d = daemon(vadapt_bin, procs, socks, mode, "vadapt-2")
    down_ms = (time.monotonic() - t0) * 1000
    d.wait_stats(both_connected, timeout=20, settle=20)
    reconnect_ms = (time.monotonic() - t0) * 1000
    assert both_connected(d.stats()), d.proc.tail()

    got = b.result("recv_bytes", timeout=240)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5), got
    sent = a.shell_result("cat /tmp/send.txt", "send_bytes", timeout=60)
    assert sent["rc"] == "0", sent
    a.shell("kill %1 2>/dev/null; killall ping 2>/dev/null; true")
    replies = [
        (int(m.group(1)), float(m.group(2)))
        for line in a.shell("cat /tmp/ping.txt", timeout=60)
        if (m := re.search(r"seq=(\d+) .*time=([0-9.]+) ms", line))
    ]
    assert replies, "no ping reply at all"
    lost, gap_ms = outage(replies, PING_INTERVAL_S * 1000)
    # The network is back: traffic flows through the new daemon both ways.
    assert a.shell_result(f"vping {IP_B} 3", "ping_rx", timeout=60)["ping_rx"] == "3"
    assert b.shell_result(f"vping {IP_A} 3", "ping_rx", timeout=60)["ping_rx"] == "3"
    st = d.stats()
    assert total(port(st, "vmb"), "rx_bytes") > 0, st

    # No guest was restarted: the same QEMU processes, one boot each.
    assert (a.proc.popen.pid, b.proc.popen.pid) == pids
    assert a.proc.alive() and b.proc.alive()
    for g in (a, b):
        boots = sum("boot=ok" in line for line in g.proc.lines)
        if boots != 1:
            raise HarnessError(f"{g.name} booted {boots} times\n{g.proc.tail()}")
    print(
        f"\nRESTART-OUTAGE mode={mode} down_ms={down_ms:.0f} reconnect_ms={reconnect_ms:.0f} "
        f"replies={len(replies)} ping_lost={lost} outage_ms={gap_ms:.0f} "
        f"stream_bytes={want_bytes}"
    )
    assert a.poweroff() == 0
    assert b.poweroff() == 0

"""Two QEMU guests (TCG, the Debian kernel's own virtio-net driver) on one
vadapt switch: ping, a TCP stream checked byte for byte at both ends, and a
guest restarted against the same socket while the daemon keeps running.

The guests run tests/interop/guest/init (built into the initramfs by
scripts/guest-image.sh); they print `VADAPT-RESULT k=v` lines on the serial
console, and the `shell` role takes commands on it.
"""

from __future__ import annotations

import hashlib
import signal

from harness import Guest, Testpmd, Vadapt, port, total, wait_path

MAC_A = "52:54:00:5a:00:01"
MAC_B = "52:54:00:5a:00:02"
IP_A, IP_B = "10.0.0.1", "10.0.0.2"
PORT = 5001
# The stream is `seq 1 N` (deterministic, so the host recomputes it): ~2 MB.
STREAM_N = 300_000
PINGS = 5


def pattern(n: int) -> tuple[int, str]:
    data = "".join(f"{i}\n" for i in range(1, n + 1)).encode()
    return len(data), hashlib.md5(data).hexdigest()


def ping(a: Guest, peer: str) -> dict[str, str]:
    r = a.shell_result(f"vping {peer} {PINGS}", "ping_rx", timeout=60)
    assert int(r["ping_tx"]) == PINGS, r
    assert int(r["ping_rx"]) == PINGS, r
    return r


def test_two_guests_ping_stream_and_reconnect(vadapt_bin, qemu, procs):
    a_sock, b_sock = procs.workdir / "vma.sock", procs.workdir / "vmb.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm",
            f"name=vma,socket={a_sock},queues=1",
            "--vm",
            f"name=vmb,socket={b_sock},queues=1",
        ],
        cpus=None,  # two TCG guests need both cores more than the daemon does
    ).start([a_sock, b_sock])
    daemon_pid = d.proc.popen.pid

    a = Guest(procs, "guest-a", a_sock, MAC_A, f"{IP_A}/24", "shell")
    b = Guest(procs, "guest-b", b_sock, MAC_B, f"{IP_B}/24", "server", {"port": str(PORT)})
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.result("listening", timeout=30)

    ping(a, IP_B)

    want_bytes, want_md5 = pattern(STREAM_N)
    sent = a.shell_result(f"vsend {IP_B} {PORT} {STREAM_N}", "send_bytes", timeout=150)
    got = b.result("recv_bytes", timeout=60)
    assert sent["rc"] == "0", sent
    assert (int(sent["send_bytes"]), sent["send_md5"]) == (want_bytes, want_md5)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5)

    st = d.stats()
    assert port(st, "vma")["connected"] and port(st, "vmb")["connected"]
    # The stream crossed the switch: at least its payload went A -> B.
    assert total(port(st, "vma"), "tx_bytes") >= want_bytes
    assert total(port(st, "vmb"), "rx_bytes") >= want_bytes

    # Guest B dies without warning; the daemon must notice and keep serving.
    b.proc.stop(signal.SIGKILL)
    st = d.wait_stats(lambda s: not port(s, "vmb")["connected"], timeout=15)
    assert not port(st, "vmb")["connected"], "daemon still shows vmb connected"
    assert port(st, "vma")["connected"]

    b2 = Guest(procs, "guest-b2", b_sock, MAC_B, f"{IP_B}/24", "shell")
    assert b2.booted()["mac"] == MAC_B
    b2.proc.wait_for("VADAPT-READY", timeout=30)
    ping(a, IP_B)
    ping(b2, IP_A)

    assert d.proc.alive() and d.proc.popen.pid == daemon_pid, d.proc.tail()
    st = d.stats()
    assert port(st, "vmb")["connected"]
    assert a.poweroff() == 0
    assert b2.poweroff() == 0
    assert d.proc.alive(), d.proc.tail()


def test_reference_guests_ping_through_dpdk(qemu, testpmd, procs):
    """The guest image against DPDK's vhost PMD (two ports, io forwarding):
    proves the guest side when a vadapt test fails."""
    a_sock, b_sock = procs.workdir / "a.sock", procs.workdir / "b.sock"
    be = Testpmd(
        procs,
        "backend",
        [
            "--vdev", f"net_vhost0,iface={a_sock},queues=1",
            "--vdev", f"net_vhost1,iface={b_sock},queues=1",
        ],
        ["--forward-mode=io"],
        lcores="0@0,1@1",
    )  # fmt: skip
    wait_path(a_sock, 20, be.proc)
    wait_path(b_sock, 20, be.proc)
    be.start()
    b = Guest(procs, "guest-b", b_sock, MAC_B, f"{IP_B}/24", "shell")
    a = Guest(
        procs, "guest-a", a_sock, MAC_A, f"{IP_A}/24", "ping", {"peer": IP_B, "count": str(PINGS)}
    )
    b.booted()
    r = a.result("ping_rx", timeout=120)
    assert int(r["ping_rx"]) == PINGS, r
    assert a.proc.wait_exit(30) == 0
    assert b.poweroff() == 0

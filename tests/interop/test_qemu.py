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


class Flow:
    """Guest A (shell role) and guest B (server role) on two sockets of one
    backend: ping, stream, kill B, boot B again on the same socket, ping.
    The hooks let the vadapt test check the daemon between the phases."""

    def __init__(self, procs, a_sock, b_sock):
        self.procs, self.a_sock, self.b_sock = procs, a_sock, b_sock

    def after_stream(self, nbytes: int) -> None:
        pass

    def after_kill(self) -> None:
        pass

    def run(self) -> None:
        a = Guest(self.procs, "guest-a", self.a_sock, MAC_A, f"{IP_A}/24", "shell")
        b = Guest(
            self.procs, "guest-b", self.b_sock, MAC_B, f"{IP_B}/24", "server", {"port": str(PORT)}
        )
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
        self.after_stream(want_bytes)

        # Guest B dies without warning; the backend must keep serving A and
        # take a new frontend on B's socket.
        b.proc.stop(signal.SIGKILL)
        self.after_kill()
        b2 = Guest(self.procs, "guest-b2", self.b_sock, MAC_B, f"{IP_B}/24", "shell")
        assert b2.booted()["mac"] == MAC_B
        b2.proc.wait_for("VADAPT-READY", timeout=30)
        ping(a, IP_B)
        ping(b2, IP_A)
        assert a.poweroff() == 0
        assert b2.poweroff() == 0


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

    class VadaptFlow(Flow):
        def after_stream(self, nbytes):
            st = d.stats()
            a, b = port(st, "vma"), port(st, "vmb")
            assert a["connected"] and b["connected"], st
            # The stream crossed the switch: at least its payload went A -> B.
            assert total(a, "tx_bytes") >= nbytes, a
            assert total(b, "rx_bytes") >= nbytes, b

        def after_kill(self):
            st = d.wait_stats(lambda s: not port(s, "vmb")["connected"], timeout=15)
            assert not port(st, "vmb")["connected"], "daemon still shows vmb connected"
            assert port(st, "vma")["connected"]

    VadaptFlow(procs, a_sock, b_sock).run()
    assert d.proc.alive() and d.proc.popen.pid == daemon_pid, d.proc.tail()
    # Both guests powered off: the daemon sees both frontends gone and lives on.
    st = d.wait_stats(lambda s: not any(p["connected"] for p in s["ports"]), timeout=15)
    assert not any(p["connected"] for p in st["ports"]), st
    assert d.proc.alive(), d.proc.tail()


def test_reference_guests_through_dpdk(qemu, testpmd, procs):
    """The same flow against DPDK's vhost PMD (two ports, io forwarding):
    proves the guest image and the harness when a vadapt test fails."""
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
    Flow(procs, a_sock, b_sock).run()
    assert be.proc.alive()

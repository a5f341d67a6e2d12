"""Packed virtqueues (`VIRTIO_F_RING_PACKED`, issue #28) against real
frontends.

* DPDK virtio-user with `packed_vq=1`, in order and not: testpmd's txonly
  frames reach a sink, every one counted. DPDK falls back to the split ring
  silently when the backend does not offer bit 34 (docs/architecture.md), so the test
  checks the features the daemon logged as negotiated, not only the count.
* A QEMU TCG guest with `packed=on` on its virtio-net device and a second
  guest on a split ring, on one switch: ping, and a TCP stream each way
  checked by md5.
* vadapt's synthetic guest with `--packed on` against DPDK's vhost PMD
  (testpmd `macswap`): requests one way, replies the other, every one
  answered, on rings DPDK's vhost library drives as packed ones.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from test_dpdk import FRAME, RUN_S, UNSEALED
from test_qemu import pattern

from harness import Guest, Testpmd, Vadapt, dropped, port, total, wait_path

RING_PACKED = 1 << 34
IN_ORDER = 1 << 35


def negotiated(d: Vadapt, name: str) -> int:
    """The features the daemon logged as negotiated for port `name`."""
    for line in reversed(d.proc.lines):
        if "features negotiated" in line and f'port="{name}"' in line:
            m = re.search(r"features=(0x[0-9a-f]+)", line)
            if m:
                return int(m.group(1), 16)
    raise AssertionError("no `features negotiated` line for " + name + "\n" + d.proc.tail())


@pytest.mark.parametrize("in_order", [0, 1])
def test_dpdk_packed_vq_into_sink_exact_counts(vadapt_bin, testpmd, procs, in_order):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock},queues=1,{UNSEALED}", "--sink", "sink0"],
    ).start([sock])
    fe = Testpmd(
        procs,
        "testpmd",
        [
            "--single-file-segments",
            "--vdev",
            f"net_virtio_user0,path={sock},queues=1,packed_vq=1,in_order={in_order}",
        ],
        ["--forward-mode=txonly", f"--txpkts={FRAME}"],
    )
    sent = fe.run_for(RUN_S).tx
    assert sent > 0, fe.proc.tail()
    features = negotiated(d, "vm1")
    assert features & RING_PACKED, f"packed ring not negotiated: {features:#x}"
    assert bool(features & IN_ORDER) == bool(in_order), f"{features:#x}"
    st = d.wait_stats(lambda s: total(port(s, "vm1"), "tx_packets") >= sent)
    vm, sink = port(st, "vm1"), port(st, "sink0")
    assert total(vm, "tx_packets") == sent, vm
    assert total(vm, "tx_bytes") == sent * FRAME
    assert dropped(vm) == 0, vm
    assert total(sink, "rx_packets") == sent, sink
    assert fe.quit() == 0
    assert d.proc.alive(), d.proc.tail()


def test_dpdk_packed_vq_refused_when_the_port_says_so(vadapt_bin, testpmd, procs):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock},queues=1,packed=off,{UNSEALED}", "--sink", "sink0"],
    ).start([sock])
    fe = Testpmd(
        procs,
        "testpmd",
        ["--single-file-segments", "--vdev", f"net_virtio_user0,path={sock},queues=1,packed_vq=1"],
        ["--forward-mode=txonly", f"--txpkts={FRAME}"],
    )
    sent = fe.run_for(RUN_S).tx
    assert sent > 0, fe.proc.tail()
    assert not negotiated(d, "vm1") & RING_PACKED
    st = d.wait_stats(lambda s: total(port(s, "vm1"), "tx_packets") >= sent)
    assert total(port(st, "vm1"), "tx_packets") == sent
    assert fe.quit() == 0


def test_synthetic_guest_packed_against_dpdk_vhost(vadapt_bin, testpmd, procs):
    """The synthetic guest as the frontend, DPDK's vhost PMD as the backend:
    `--packed on` fails unless DPDK offers bit 34, and the report says the
    rings were packed; testpmd swaps the MACs and sends every request back."""
    sock = procs.workdir / "vh.sock"
    be = Testpmd(
        procs,
        "backend",
        ["--vdev", f"net_vhost0,iface={sock},queues=1"],
        ["--forward-mode=macswap"],
        lcores="0@0,1@1",
    )
    wait_path(sock, 20, be.proc)
    be.start()
    out = subprocess.run(
        [
            str(vadapt_bin),
            "guest",
            "--socket",
            str(sock),
            "--packed",
            "on",
            "--mode",
            "rr",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--dst-mac",
            "02:00:00:00:00:77",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr + "\n" + be.proc.tail()
    r = json.loads(out.stdout)
    assert r["ring"] == "packed", r
    assert r["features"] & RING_PACKED, f"{r['features']:#x}"
    assert r["error"] is None, r
    sent = r["sent_packets"]
    assert sent > 100, r
    assert r["lost_requests"] == 0, r
    assert r["recv_packets"] == sent, r
    st = be.stop()
    assert st.rx == sent and st.tx == sent, (st, sent)
    assert be.quit() == 0


MAC_A, MAC_B = "52:54:00:5a:00:28", "52:54:00:5a:00:29"
IP_A, IP_B = "10.0.28.1", "10.0.28.2"
PORT_AB, PORT_BA = 5001, 5002
STREAM_N = 300_000


def test_a_packed_guest_and_a_split_guest_on_one_switch(vadapt_bin, qemu, procs):
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
        cpus=None,
    ).start([a_sock, b_sock])
    a = Guest(procs, "guest-a", a_sock, MAC_A, f"{IP_A}/24", "shell", net_opts=",packed=on")
    b = Guest(procs, "guest-b", b_sock, MAC_B, f"{IP_B}/24", "server", {"port": str(PORT_AB)})
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.result("listening", timeout=30)
    assert negotiated(d, "vma") & RING_PACKED, "guest A's ring is packed"
    assert not negotiated(d, "vmb") & RING_PACKED, "guest B's ring is split"

    pinged = a.shell_result(f"vping {IP_B} 3", "ping_rx", timeout=60)
    assert pinged.get("ping_rx") == "3", pinged

    want_bytes, want_md5 = pattern(STREAM_N)
    # A (packed) -> B (split).
    sent = a.shell_result(f"vsend {IP_B} {PORT_AB} {STREAM_N}", "send_bytes", timeout=150)
    got = b.result("recv_bytes", timeout=120)
    assert sent["rc"] == "0", sent
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5), got
    # B (split) -> A (packed): A receives in the background into a file.
    a.shell(f"vrecv {PORT_BA} > /tmp/rx.result 2>&1 &")
    a.wait_file("/tmp/rx.result", "listening", timeout=30)
    sent = b.shell_result(f"vsend {IP_A} {PORT_BA} {STREAM_N}", "send_bytes", timeout=150)
    assert sent["rc"] == "0", sent
    got = a.wait_file("/tmp/rx.result", "recv_bytes", timeout=120)
    assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5), got

    st = d.stats()
    assert total(port(st, "vma"), "tx_bytes") >= want_bytes
    assert total(port(st, "vma"), "rx_bytes") >= want_bytes
    assert a.poweroff() == 0

"""DPDK virtio-user (dpdk-testpmd) as the frontend of a vadapt VM port.

DPDK virtio-user runs the guest driver's ring logic in userspace; it never
negotiates EVENT_IDX nor the MAC feature, so those are covered by the QEMU
tests. Cores (2 on these machines): testpmd's forwarding lcore on CPU 0,
its idle main lcore and the daemon on CPU 1.

Counters are compared exactly: testpmd's TX-packets counts frames it put
in the ring, and once the daemon has drained the ring every one of them must
be counted by the VM port and by the switch port that took it.
"""

from __future__ import annotations

import time

import pytest

from harness import Testpmd, Vadapt, dropped, port, total, wait_path

FRAME = 64  # bytes per frame sent by testpmd (--txpkts), no virtio-net header
RUN_S = 3.0  # seconds of traffic per run
# DPDK virtio-user shares guest memory that is not sealed against shrinking;
# vadapt refuses that unless the port says otherwise.
UNSEALED = "unsealed_memory=accept"
# flowgen subtracts the 4-byte Ethernet FCS from --txpkts (DPDK 22.11
# app/test-pmd/flowgen.c), txonly does not.
FLOWGEN_FRAME = FRAME - 4


def virtio_user(sock, queues: int) -> list[str]:
    return [
        "--single-file-segments",  # one memfd per segment, shareable with the backend
        "--vdev",
        f"net_virtio_user0,path={sock},queues={queues}",
    ]


@pytest.mark.parametrize("queues", [1, 2])
def test_txonly_into_sink_exact_counts(vadapt_bin, testpmd, procs, queues):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock},queues={queues},{UNSEALED}", "--sink", "sink0"],
    ).start([sock])
    fe = Testpmd(
        procs,
        "testpmd",
        virtio_user(sock, queues),
        ["--forward-mode=txonly", f"--txpkts={FRAME}", f"--rxq={queues}", f"--txq={queues}"],
    )
    sent = fe.run_for(RUN_S).tx
    assert sent > 0, fe.proc.tail()

    def drained(st):
        return total(port(st, "vm1"), "tx_packets") >= sent

    st = d.wait_stats(drained)
    vm, sink = port(st, "vm1"), port(st, "sink0")
    assert vm["kind"] == "vm" and vm["connected"], vm
    assert len(vm["queues"]) == queues, vm
    assert total(vm, "tx_packets") == sent
    assert total(vm, "tx_bytes") == sent * FRAME
    assert dropped(vm) == 0, vm
    # The switch floods testpmd's (unknown) destination to the only other port.
    assert total(sink, "rx_packets") + dropped(sink) == sent, sink
    assert total(sink, "rx_packets") == sent, sink
    assert total(sink, "rx_bytes") == sent * FRAME
    if queues > 1:
        # testpmd's txonly engine sends on every queue.
        assert all(q["tx_packets"] > 0 for q in vm["queues"]), vm
    assert fe.quit() == 0
    assert d.proc.alive(), d.proc.tail()


def test_echo_returns_every_packet(vadapt_bin, testpmd, procs):
    """flowgen sends and also receives (and frees) what comes back; a final
    rxonly run collects what was still in flight (--no-flush-rx keeps testpmd
    from discarding it at `start`). Every frame the echo port emitted must then
    be either counted by testpmd or dropped (counted) by vadapt."""
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock},queues=1,{UNSEALED}", "--echo", "echo0"],
    ).start([sock])
    fe = Testpmd(
        procs,
        "testpmd",
        virtio_user(sock, 1),
        ["--forward-mode=flowgen", f"--txpkts={FRAME}", "--no-flush-rx"],
    )
    burst = fe.run_for(RUN_S)
    assert burst.tx > 0, fe.proc.tail()
    got = burst.rx

    def settled(st):
        vm, echo = port(st, "vm1"), port(st, "echo0")
        return (
            total(vm, "tx_packets") == burst.tx
            and total(echo, "rx_packets") + dropped(echo) == burst.tx
            and total(echo, "tx_packets") == total(vm, "rx_packets") + dropped(vm)
        )

    # Collect what is still in flight: rxonly runs until vadapt has nothing
    # more to deliver and testpmd has read all it delivered (at most 10 runs).
    fe.cmd("set fwd rxonly")
    for _ in range(10):
        late = fe.run_for(0.5)
        assert late.tx == 0
        got += late.rx
        st = d.wait_stats(settled, timeout=5)
        if late.rx == 0 and settled(st) and total(port(st, "vm1"), "rx_packets") == got:
            break

    vm, echo = port(st, "vm1"), port(st, "echo0")
    assert total(vm, "tx_packets") == burst.tx
    assert total(vm, "tx_bytes") == burst.tx * FLOWGEN_FRAME
    assert total(echo, "rx_packets") + dropped(echo) == burst.tx, echo
    assert total(echo, "tx_packets") == total(echo, "rx_packets"), echo
    echo_bytes = total(echo, "rx_packets") * FLOWGEN_FRAME
    assert total(echo, "tx_bytes") == total(echo, "rx_bytes") == echo_bytes
    assert total(vm, "rx_packets") + dropped(vm) == total(echo, "tx_packets"), vm
    # What vadapt put in the guest's receive ring is exactly what testpmd read.
    assert got == total(vm, "rx_packets"), (burst, got, vm)
    assert total(vm, "rx_bytes") == got * FLOWGEN_FRAME
    assert got > 0
    assert fe.quit() == 0
    assert d.proc.alive(), d.proc.tail()


def test_reference_dpdk_vhost_backend(testpmd, procs):
    """The same txonly count check against DPDK's own vhost PMD: proves the
    harness (and the machine) when a vadapt test fails."""
    sock = procs.workdir / "vh.sock"
    be = Testpmd(
        procs,
        "backend",
        ["--vdev", f"net_vhost0,iface={sock},queues=1"],
        ["--forward-mode=rxonly"],
        lcores="0@0,1@1",
    )
    wait_path(sock, 20, be.proc)
    be.start()
    fe = Testpmd(procs, "testpmd", virtio_user(sock, 1), ["--forward-mode=txonly", "--txpkts=64"])
    sent = fe.run_for(2.0).tx
    assert sent > 0
    # The backend busy-polls: once the frontend stopped, the ring empties at once.
    time.sleep(0.5)
    assert be.stop().rx == sent
    assert fe.quit() == 0
    assert be.quit() == 0

"""Tenants on one daemon (issue 37): a hostile frontend against its
neighbours, through the release binary.

`test_source_mac_spoofing`: the issue's attack. vm1 (the victim, a
synthetic guest) sends 100 frames/s to a sink; vm3's frontend, a raw
vhost-user client (vhost_raw.py) that puts whatever it likes on its
transmit ring, sends frames with vm1's MAC as their source; meanwhile vm2 (a
synthetic guest) sends to vm1's MAC. Each VM port has its VM's `mac=`, so
port security is on. The victim must lose nothing and the attacker receive
nothing: vm1 gets every frame vm2 sent, vm3 none, every frame vm3 sent as vm1
is a `spoofed_src` drop with a log line naming vm3 and the address, and
`vadapt fdb` shows vm1's MAC static on vm1. (Before port security vm3
received most of vm2's frames.)

`test_ip_spoofing` (one case each: an ARP reply, a gratuitous ARP, an
IPv6 Neighbor Advertisement): every port also has `allowed_ips=`, and
vm3's raw frontend sends, from its own MAC, ARP or ND claiming vm1's IP
address, while vm2 sends to vm1. The victim must lose nothing and nobody
receive the lie: vm1 gets exactly what vm2 sent (no spoofed broadcast
reaches it), vm2 gets nothing, vm3 nothing, every spoofed frame is a
`spoofed_ip` drop with a log line naming vm3, and vm3's one truthful ARP
or NA (its own address, to the sink) passes.

No timing is asserted: counts only.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

import pytest

import harness
import vhost_raw as vr
from vhost_raw import Frontend, Region

VM1 = "02:00:00:00:00:a1"
VM2 = "02:00:00:00:00:a2"
VM3 = "02:00:00:00:00:a3"
SINK = "02:00:00:00:00:5e"

# The raw frontend's guest memory: one sealed memfd region at gpa 0, its
# transmit ring and 64 frame buffers in it.
MEM_SIZE = 2 << 20
UVA = 0x7F12_0000_0000
RING_OFF = 0x10000
DATA_OFF = 0x40000
RING_SIZE = 256
TXQ = 1  # queue pair 0's transmit ring
# The attacker's frames as vm1: a first burst before vm2 sends, then about
# 5 k/s (the rate) for as long as vm2 sends, at most what the raw
# ring's 16-bit index counts without wrapping.
FIRST_BURST = 1000
MOST_SPOOFED = 60_000


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


class RawSender:
    """A frontend with one running transmit ring and no receive ring: it
    sends what it is told, and takes nothing."""

    def __init__(self, socket_path: Path):
        self.fe = Frontend(socket_path)
        self.fe.handshake()
        self.memfd = vr.memfd(MEM_SIZE, sealed=True)
        self.buf = mmap.mmap(self.memfd, MEM_SIZE)
        self.fe.ok(vr.SET_MEM_TABLE, vr.mem_table([Region(0, MEM_SIZE, UVA)]), [self.memfd])
        self.ring = vr.SplitRing(self.buf, 0, UVA, RING_OFF, RING_SIZE)
        self.fe.ok(vr.SET_VRING_NUM, vr.vring_state(TXQ, RING_SIZE))
        self.fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(TXQ, *self.ring.addrs()))
        self.fe.ok(vr.SET_VRING_BASE, vr.vring_state(TXQ, 0))
        self.kick, self.call = vr.eventfd(), vr.eventfd()
        self.fe.ok(vr.SET_VRING_KICK, vr.u64(TXQ), [self.kick])
        self.fe.ok(vr.SET_VRING_CALL, vr.u64(TXQ), [self.call])
        self.fe.ok(vr.SET_VRING_ENABLE, vr.vring_state(TXQ, 1))

    def send(self, dst: str, src: str, n: int) -> None:
        """`n` frames from `src` to `dst`, 32 at a time, each batch used
        before its buffers are written again."""
        for start in range(0, n, 32):
            for _ in range(min(32, n - start)):
                off = DATA_OFF + 128 * (self.ring.avail_idx % 64)
                data = vr.frame(mac_bytes(dst), mac_bytes(src))
                self.buf[off : off + len(data)] = data
                self.ring.push(off, len(data))
            os.eventfd_write(self.kick, 1)
            assert self.ring.wait_used(self.ring.avail_idx), "the daemon stopped taking frames"

    def send_frames(self, frames: list[bytes], n: int) -> None:
        """`n` frames, `frames` (Ethernet, up to 128 bytes) in turn, as
        `send` sends them."""
        for start in range(0, n, 32):
            for i in range(min(32, n - start)):
                off = DATA_OFF + 128 * (self.ring.avail_idx % 64)
                eth = frames[(start + i) % len(frames)]
                data = bytes(12) + eth + bytes(max(0, 60 - len(eth)))
                assert len(data) <= 128
                self.buf[off : off + len(data)] = data
                self.ring.push(off, len(data))
            os.eventfd_write(self.kick, 1)
            assert self.ring.wait_used(self.ring.avail_idx), "the daemon stopped taking frames"

    def close(self) -> None:
        self.fe.close()
        for fd in (self.kick, self.call):
            os.close(fd)
        try:
            self.buf.close()
        except (BufferError, ValueError):
            pass
        os.close(self.memfd)


def guest(vadapt_bin: Path, workdir: Path, name: str, sock: Path, args: list[str]):
    return harness.Proc(name, [str(vadapt_bin), "guest", "--socket", str(sock), *args], workdir)


def delivered(p: dict) -> int:
    """Frames the switch handed port `p`: into its guest's rings, or
    dropped there; not its own frames the switch refused."""
    refused = sum(
        q.get("dropped", {}).get(r, 0) for q in p["queues"] for r in ("spoofed_src", "spoofed_ip")
    )
    return harness.total(p, "rx_packets") + harness.dropped(p) - refused


def test_source_mac_spoofing(vadapt_bin, procs):
    work = procs.workdir
    socks = {n: work / f"{n}.sock" for n in ("vm1", "vm2", "vm3")}
    macs = {"vm1": VM1, "vm2": VM2, "vm3": VM3}
    ports = [a for n, s in socks.items() for a in ("--vm", f"name={n},socket={s},mac={macs[n]}")]
    d = harness.Vadapt(
        vadapt_bin,
        work,
        procs,
        [*ports, "--sink", f"sink0,mac={SINK}", "--policy", "interrupt"],
    ).start(list(socks.values()))
    victim = procs.add(
        guest(
            vadapt_bin,
            work,
            "vm1",
            socks["vm1"],
            ["--rate", "100", "--duration", "120s", "--dst-mac", SINK],
        )
    )
    attacker = RawSender(socks["vm3"])
    try:
        attacker.send(SINK, VM1, FIRST_BURST)
        sender = procs.add(
            guest(
                vadapt_bin,
                work,
                "vm2",
                socks["vm2"],
                ["--rate", "20k", "--duration", "2s", "--dst-mac", VM1],
            )
        )
        # The attack goes on while vm2 sends.
        while sender.popen.poll() is None and attacker.ring.avail_idx < MOST_SPOOFED:
            attacker.send(SINK, VM1, 32)
            time.sleep(0.006)
        assert sender.wait_exit(60) == 0, sender.tail()
        sent_as_vm1 = attacker.ring.avail_idx
        # Its own address passes: one frame to the sink.
        attacker.send(SINK, VM3, 1)

        def settled(s: dict) -> bool:
            tx2 = harness.total(harness.port(s, "vm2"), "tx_packets")
            return tx2 > 0 and harness.total(harness.port(s, "vm1"), "rx_packets") >= tx2

        st = d.wait_stats(settled, timeout=10)
        vm1, vm2, vm3 = (harness.port(st, n) for n in ("vm1", "vm2", "vm3"))
        sent = harness.total(vm2, "tx_packets")
        spoofed = sum(q.get("dropped", {}).get("spoofed_src", 0) for q in vm3["queues"])
        print(
            f"TENANCY vm2 sent {sent} to vm1's MAC; vm1 got {harness.total(vm1, 'rx_packets')} "
            f"(dropped {harness.dropped(vm1)}), vm3 got {delivered(vm3)}; vm3 sent "
            f"{sent_as_vm1} as vm1, {spoofed} dropped (spoofed_src)"
        )
        assert sent > 1000, d.proc.tail()
        assert delivered(vm3) == 0, f"the attacker received frames: {vm3}"
        assert harness.total(vm1, "rx_packets") == sent, f"vm1 lost frames: {vm1}"
        assert spoofed == sent_as_vm1, vm3
        assert harness.total(vm3, "tx_packets") == sent_as_vm1 + 1
        sink = harness.port(st, "sink0")
        assert harness.total(sink, "rx_packets") == harness.total(vm1, "tx_packets") + 1
    finally:
        attacker.close()
        victim.stop()
    m, _ = d.proc.wait_for(r"whose source address is not the port.s \(port security", 5)
    assert 'port="vm3"' in m.string and f"src={VM1}" in m.string, m.string
    fdb = d.ask("fdb")
    static = {(e["port"], e["mac"]) for e in fdb["entries"] if e["kind"] == "static"}
    assert {("vm1", VM1), ("vm2", VM2), ("vm3", VM3), ("sink0", SINK)} <= static, fdb
    assert sum(e["mac"] == VM1 for e in fdb["entries"]) == 1, fdb
    assert fdb["learned"] == 0, fdb


IPS = {
    "vm1": ("10.0.0.1", "fd00::1"),
    "vm2": ("10.0.0.2", "fd00::2"),
    "vm3": ("10.0.0.3", "fd00::3"),
}


def ip4(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def ip6(a: str) -> bytes:
    import ipaddress

    return ipaddress.IPv6Address(a).packed


def arp(dst: str, op: int, sha: str, spa: str, tpa: str) -> bytes:
    """An ARP packet in an Ethernet frame from `sha`."""
    tha = bytes(6) if dst == "ff:ff:ff:ff:ff:ff" else mac_bytes(dst)
    body = struct.pack(">HHBBH", 1, 0x0800, 6, 4, op) + mac_bytes(sha) + ip4(spa) + tha + ip4(tpa)
    return mac_bytes(dst) + mac_bytes(sha) + b"\x08\x06" + body


def link_local(mac: str) -> bytes:
    m = mac_bytes(mac)
    return bytes([0xFE, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 2, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]])


def neighbor_advertisement(dst_mac: str, src_mac: str, target: str) -> bytes:
    """An unsolicited, overriding NA for `target` with `src_mac` as its
    target link-layer address, from `src_mac`'s link-local address to all
    nodes (the checksum is not computed: the switch does not read it)."""
    icmp = bytes([136, 0, 0, 0, 0x20, 0, 0, 0]) + ip6(target) + bytes([2, 1]) + mac_bytes(src_mac)
    ip = (
        struct.pack(">IHBB", 0x6000_0000, len(icmp), 58, 255) + link_local(src_mac) + ip6("ff02::1")
    )
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + b"\x86\xdd" + ip + icmp


# The lies vm3 tells about vm1's addresses, and one truth about its own, to the sink.
ATTACKS = {
    "arp_reply": (
        arp(VM2, 2, VM3, IPS["vm1"][0], IPS["vm2"][0]),
        arp(SINK, 2, VM3, IPS["vm3"][0], "10.0.0.254"),
    ),
    "gratuitous_arp": (
        arp("ff:ff:ff:ff:ff:ff", 1, VM3, IPS["vm1"][0], IPS["vm1"][0]),
        arp(SINK, 2, VM3, IPS["vm3"][0], "10.0.0.254"),
    ),
    "neighbor_advertisement": (
        neighbor_advertisement("33:33:00:00:00:01", VM3, IPS["vm1"][1]),
        neighbor_advertisement(SINK, VM3, IPS["vm3"][1]),
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_ip_spoofing(vadapt_bin, procs, attack):
    lie, truth = ATTACKS[attack]
    work = procs.workdir
    socks = {n: work / f"{n}.sock" for n in ("vm1", "vm2", "vm3")}
    macs = {"vm1": VM1, "vm2": VM2, "vm3": VM3}
    ports = [
        a
        for n, s in socks.items()
        for a in ("--vm", f"name={n},socket={s},mac={macs[n]},allowed_ips={'+'.join(IPS[n])}")
    ]
    d = harness.Vadapt(
        vadapt_bin,
        work,
        procs,
        [*ports, "--sink", f"sink0,mac={SINK}", "--policy", "interrupt"],
    ).start(list(socks.values()))
    victim = procs.add(
        guest(
            vadapt_bin,
            work,
            "vm1",
            socks["vm1"],
            ["--rate", "100", "--duration", "120s", "--dst-mac", SINK],
        )
    )
    attacker = RawSender(socks["vm3"])
    try:
        attacker.send_frames([lie], FIRST_BURST)
        sender = procs.add(
            guest(
                vadapt_bin,
                work,
                "vm2",
                socks["vm2"],
                ["--rate", "20k", "--duration", "2s", "--dst-mac", VM1],
            )
        )
        while sender.popen.poll() is None and attacker.ring.avail_idx < MOST_SPOOFED:
            attacker.send_frames([lie], 32)
            time.sleep(0.006)
        assert sender.wait_exit(60) == 0, sender.tail()
        lies = attacker.ring.avail_idx
        attacker.send_frames([truth], 1)

        def settled(s: dict) -> bool:
            tx2 = harness.total(harness.port(s, "vm2"), "tx_packets")
            sink = harness.total(harness.port(s, "sink0"), "rx_packets")
            tx1 = harness.total(harness.port(s, "vm1"), "tx_packets")
            return (
                tx2 > 0
                and harness.total(harness.port(s, "vm1"), "rx_packets") >= tx2
                and sink > tx1
            )

        st = d.wait_stats(settled, timeout=10)
        vm1, vm2, vm3 = (harness.port(st, n) for n in ("vm1", "vm2", "vm3"))
        sent = harness.total(vm2, "tx_packets")
        spoofed = sum(q.get("dropped", {}).get("spoofed_ip", 0) for q in vm3["queues"])
        print(
            f"TENANCY {attack}: vm2 sent {sent} to vm1; "
            f"vm1 got {harness.total(vm1, 'rx_packets')}, "
            f"vm2 got {delivered(vm2)}, vm3 got {delivered(vm3)}; vm3 lied {lies} times, "
            f"{spoofed} dropped (spoofed_ip)"
        )
        assert sent > 1000, d.proc.tail()
        assert delivered(vm3) == 0, f"the attacker received frames: {vm3}"
        assert delivered(vm2) == 0, f"vm2 received the attacker's frames: {vm2}"
        assert harness.total(vm1, "rx_packets") == sent, f"vm1 lost frames or got the lie: {vm1}"
        assert harness.dropped(vm1) == 0, vm1
        assert spoofed == lies, vm3
        assert harness.total(vm3, "tx_packets") == lies + 1
        sink = harness.port(st, "sink0")
        assert harness.total(sink, "rx_packets") == harness.total(vm1, "tx_packets") + 1, (
            "the truth passes"
        )
    finally:
        attacker.close()
        victim.stop()
    m, _ = d.proc.wait_for(r"whose IP sender is not the port.s \(IP source guard", 5)
    claimed = IPS["vm1"][1] if attack == "neighbor_advertisement" else IPS["vm1"][0]
    assert 'port="vm3"' in m.string and claimed in m.string, m.string

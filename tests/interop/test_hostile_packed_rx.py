"""test_hostile_packed.py's ring attacks on a packed *receive* ring: the
buffers the daemon writes frames into.

The same rig and invariants after every case (test_hostile.py's fixtures:
a daemon of its own, vm2's synthetic guest still forwarding, no descriptor
leaks, RSS bounded), and an echo port added to it. The raw frontend sets up
both of vm1's rings as packed rings; a frame it transmits to the echo port
comes back to vm1 (the switch learned vm1's address from it) and is written
into vm1's receive buffers. Each frame carries its sequence number, so a
case checks what landed where, byte for byte.

- bad buffers: device-readable ones, outside guest memory or past its end,
  bad indirect tables, a chain longer than the ring: each is given back used
  and empty, counted by reason, and the frame goes into the good buffer
  behind it;
- buffers too small for the virtio-net header and the frame (zero-length
  among them): the frame in hand is dropped with the buffer (`no_rx_buffer`,
  there is no MRG_RXBUF to spread it), the next one lands whole;
- buffer ids out of range or duplicated: frames land and come back under
  the ids the driver gave;
- AVAIL/USED bits that do not say "available": nothing is consumed, the
  frame waits and lands once the buffer is made available as it should be;
- a ring that is never replenished: frames wait (the backlog's overflow is
  counted as `backlog_full`), the worker does not spin, and each frame that
  waited lands, in order, once buffers come; frames still waiting when the
  frontend goes are counted dropped (`port_down`).
"""

from __future__ import annotations

import os
import struct
import time
from collections import deque
from dataclasses import dataclass, field

import pytest

import test_hostile as hostile
from test_hostile import MEM_SIZE, Rig, on
from test_hostile_packed import (
    BAD_INDIRECT_TABLES,
    DATA_SLOTS,
    DROPPED_LINE,
    OUTSIDE,
    RING_SIZE,
    SRC_MAC_PREFIX,
    TABLE_OFF,
    PackedTx,
    all_drops,
    bad_indirect_buffer,
    drops,
    indirect_table,
    mac,
    packed_tx,
    start_packed_ring,
)

import harness
import vhost_raw as vr
from vhost_raw import PackedRing, Seg

rig = hostile.rig
invariants = hostile.invariants

RXQ = 0  # ring 0 is queue pair 0's receive ring
ECHO = "echo0"
ECHO_MAC = "02:00:00:00:00:e0"
# vm1's receive ring, and its buffers: slots of BUF_LEN bytes (the ring,
# the transmit ring at 0x10000, the indirect tables at 0x30000 and the
# transmitted frames at 0x40000 stay clear of them).
RX_RING_OFF = 0x20000
RX_BUF_OFF = 0x100000
BUF_LEN = 2048
SLOTS = 256
# The source of the frames vm1 sends (PackedTx.frame_seg's default).
VM1_MAC = SRC_MAC_PREFIX + bytes([1])
HDR_LEN = 12  # virtio 1.0 header (num_buffers included), no MRG_RXBUF
WRITE = vr.VIRTQ_DESC_F_WRITE
# Worker CPU a ring left without buffers may cost over WATCH_S: far from a
# spinning core's.
WATCH_S = 0.5
MAX_CPU_S = 0.2


@pytest.fixture(scope="module", autouse=True)
def echo_port(rig):
    """An echo port: every frame vm1 sends it comes back to vm1."""
    rig.daemon.command("add-port", "--echo", f"{ECHO},mac={ECHO_MAC}")
    yield
    rig.daemon.command("del-port", ECHO)


def received_frame(tag: int) -> bytes:
    """What vm1 receives for the frame it sent with sequence number `tag`:
    its header (num_buffers 1) and the frame with its addresses swapped."""
    hdr = bytes(10) + struct.pack("<H", 1)
    eth = vr.frame(VM1_MAC, mac(ECHO_MAC), body=struct.pack("<I", tag))
    return hdr + eth[HDR_LEN:]


def echoed(rig: Rig) -> int:
    """Frames the echo port sent back (all of them to vm1)."""
    return harness.total(rig.port_stats(ECHO), "tx_packets")


@dataclass
class PackedRx:
    """vm1 with both rings packed: `tx` sends frames to the echo port, and
    they come back into `ring`, the receive ring."""

    tx: PackedTx
    ring: PackedRing
    kick: int
    call: int
    # The first buffer address of each id's buffers in flight, oldest first.
    addrs: dict[int, deque[int]] = field(default_factory=dict)
    slot: int = 0
    tags: int = 0

    def buffer(self, length: int = BUF_LEN) -> Seg:
        """A device-writable descriptor of `length` bytes at the next slot,
        filled with 0xee so that what the daemon writes shows."""
        off = RX_BUF_OFF + BUF_LEN * (self.slot % SLOTS)
        self.slot += 1
        self.tx.buf[off : off + BUF_LEN] = b"\xee" * BUF_LEN
        return Seg(off, length, WRITE)

    def post(self, segs: list[Seg], at: int | None = None, **kw) -> int:
        """Make a receive buffer available and kick; its id. `at`: where
        the bytes written into it land (by default: its first descriptor's
        address)."""
        id_ = self.ring.push_chain(segs, **kw)
        self.addrs.setdefault(id_, deque()).append(segs[0].addr if at is None else at)
        os.eventfd_write(self.kick, 1)
        return id_

    def post_good(self, n: int = 1) -> list[int]:
        return [self.post([self.buffer()]) for _ in range(n)]

    def send(self, n: int = 1) -> list[bytes]:
        """`n` frames to the echo port; what vm1 should receive for each."""
        out = []
        for start in range(0, n, DATA_SLOTS):
            batch = min(DATA_SLOTS, n - start)
            for _ in range(batch):
                body = struct.pack("<I", self.tags)
                self.tx.push([self.tx.frame_seg(dst=ECHO_MAC, body=body)])
                out.append(received_frame(self.tags))
                self.tags += 1
            assert len(self.tx.ring.wait_used(batch)) == batch, "vm1 did not transmit"
        return out

    def received(self, n: int, timeout: float = 5.0) -> list[tuple[int, bytes]]:
        """The next `n` used receive buffers (fewer if they do not come in
        time) as (id, the bytes written into it)."""
        out = []
        for id_, length in self.ring.wait_used(n, timeout):
            addr = self.addrs[id_].popleft()
            out.append((id_, bytes(self.tx.buf[addr : addr + length])))
        return out

    def close(self) -> None:
        for fd in (self.kick, self.call):
            os.close(fd)
        self.tx.close()


def packed_rx(rig: Rig, indirect: bool = False) -> PackedRx:
    """vm1's receive and transmit rings as packed rings, running (the
    receive ring set up first, as a frontend does), and vm1's address
    learned by the switch."""
    rx = {}

    def start_rx(fe, buf):
        rx["ring"] = start_packed_ring(fe, buf, RXQ, RX_RING_OFF, RING_SIZE)

    t = packed_tx(rig, indirect=indirect, before=start_rx)
    ring, kick, call = rx["ring"]
    assert ring.end <= TABLE_OFF
    r = PackedRx(t, ring, kick, call)
    # One frame there and back: the switch knows vm1 and the echo port.
    d = r.send(1)
    r.post_good()
    assert r.received(1) == [(0, d[0])], "the first frame did not come back"
    return r


def rx_packets(rig: Rig) -> int:
    return harness.total(rig.port_stats("vm1"), "rx_packets")


def bad_buffer_then_good(
    rig: Rig, r: PackedRx, segs: list[Seg], reason: str, costs_a_frame: bool = False, **kw
) -> None:
    """The bad receive buffer `segs`, then a good one: the bad one is given
    back used and empty and counted in `reason`, and a frame lands whole in
    the good one. With `costs_a_frame` the bad buffer takes the first frame
    with it: a second one lands in the good buffer."""
    d0 = drops(rig, reason)
    rx0 = rx_packets(rig)
    bad = r.post(segs, **kw)
    good = r.post_good()[0]
    frames = r.send(2 if costs_a_frame else 1)
    assert r.received(2) == [(bad, b""), (good, frames[-1])]
    assert harness.poll(lambda: drops(rig, reason) == d0 + 1, 5.0), (
        f"not counted as {reason}: {rig.port_stats('vm1')}"
    )
    assert rx_packets(rig) == rx0 + 1


# --- the control case -------------------------------------------------------------


def test_packed_rx_frames_land_in_the_buffers_over_laps(rig):
    """Frames through the echo port land whole, in order, in the receive
    buffers, for more than two laps of the ring (both wrap counters)."""
    r = packed_rx(rig)
    try:
        for _ in range(3):
            ids = r.post_good(200)
            frames = r.send(200)
            assert r.received(200) == list(zip(ids, frames, strict=True))
    finally:
        r.close()


# --- bad buffers ------------------------------------------------------------------


@pytest.mark.parametrize("which", ["only", "after-writable", "before-writable"])
def test_packed_rx_device_readable_buffer(rig, which):
    """A receive buffer the device may not write: alone, behind a writable
    part (the walk rejects it) or in front of one (the receive service
    does)."""
    r = packed_rx(rig)
    try:
        b = r.buffer()
        segs = {
            "only": [Seg(b.addr, BUF_LEN)],
            "after-writable": [Seg(b.addr, 1024, WRITE), Seg(b.addr + 1024, 1024)],
            "before-writable": [Seg(b.addr, 1024), Seg(b.addr + 1024, 1024, WRITE)],
        }[which]
        bad_buffer_then_good(rig, r, segs, "wrong_direction")
    finally:
        r.close()


@pytest.mark.parametrize("where", ["outside", "second-outside", "past-the-end"])
def test_packed_rx_buffer_outside_guest_memory(rig, where):
    r = packed_rx(rig)
    try:
        segs = {
            "outside": [Seg(OUTSIDE, BUF_LEN, WRITE)],
            "second-outside": [Seg(r.buffer().addr, 12, WRITE), Seg(OUTSIDE, 64, WRITE)],
            "past-the-end": [Seg(MEM_SIZE - 32, BUF_LEN, WRITE)],
        }[where]
        bad_buffer_then_good(rig, r, segs, "bad_address")
        rig.log(DROPPED_LINE, on("vm1"))
    finally:
        r.close()


@pytest.mark.parametrize("case", BAD_INDIRECT_TABLES)
def test_packed_rx_bad_indirect_table(rig, case):
    r = packed_rx(rig, indirect=case != "not-negotiated")
    try:
        segs = bad_indirect_buffer(r.tx, case, r.buffer())
        bad_buffer_then_good(rig, r, segs, "bad_indirect")
        rig.log(DROPPED_LINE, on("vm1"))
    finally:
        r.close()


def test_packed_rx_good_indirect_table(rig):
    """The control case: a frame lands in a buffer of two parts behind an
    indirect table, its header in the first."""
    r = packed_rx(rig, indirect=True)
    try:
        b = r.buffer()
        table = indirect_table(r.tx, [Seg(b.addr, 12, WRITE), Seg(b.addr + 12, 1024, WRITE)])
        id_ = r.post([Seg(table, 32, vr.VIRTQ_DESC_F_INDIRECT)], at=b.addr)
        frames = r.send(1)
        assert r.received(1) == [(id_, frames[0])]
    finally:
        r.close()


def test_packed_rx_chain_longer_than_the_ring(rig):
    """Every descriptor of the ring in one buffer, the last saying NEXT too:
    given back as one used buffer when a frame comes, which then waits for
    the next buffer, in the next lap."""
    r = packed_rx(rig)
    try:
        d0 = drops(rig, "chain_loop")
        b = r.buffer()
        bad = r.post([Seg(b.addr, 64, WRITE | vr.VIRTQ_DESC_F_NEXT)] * RING_SIZE)
        frames = r.send(1)
        assert r.received(1) == [(bad, b"")]
        assert harness.poll(lambda: drops(rig, "chain_loop") == d0 + 1, 5.0)
        good = r.post_good()[0]
        assert r.received(1) == [(good, frames[0])], "the frame did not wait for a buffer"
        rig.log(DROPPED_LINE, on("vm1"))
    finally:
        r.close()


@pytest.mark.parametrize("length", [0, 8, HDR_LEN + 14], ids=["empty", "under-header", "short"])
def test_packed_rx_buffer_too_small(rig, length):
    """Smaller than the frame behind its header: the frame is dropped with
    it (no MRG_RXBUF, so it may not go on into the next buffer)."""
    r = packed_rx(rig)
    try:
        bad_buffer_then_good(rig, r, [r.buffer(length)], "no_rx_buffer", costs_a_frame=True)
    finally:
        r.close()


def test_packed_rx_ids_out_of_range_and_duplicated(rig):
    """Buffer ids are the driver's: one past the ring, 0xffff, and two
    buffers in flight under one id each take a frame and come back under
    their ids, in order."""
    r = packed_rx(rig)
    try:
        ids = [RING_SIZE, 0xFFFF, 5, 5]
        for id_ in ids:
            r.post([r.buffer()], id_=id_)
        frames = r.send(4)
        assert r.received(4) == list(zip(ids, frames, strict=True))
    finally:
        r.close()


@pytest.mark.parametrize(
    "flags",
    [vr.VIRTQ_DESC_F_AVAIL | vr.VIRTQ_DESC_F_USED, 0, vr.VIRTQ_DESC_F_USED],
    ids=["both-bits", "no-bits", "previous-lap"],
)
def test_packed_rx_buffer_neither_available_nor_consumed(rig, flags):
    """AVAIL/USED bits that do not say "available in this lap": the daemon
    takes nothing, writes nothing, drops nothing; the frame waits, and lands
    in the buffer once its bits say "available"."""
    r = packed_rx(rig)
    try:
        d0, rx0 = all_drops(rig), rx_packets(rig)
        at = r.ring.next_avail
        id_ = r.post([r.buffer()], first_flags=flags | WRITE)
        before = r.ring.desc(at)
        frames = r.send(1)
        time.sleep(0.3)
        assert r.ring.desc(at) == before, "the daemon wrote a descriptor it never took"
        assert (all_drops(rig), rx_packets(rig)) == (d0, rx0)
        addr, length, _, _ = before
        r.ring.write_desc(at, addr, length, id_, WRITE | vr.avail_bits(r.ring.avail_wrap))
        os.eventfd_write(r.kick, 1)
        assert r.received(1) == [(id_, frames[0])]
    finally:
        r.close()


# --- a ring left without buffers ----------------------------------------------------


def worker_cpu_s(rig: Rig) -> float:
    """CPU seconds of vm1's queue worker."""
    ws = [w for w in rig.daemon.stats()["workers"] if w["name"] == "vm1"]
    assert len(ws) == 1, rig.daemon.stats()["workers"]
    return ws[0]["cpu_seconds"]


def test_packed_rx_never_replenished(rig):
    """Four buffers for 1500 frames: four land, the rest wait, the backlog's
    overflow is counted (`backlog_full`) and nothing else is dropped; the
    worker does not spin while they wait; once buffers come, every frame
    that waited lands, in order."""
    r = packed_rx(rig)
    try:
        d0, e0 = all_drops(rig), echoed(rig)
        n = 1500
        ids = r.post_good(4)
        frames = r.send(n)
        assert r.received(4) == list(zip(ids, frames[:4], strict=True))
        assert harness.poll(lambda: echoed(rig) == e0 + n, 5.0)
        cpu0 = worker_cpu_s(rig)
        time.sleep(WATCH_S)
        spent = worker_cpu_s(rig) - cpu0
        assert spent < MAX_CPU_S, f"the worker spun: {spent:.2f} s of CPU in {WATCH_S} s"
        assert r.ring.wait_used(1, timeout=0.1) == []
        got = []
        while True:
            ids = r.post_good(200)
            batch = r.received(200, timeout=1.0)
            got += [data for _, data in batch]
            if len(batch) < 200:
                break
        landed = 4 + len(got)
        assert got == frames[4:landed], "frames landed out of order or changed"
        d = all_drops(rig)
        grown = {k: v - d0.get(k, 0) for k, v in d.items() if v != d0.get(k, 0)}
        assert grown == {"backlog_full": n - landed}, (grown, landed)
    finally:
        r.close()


def test_packed_rx_frames_waiting_when_the_frontend_goes_are_counted(rig):
    """No buffers, frames waiting, the frontend goes: every frame sent to
    vm1 was either received or counted dropped."""
    r = packed_rx(rig)
    try:
        d0, rx0, e0 = sum(all_drops(rig).values()), rx_packets(rig), echoed(rig)
        r.send(100)
        assert harness.poll(lambda: echoed(rig) == e0 + 100, 5.0)
    finally:
        r.close()
    rig.log_re(hostile.ENDED_VM1)
    assert harness.poll(
        lambda: rx_packets(rig) - rx0 + sum(all_drops(rig).values()) - d0 == 100, 5.0
    ), f"{rx_packets(rig) - rx0} received, drops {all_drops(rig)} (before: {d0})"
